package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/events"
	"github.com/multiplane/multiplane/internal/page"
	"github.com/multiplane/multiplane/planes"
)

// listEvents pages the history, oldest first (or newest first with
// order=desc); the cursor is the last id of the page.
func (s *Server) listEvents(c *gin.Context) {
	req, err := page.Parse(c.Query("limit"), "")
	if err != nil {
		fail(c, err)
		return
	}
	q := events.Query{Subject: c.Query("subject"), SubjectKind: c.Query("subject_kind"), Limit: req.Limit}
	switch q.SubjectKind {
	case "", planes.SubjectLink, planes.SubjectSwitch, planes.SubjectPlane, planes.SubjectHistory:
	default:
		fail(c, badRequest("invalid_parameter", "subject_kind", "subject_kind must be link, switch, plane or history"))
		return
	}
	switch c.Query("order") {
	case "", "asc":
	case "desc":
		q.Desc = true
	default:
		fail(c, badRequest("invalid_parameter", "order", "order must be asc (oldest first) or desc (newest first)"))
		return
	}
	for _, bound := range []struct {
		name string
		t    *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if v := c.Query(bound.name); v != "" {
			if *bound.t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				fail(c, badRequest("invalid_parameter", bound.name, "%s must be an RFC 3339 time, like 2026-12-02T14:00:00Z", bound.name))
				return
			}
		}
	}
	if cur := c.Query("cursor"); cur != "" {
		id, err := strconv.ParseInt(cur, 10, 64)
		if err != nil || id <= 0 {
			fail(c, badRequest("invalid_parameter", "cursor", "cursor is not one this API returned"))
			return
		}
		if q.Desc {
			q.BeforeID = id
		} else {
			q.AfterID = id
		}
	}
	if plane := c.Query("plane"); plane != "" {
		snap, ok := s.snapshot(c)
		if !ok {
			return
		}
		if !slices.ContainsFunc(snap.Topology.Planes, func(p planes.Plane) bool { return p.Name == plane }) {
			fail(c, fmt.Errorf("%w: plane %q", planes.ErrNotFound, plane))
			return
		}
		q.Subjects = []string{plane} // the plane, its switches and its links
		for _, sw := range snap.Topology.Switches {
			if sw.Plane == plane {
				q.Subjects = append(q.Subjects, sw.Name)
			}
		}
		for _, l := range snap.Links {
			if l.Plane == plane {
				q.Subjects = append(q.Subjects, l.Name)
			}
		}
	}
	evs, err := s.deps.Events.List(c.Request.Context(), q)
	if err != nil {
		fail(c, err)
		return
	}
	resp := listResponse[planes.Event]{Items: evs}
	if resp.Items == nil {
		resp.Items = []planes.Event{}
	}
	if len(evs) == req.Limit {
		resp.NextCursor = strconv.FormatInt(evs[len(evs)-1].ID, 10)
	}
	c.JSON(http.StatusOK, resp)
}

// tokenStillValid re-authenticates the request's token; only a definite
// refusal counts (a store that is away does not end streams).
func (s *Server) tokenStillValid(c *gin.Context) bool {
	secret, _ := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	_, err := s.deps.Tokens.Authenticate(c.Request.Context(), strings.TrimSpace(secret))
	return !errors.Is(err, auth.ErrUnauthenticated)
}

// streamPoll is how often a stream looks for new events in the history.
const streamPoll = 250 * time.Millisecond

// summaryEvery is how often a stream sends the live summary.
const summaryEvery = time.Second

// StreamSummary is the stream's periodic "summary" event: the live
// figures between transitions.
type StreamSummary struct {
	At       time.Time             `json:"at"`
	Planes   []planes.PlaneSummary `json:"planes"`
	Switches []SwitchSummary       `json:"switches"`
}

// SwitchSummary is a switch's live state in a summary.
type SwitchSummary struct {
	Name       string            `json:"name"`
	Plane      string            `json:"plane"`
	State      planes.PlaneState `json:"state"`
	Reachable  bool              `json:"reachable"`
	LastUpdate time.Time         `json:"last_update,omitzero"`
}

