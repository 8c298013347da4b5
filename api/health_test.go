package api_test

import (
	"bufio"
	"encoding/json"
	"github.com/multiplane/multiplane/api"
	"github.com/multiplane/multiplane/internal/testutil"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/planes"
)

func TestHealthInAPIAndHistory(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p0-sw1", Interface: "Ethernet8", At: time.Now(), Oper: planes.OperDown}})

	var pl struct {
		State         string
		LinksDown     int     `json:"links_down"`
		CapacityRatio float64 `json:"capacity_ratio"`
	}
	f.do("GET", "/api/v1/planes/p0", f.admin, nil).json(t, &pl)
	if pl.State != "degraded" || pl.LinksDown != 1 || pl.CapacityRatio != 7.0/8 {
		t.Fatalf("p0 = %+v", pl)
	}
	var links struct {
		Items []struct{ Name, State, Endpoint string }
	}
	f.do("GET", "/api/v1/links?state=down", f.admin, nil).json(t, &links)
	if len(links.Items) != 1 || links.Items[0].Name != "p0-sw1:Ethernet8" || links.Items[0].Endpoint != "host-b" {
		t.Fatalf("down links = %+v", links.Items)
	}
	var sws struct {
		Items []struct {
			Name, State string
			Reachable   bool
		}
	}
	f.do("GET", "/api/v1/switches?state=degraded", f.admin, nil).json(t, &sws)
	if len(sws.Items) != 1 || sws.Items[0].Name != "p0-sw1" || !sws.Items[0].Reachable {
		t.Fatalf("degraded switches = %+v", sws.Items)
	}

	// The history lands in Postgres through the writer.
	deadline := time.Now().Add(10 * time.Second)
	var evs struct {
		Items []struct {
			ID                        int64
			SubjectKind               string `json:"subject_kind"`
			Subject, From, To, Reason string
		}
		NextCursor string `json:"next_cursor"`
	}
	for {
		f.do("GET", "/api/v1/events?subject=p0", f.admin, nil).json(t, &evs)
		if len(evs.Items) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(evs.Items) != 1 || evs.Items[0].To != "degraded" || evs.Items[0].SubjectKind != "plane" {
		t.Fatalf("events for p0 = %+v", evs.Items)
	}
	// p1 changes too: by plane, p0's three transitions (link, switch,
	// plane) and none of p1's; newest first pages back in time; until
	// bounds them.
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p1-sw1", Interface: "Ethernet8", At: time.Now(), Oper: planes.OperDown}})
	subjects := func(path string) (string, string) {
		t.Helper()
		evs.Items, evs.NextCursor = nil, ""
		if r := f.do("GET", path, f.admin, nil); r.Code != 200 {
			t.Fatalf("GET %s = %d %s", path, r.Code, r.Body)
		} else {
			r.json(t, &evs)
		}
		var out []string
		for _, e := range evs.Items {
			out = append(out, e.Subject)
		}
		return strings.Join(out, ","), evs.NextCursor
	}
	testutil.WaitFor(t, 10*time.Second, "p1's transitions in the history", func() bool {
		got, _ := subjects("/api/v1/events?plane=p1")
		return got == "p1-sw1:Ethernet8,p1-sw1,p1"
	})
	if got, _ := subjects("/api/v1/events?plane=p0"); got != "p0-sw1:Ethernet8,p0-sw1,p0" {
		t.Fatalf("events of plane p0: %s", got)
	}
	got, cursor := subjects("/api/v1/events?order=desc&limit=2")
	if got != "p1,p1-sw1" || cursor == "" {
		t.Fatalf("newest first: %s, cursor %q", got, cursor)
	}
	if got, _ := subjects("/api/v1/events?order=desc&limit=2&cursor=" + cursor); got != "p1-sw1:Ethernet8,p0" {
		t.Fatalf("newest first, second page: %s", got)
	}
	if got, _ := subjects("/api/v1/events?until=2020-01-01T00:00:00Z"); got != "" {
		t.Fatalf("events until 2020: %s", got)
	}
	for path, want := range map[string]int{
		"/api/v1/events?since=yesterday": 400, "/api/v1/events?subject_kind=rack": 400,
		"/api/v1/events?cursor=x": 400, "/api/v1/events?since=2026-01-02T15:04:05Z&limit=2": 200,
		"/api/v1/events?until=soon": 400, "/api/v1/events?order=sideways": 400, "/api/v1/events?plane=p9": 404,
	} {
		if r := f.do("GET", path, f.admin, nil); r.Code != want {
			t.Errorf("%s = %d, want %d", path, r.Code, want)
		}
	}
}

func TestStreamSendsSnapshotThenChanges(t *testing.T) {
	f := newFixture(t)
	f.loadExample()
	srv := httptest.NewServer(f.srv)
	t.Cleanup(srv.Close)
	type sse struct{ id, event, data string }
	open := func(lastID string) (<-chan sse, func()) {
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/stream", nil)
		req.Header.Set("Authorization", "Bearer "+f.admin)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		msgs := make(chan sse, 64)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			var cur sse
			for sc.Scan() {
				line := sc.Text()
				switch {
				case strings.HasPrefix(line, "id: "):
					cur.id = strings.TrimPrefix(line, "id: ")
				case strings.HasPrefix(line, "event: "):
					cur.event = strings.TrimPrefix(line, "event: ")
				case strings.HasPrefix(line, "data: "):
					cur.data = strings.TrimPrefix(line, "data: ")
				case line == "" && cur.event != "":
					msgs <- cur
					cur = sse{}
				}
			}
			close(msgs)
		}()
		return msgs, func() { resp.Body.Close() }
	}
	// next returns the next event of a kind, skipping the others.
	next := func(msgs <-chan sse, kind string) sse {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("the stream ended waiting for %s", kind)
				}
				if m.event == kind {
					return m
				}
			case <-deadline:
				t.Fatalf("no %s event within 10s", kind)
			}
		}
	}
	msgs, closeFirst := open("")
	var snapshot []struct{ Name, State string }
	if first := <-msgs; first.event != "planes" || json.Unmarshal([]byte(first.data), &snapshot) != nil || len(snapshot) != 4 {
		t.Fatalf("first event = %+v", first)
	}
	var sum api.StreamSummary
	if m := next(msgs, "summary"); json.Unmarshal([]byte(m.data), &sum) != nil || len(sum.Planes) != 4 || len(sum.Switches) != 4 || sum.At.IsZero() {
		t.Fatalf("summary = %+v", m)
	}
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p2-sw1", Interface: "Ethernet0", At: time.Now(), Oper: planes.OperDown}})
	var got, ids []string
	for len(got) < 3 {
		m := next(msgs, "state_change")
		var e planes.Event
		if json.Unmarshal([]byte(m.data), &e) != nil || m.id != strconv.FormatInt(e.ID, 10) || e.ID == 0 {
			t.Fatalf("event = %+v", m)
		}
		got, ids = append(got, e.SubjectKind+" "+e.Subject+" "+e.To), append(ids, m.id)
	}
	want := "link p2-sw1:Ethernet0 down,switch p2-sw1 degraded,plane p2 degraded"
	if strings.Join(got, ",") != want {
		t.Fatalf("stream = %v, want %s", got, want)
	}
	// The next summary shows the change in the live figures.
	testutil.WaitFor(t, 5*time.Second, "a summary with p2 degraded", func() bool {
		var s api.StreamSummary
		json.Unmarshal([]byte(next(msgs, "summary").data), &s)
		return len(s.Planes) == 4 && s.Planes[2].State == planes.PlaneDegraded && s.Planes[2].LinksDown == 1
	})
	closeFirst()

	// Disconnected after the first transition; two more happen meanwhile:
	// reconnecting with its id gets the rest and the new ones, in order.
	f.engine.ObserveInterfaces([]planes.InterfaceSample{{Switch: "p2-sw1", Interface: "Ethernet8", At: time.Now(), Oper: planes.OperDown}})
	resumed, closeSecond := open(ids[0])
	defer closeSecond()
	var again []string
	for len(again) < 3 {
		var e planes.Event
		json.Unmarshal([]byte(next(resumed, "state_change").data), &e)
		again = append(again, e.SubjectKind+" "+e.Subject+" "+e.To)
	}
	want = "switch p2-sw1 degraded,plane p2 degraded,link p2-sw1:Ethernet8 down"
	if strings.Join(again, ",") != want {
		t.Fatalf("resumed stream = %v, want %s", again, want)
	}
	for _, bad := range []string{"x", "-1"} {
		if r := f.do("GET", "/api/v1/stream", f.admin, nil, "Last-Event-ID", bad); r.Code != http.StatusBadRequest {
			t.Errorf("Last-Event-ID %q: %d", bad, r.Code)
		}
	}
	f.srv.Shutdown() // ends the stream, as fabricd does when it stops
	for range resumed {
	}
}
