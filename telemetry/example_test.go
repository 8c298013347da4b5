package telemetry_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/telemetry"
)

// firstOper is an Observer that reports each interface's first oper-status.
type firstOper struct {
	mu   sync.Mutex
	seen map[string]planes.OperStatus
	all  chan struct{}
	want int
}

func (o *firstOper) ObserveInterfaces(batch []planes.InterfaceSample) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range batch {
		if _, ok := o.seen[s.Interface]; !ok && s.Oper != "" {
			o.seen[s.Interface] = s.Oper
			if len(o.seen) == o.want {
				close(o.all)
			}
		}
	}
}

func (o *firstOper) ObserveSwitch(planes.SwitchReachability) {}

func Example() {
	// One emulated switch with two ports, and a topology that cables them.
	fleet, err := gnmisim.StartFleet(gnmisim.FleetConfig{Switches: 1, Ports: 2, Tick: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()

	obs := &firstOper{seen: map[string]planes.OperStatus{}, all: make(chan struct{}), want: 2}
	col, err := telemetry.New(telemetry.Config{SampleInterval: 100 * time.Millisecond}, obs, nil)
	if err != nil {
		panic(err)
	}
	col.Reconcile(fleet.Topology())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { col.Run(ctx); close(done) }()

	select {
	case <-obs.all:
	case <-time.After(10 * time.Second):
		fmt.Println("timed out")
	}
	cancel()
	<-done

	obs.mu.Lock()
	defer obs.mu.Unlock()
	var names []string
	for n := range obs.seen {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println(n, obs.seen[n])
	}
	// Output:
	// eth1 UP
	// eth2 UP
}
