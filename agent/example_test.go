package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/multiplane/multiplane/agent"
	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/kv"
)

// printApplier stands for the transport (agent.NewTransportApplier in
// `endpoint run`).
type printApplier struct{}

func (printApplier) Apply(d contract.EndpointDoc) error {
	fmt.Printf("apply generation %d: %d planes\n", d.Generation, len(d.PathSet.Planes))
	return nil
}

func (printApplier) Stats() []contract.PathStatus { return nil }

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "agent-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)
	store, err := kv.Open(ctx, kv.Config{DataDir: dir}, quiet) // stands for fabricd's etcd
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	// What the leader publishes: the endpoint's own document, then the
	// generation key with the planes' states.
	doc := contract.EndpointSpec{Schema: contract.SchemaVersion, Generation: 1, Endpoint: "host-a", Entropy: 4, DegradedLinkFactor: 0.5,
		Class: "default", Ports: []contract.SpecPort{{Plane: "p0", Index: 0, Address: "10.77.0.1"}, {Plane: "p1", Index: 1, Address: "10.77.1.1"}}}
	d, _ := json.Marshal(doc)
	g, _ := json.Marshal(contract.GenerationDoc{Schema: contract.SchemaVersion, Generation: 1, ComputedAt: time.Now(),
		PlanesGeneration: 1, Planes: []contract.PlaneStatus{
			{Name: "p0", Index: 0, State: "healthy", CapacityRatio: 1}, {Name: "p1", Index: 1, State: "healthy", CapacityRatio: 1}}})
	store.Client.Put(ctx, contract.KeyEndpoint("host-a"), string(d))
	store.Client.Put(ctx, contract.KeyGeneration, string(g))

	applied := make(chan uint64, 1)
	a, err := agent.New(agent.Config{
		Endpoint: "host-a", EtcdEndpoints: store.Endpoints(), StateDir: dir, Planes: 2,
		OnApplied: func(gen uint64, _ time.Time) { applied <- gen },
	}, printApplier{}, quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	<-applied
	fmt.Println("status:", a.Status().AppliedGeneration, a.Status().Source)
	cancel()
	<-done
	// Output:
	// apply generation 1: 2 planes
	// status: 1 etcd
}
