package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/testutil"
)

// Invariants, as the report names them.
const (
	invTraffic     = "traffic >= 70% of the healthy planes' capacity while 3 of 4 planes are up"
	invAgentsMono  = "no agent's applied generation goes backwards"
	invComplete    = "no agent applies a partial generation"
	invGenerations = "generations never go backwards"
	invHistory     = "no transition missing from the history"
	invConverge    = "every replica converges to the same state"
)

// trafficFloor is the share of the up planes' capacity each receiver must
// get every second while at least 3 of 4 planes are up.
const trafficFloor = 0.70

// settleAfterPlane: seconds right after a plane failed or came back are
// not judged (detection and re-steering take that long by design).
const settleAfterPlane = 3 * time.Second

// watchTraffic judges every receiver's goodput each second.
func (s *suite) watchTraffic(ctx context.Context) {
	receivers := []int{1, 3} // pairs 0→1, 2→3
	prev := make([]uint64, len(receivers))
	for i, h := range receivers {
		prev[i] = s.env.Received(h)
	}
	minRatio := 10.0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			if minRatio < 10 {
				s.note("traffic", "lowest judged second: %.0f%% of the up planes' capacity", 100*minRatio)
			}
			return
		case <-tick.C:
		}
		now := time.Now()
		up := 0
		for p := range planes {
			if s.env.Fabric.PlaneUp(p) {
				up++
			}
		}
		s.mu.Lock()
		moved := s.planeMoved
		s.mu.Unlock()
		judged := up >= planes-1 && now.Sub(moved) > settleAfterPlane+now.Sub(last)
		for i, h := range receivers {
			got := s.env.Received(h)
			bps := float64(got-prev[i]) * 8 / now.Sub(last).Seconds()
			prev[i] = got
			if !judged {
				continue
			}
			ratio := bps / (float64(up) * rateBps)
			minRatio = min(minRatio, ratio)
			s.count(invTraffic, 1)
			if ratio < trafficFloor {
				s.violate(invTraffic, "host %d received %.1f Mbit/s at %v, %.0f%% of %d planes' %.0f Mbit/s",
					h, bps/1e6, now.Sub(s.start).Round(time.Second), 100*ratio, up, float64(up)*rateBps/1e6)
			}
		}
		last = now
	}
}

