package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testutil"
	"github.com/multiplane/multiplane/planes"
)

// recordedTriggers records the publisher triggers in order.
type recordedTriggers struct {
	mu       sync.Mutex
	calls    []string
	firstNow int // calls before the first TriggerNow; -1: none yet
	now      chan struct{}
}

func (r *recordedTriggers) add(c string) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}
func (r *recordedTriggers) TriggerNow() {
	r.mu.Lock()
	if r.firstNow < 0 {
		r.firstNow = len(r.calls)
	}
	r.mu.Unlock()
	r.add("now")
	r.now <- struct{}{}
}
func (r *recordedTriggers) TriggerHealth()   { r.add("health") }
func (r *recordedTriggers) TriggerRecovery() { r.add("recovery") }

// triggerFabric is 2 planes of one switch each and 8 endpoints.
func triggerFabric(t *testing.T) *planes.Topology {
	t.Helper()
	var b strings.Builder
	b.WriteString("planes: [{name: p0}, {name: p1}]\nswitches:\n")
	for p := range 2 {
		fmt.Fprintf(&b, "  - {name: s%d, plane: p%d, gnmi: {address: 'h:1', insecure: true}}\n", p, p)
	}
	b.WriteString("endpoints:\n")
	for h := range 8 {
		fmt.Fprintf(&b, "  - name: h%d\n    ports:\n", h)
		for p := range 2 {
			fmt.Fprintf(&b, "      - {plane: p%d, address: 10.0.%d.%d, switch: s%d, interface: E%d, speed_bps: 100}\n", p, p, h+1, p, h)
		}
	}
	topo, err := planes.ParseTopology([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// A plane's failure asks for an immediate publication on the first event
// taken after it, though the plane's own event still waits behind its
// links' (a loaded fabricd at 16,000 endpoints queues thousands), and
// also when that event was dropped.
func TestPlaneDownTriggersBeforeItsEvent(t *testing.T) {
	for _, buffer := range []int{64, 1} {
		t.Run(fmt.Sprintf("buffer%d", buffer), func(t *testing.T) {
			bus := planes.NewBus()
			e := planes.NewEngine(planes.DefaultHealthConfig(), nil, bus, nil)
			topo := triggerFabric(t)
			e.SetTopology(topo, topo.Links())
			sub := bus.Subscribe(buffer)
			rec := &recordedTriggers{firstNow: -1, now: make(chan struct{}, 16)}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				triggerOnChanges(ctx, sub, e, rec, nil)
			}()
			defer func() { cancel(); <-done }()
			// One link down first (link, switch and plane degraded): once
			// its 3 triggers came, the loop runs, waits for events and
			// knows the count of failures before this one.
			e.ObserveInterfaces([]planes.InterfaceSample{{Switch: "s0", Interface: "E0", Oper: planes.OperDown}})
			testutil.WaitFor(t, 10*time.Second, "the first failure's 3 triggers",
				func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.calls) == 3 })
			rec.mu.Lock()
			rec.calls, rec.firstNow = nil, -1
			rec.mu.Unlock()
			droppedBefore := sub.Dropped()
			var batch []planes.InterfaceSample
			for i := range 8 {
				batch = append(batch, planes.InterfaceSample{Switch: "s1", Interface: fmt.Sprintf("E%d", i), Oper: planes.OperDown})
			}
			e.ObserveInterfaces(batch) // the plane's event comes after its links'
			select {
			case <-rec.now:
			case <-time.After(10 * time.Second):
				t.Fatal("no immediate publication for a plane down")
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// With room for them all, the first link event asks for it;
			// with one slot, the only event delivered does, after the
			// dropped events' triggers.
			want := 0
			if buffer == 1 {
				want = int(sub.Dropped() - droppedBefore)
			}
			if rec.firstNow != want {
				t.Fatalf("triggers %v: the first immediate one after %d, want %d", rec.calls, rec.firstNow, want)
			}
		})
	}
}