// stream sends server-sent events: first a "planes" snapshot, then a
// "summary" (StreamSummary) every second, and every transition of the
// history in order, each with its id ("id:" of the event): a client that
// reconnects with Last-Event-ID gets every transition after that id, so
// nothing is lost between connections. The transitions are read from the
// history (PostgreSQL), so every replica serves the same, in the same
// order. "end" says why the server ends a stream.
func (s *Server) stream(c *gin.Context) {
	if s.deps.Events == nil {
		fail(c, &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "no event stream in this server"})
		return
	}
	var last int64
	resume := c.GetHeader("Last-Event-ID")
	if resume == "" {
		resume = c.Query("last_event_id")
	}
	if resume != "" {
		id, err := strconv.ParseInt(resume, 10, 64)
		if err != nil || id < 0 {
			fail(c, badRequest("invalid_parameter", "last_event_id", "Last-Event-ID must be the id of an event this stream sent"))
			return
		}
		last = id
	} else {
		id, err := s.deps.Events.LastID(c.Request.Context())
		if err != nil {
			fail(c, err)
			return
		}
		last = id // from now on; the history before is GET /api/v1/events
	}
	p, _ := principal(c)
	if got := s.streams.acquire(p.TokenID); got != slotTaken {
		why := "fabricd serves at most " + strconv.Itoa(s.limits.MaxStreams) + " event streams at once"
		if got == slotsFullForToken {
			why = "this token has " + strconv.Itoa(s.limits.MaxStreamsPerTok) + " event streams open already, the most one token may have"
		}
		s.metrics.streamRefused.Inc()
		c.Header("Retry-After", "5")
		fail(c, &Error{Status: http.StatusTooManyRequests, Code: "too_many_streams", Message: why})
		return
	}
	defer s.streams.release(p.TokenID)
	w := c.Writer
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if c.Request.Method == http.MethodHead {
		return
	}
	// The server's read timeout would end the stream: a stream has no body
	// to wait for. Each write gets its own deadline instead of one for the
	// whole response.
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		loggerFrom(c).Debug("stream without read deadline control", "err", err)
	}
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		w.Flush()
		return true
	}
	send := func(event string, v any) bool {
		data, err := json.Marshal(v)
		return err == nil && write("event: %s\ndata: %s\n\n", event, data)
	}
	ctx := c.Request.Context()
	snap, err := s.deps.Inventory.Current(ctx)
	if err != nil || !send("planes", snap.Topology.PlaneSummaries(snap.Links, s.deps.Health)) {
		return
	}
	// tail sends the transitions after last, a page at a time.
	tail := func() bool {
		evs, err := s.deps.Events.List(ctx, events.Query{AfterID: last, Limit: 500})
		if err != nil {
			return ctx.Err() == nil // the store is away: try again at the next poll
		}
		for _, e := range evs {
			data, err := json.Marshal(e)
			if err != nil || !write("id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Kind, data) {
				return false
			}
			last = e.ID
		}
		return true
	}
	summary := func() bool {
		snap, err := s.deps.Inventory.Current(ctx)
		if err != nil {
			return ctx.Err() == nil
		}
		sum := StreamSummary{At: time.Now().UTC(), Planes: snap.Topology.PlaneSummaries(snap.Links, s.deps.Health),
			Switches: make([]SwitchSummary, len(snap.Topology.Switches))}
		for i, sw := range snap.Topology.Switches {
			st := planes.SwitchStatusOf(sw, s.deps.Health)
			sum.Switches[i] = SwitchSummary{Name: sw.Name, Plane: sw.Plane, State: st.State, Reachable: st.Reachable, LastUpdate: st.LastUpdate}
		}
		return send("summary", sum)
	}
	if !tail() || !summary() {
		return
	}
	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
	sums := time.NewTicker(summaryEvery)
	defer sums.Stop()
	heartbeat := time.NewTicker(s.limits.StreamHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			send("end", gin.H{"reason": "fabricd is stopping"})
			return
		case <-heartbeat.C:
			// A stream lives no longer than its token: an expired or
			// revoked one ends it at the next heartbeat.
			if !s.tokenStillValid(c) {
				send("end", gin.H{"reason": "the token expired or was revoked"})
				return
			}
			if !write(": ping\n\n") {
				return
			}
		case <-poll.C:
			if !tail() {
				return
			}
		case <-sums.C:
			if !summary() {
				return
			}
		}
	}
}