// watchAgents checks that no agent's applied generation goes back.
func (s *suite) watchAgents(ctx context.Context) {
	last := map[string]uint64{}
	for ctx.Err() == nil {
		for _, a := range s.env.Agents {
			g := a.Status().AppliedGeneration
			s.count(invAgentsMono, 1)
			if g < last[a.Endpoint()] {
				s.violate(invAgentsMono, "%s applied generation %d after %d", a.Endpoint(), g, last[a.Endpoint()])
			}
			last[a.Endpoint()] = g
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// apiState is what a replica's API says of the planes and switches.
type apiState struct {
	Planes   map[string]string // plane -> state
	Switches map[string]string // switch -> state, reachability, collector
}

func (s *suite) stateOf(r *replica) (apiState, error) {
	st := apiState{Planes: map[string]string{}, Switches: map[string]string{}}
	var ps struct {
		Items []struct{ Name, State string }
	}
	if err := r.proc.GetJSON(s.ctx, "/api/v1/planes", &ps); err != nil {
		return st, err
	}
	for _, p := range ps.Items {
		st.Planes[p.Name] = p.State
	}
	var sws struct {
		Items []struct {
			Name, State string
			Reachable   bool
			CollectedBy string `json:"collected_by"`
		}
	}
	if err := r.proc.GetJSON(s.ctx, "/api/v1/switches", &sws); err != nil {
		return st, err
	}
	for _, sw := range sws.Items {
		st.Switches[sw.Name] = fmt.Sprintf("%s reachable=%v", sw.State, sw.Reachable)
	}
	return st, nil
}

// checkConvergence waits until every replica shows the same, healthy
// fabric once everything is repaired.
func (s *suite) checkConvergence() {
	var states []apiState
	var why string
	converged := func() bool {
		states = states[:0]
		for _, r := range s.replicas {
			st, err := s.stateOf(r)
			if err != nil {
				why = fmt.Sprintf("%s: %v", r.name, err)
				return false
			}
			states = append(states, st)
		}
		for i, st := range states {
			for name, p := range st.Planes {
				if p != "healthy" {
					why = fmt.Sprintf("%s: plane %s %s", s.replicas[i].name, name, p)
					return false
				}
			}
			if fmt.Sprint(st) != fmt.Sprint(states[0]) {
				why = fmt.Sprintf("%s shows %v, %s %v", s.replicas[i].name, st, s.replicas[0].name, states[0])
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for !converged() {
		if time.Now().After(deadline) {
			s.violate(invConverge, "not within 60 s of the last repair: %s", why)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.count(invConverge, len(s.replicas))
	start := time.Now()
	testutil.WaitFor(s.t, 60*time.Second, "every agent on the last generation", func() bool {
		resp, err := s.env.Etcd.Get(s.ctx, contract.KeyGeneration)
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		var g contract.GenerationDoc
		if json.Unmarshal(resp.Kvs[0].Value, &g) != nil {
			return false
		}
		// The last generation must be the repaired fabric's: the API
		// shows a plane healthy before the leader's hold publishes it.
		for _, p := range g.Planes {
			if p.State != "healthy" {
				return false
			}
		}
		for _, a := range s.env.Agents {
			sp, err := s.env.Etcd.Get(s.ctx, contract.KeyEndpoint(a.Endpoint()))
			if err != nil || len(sp.Kvs) == 0 {
				return false
			}
			var spec contract.EndpointSpec
			if json.Unmarshal(sp.Kvs[0].Value, &spec) != nil || a.Status().AppliedGeneration != contract.Configuration(spec, g).Generation {
				return false
			}
		}
		return true
	})
	s.note("convergence", "after the last repair: every replica the same and healthy, every agent on the last generation %v later",
		time.Since(start).Round(100*time.Millisecond))
}

// genVersion is one value the generation key had, at its etcd revision.
type genVersion struct {
	rev int64
	doc contract.GenerationDoc
}

// checkGenerations reads the generation key's whole history: its
// generations only grow, and every configuration an agent applied is
// exactly what one complete generation resolves to for it (its document
// and the planes as of the revision announcing that generation).
func (s *suite) checkGenerations() {
	cli := s.env.Etcd
	// What the agents applied, taken before the generation key is read:
	// a generation published in between (fabricd keeps running) would
	// otherwise be applied but not in the history read.
	s.applied.mu.Lock()
	docs := slices.Clone(s.applied.docs)
	s.applied.mu.Unlock()
	now, err := cli.Get(s.ctx, contract.KeyGeneration)
	if err != nil {
		s.violate(invGenerations, "read: %v", err)
		return
	}
	wctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var hist []genVersion
	for resp := range cli.Watch(wctx, contract.KeyGeneration, clientv3.WithRev(1)) {
		if err := resp.Err(); err != nil {
			s.violate(invGenerations, "history: %v", err)
			return
		}
		for _, ev := range resp.Events {
			var d contract.GenerationDoc
			if err := json.Unmarshal(ev.Kv.Value, &d); err != nil {
				s.violate(invGenerations, "revision %d: %v", ev.Kv.ModRevision, err)
				continue
			}
			hist = append(hist, genVersion{ev.Kv.ModRevision, d})
		}
		if len(hist) > 0 && hist[len(hist)-1].rev >= now.Kvs[0].ModRevision {
			break // up to the version read above
		}
	}
	for i := 1; i < len(hist); i++ {
		if hist[i].doc.Generation < hist[i-1].doc.Generation {
			s.violate(invGenerations, "generation %d (revision %d) after %d (revision %d)",
				hist[i].doc.Generation, hist[i].rev, hist[i-1].doc.Generation, hist[i-1].rev)
		}
	}
	s.count(invGenerations, len(hist))
	s.note("generations", "%d versions of the generation key, generations %d to %d", len(hist),
		hist[0].doc.Generation, hist[len(hist)-1].doc.Generation)

	byGen := map[uint64][]genVersion{}
	for _, v := range hist {
		byGen[v.doc.Generation] = append(byGen[v.doc.Generation], v)
	}
	expected := map[string]string{} // endpoint/revision -> resolved configuration
	for _, a := range docs {
		got, _ := json.Marshal(a.doc)
		ok := false
		var tried []string
		for _, v := range byGen[a.doc.Generation] {
			key := fmt.Sprintf("%s@%d", a.endpoint, v.rev)
			want, seen := expected[key]
			if !seen {
				resp, err := cli.Get(s.ctx, contract.KeyEndpoint(a.endpoint), clientv3.WithRev(v.rev))
				if err != nil || len(resp.Kvs) == 0 {
					tried = append(tried, fmt.Sprintf("revision %d: no document (%v)", v.rev, err))
					continue
				}
				var spec contract.EndpointSpec
				if err := json.Unmarshal(resp.Kvs[0].Value, &spec); err != nil {
					tried = append(tried, fmt.Sprintf("revision %d: %v", v.rev, err))
					continue
				}
				b, _ := json.Marshal(contract.Configuration(spec, v.doc))
				want = string(b)
				expected[key] = want
			}
			if want == string(got) {
				ok = true
				break
			}
			tried = append(tried, fmt.Sprintf("revision %d resolves to %s", v.rev, want))
		}
		if !ok {
			s.violate(invComplete, "%s applied generation %d: %s; %s", a.endpoint, a.doc.Generation, got,
				strings.Join(append(tried, "(no generation key announced it)")[:max(1, len(tried))], "; "))
		}
	}
	s.count(invComplete, len(docs))
}

// checkHistory reads the event history from PostgreSQL: every subject's
// state changes chain (each starts where the one before ended), and every
// plane failure its switch's telemetry could see is recorded.
func (s *suite) checkHistory() {
	conn, err := pgx.Connect(s.ctx, s.pg.URL())
	if err != nil {
		s.violate(invHistory, "connect: %v", err)
		return
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(s.ctx, `SELECT id, subject_kind, subject, coalesce(from_state, ''), coalesce(to_state, '')
		FROM events WHERE kind = 'state_change' ORDER BY id`)
	if err != nil {
		s.violate(invHistory, "query: %v", err)
		return
	}
	type ev struct {
		id                  int64
		kind, subject, from string
		to                  string
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ev, error) {
		var e ev
		return e, r.Scan(&e.id, &e.kind, &e.subject, &e.from, &e.to)
	})
	if err != nil {
		s.violate(invHistory, "read: %v", err)
		return
	}
	last := map[string]ev{}
	downs := map[string]int{}
	for _, e := range evs {
		k := e.kind + " " + e.subject
		if p, ok := last[k]; ok && p.to != e.from {
			s.violate(invHistory, "%s: event %d %s->%s follows event %d ->%s: a transition is missing", k, e.id, e.from, e.to, p.id, p.to)
		}
		last[k] = e
		if e.kind == "plane" && e.to == "down" {
			downs[e.subject]++
		}
	}
	s.count(invHistory, len(evs))
	// A plane failure while its switch's stream was stopped or stalled may
	// end before the endpoints' evidence judges it: only the others must
	// be in the history.
	s.mu.Lock()
	failed, blind := map[string]int{}, 0
	for _, f := range s.faults {
		if f.Kind != "plane down" {
			continue
		}
		if slices.ContainsFunc(s.faults, func(g faultRecord) bool {
			return strings.HasPrefix(g.Kind, "switch stream") && g.Target == f.Target+"-sw1" &&
				g.At < f.At+f.For && f.At < g.At+g.For+3*time.Second
		}) {
			blind++
			continue
		}
		failed[f.Target]++
	}
	s.mu.Unlock()
	for p, n := range failed {
		if downs[p] < n {
			s.violate(invHistory, "plane %s failed %d times with its switch's telemetry up, the history has %d failures", p, n, downs[p])
		}
	}
	s.note("history", "%d state changes in the history, chained; %d plane failures seen by telemetry, all recorded as down "+
		"(%d more came while their switch's stream was stopped or stalled: not required)", len(evs), sum(failed), blind)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
