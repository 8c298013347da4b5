package gnmisim_test

import (
	"fmt"

	"github.com/multiplane/multiplane/fabricsim/gnmisim"
)

func ExampleStart() {
	src := gnmisim.NewStaticSource([]string{"eth1", "eth2"})
	sw, err := gnmisim.Start(gnmisim.Config{Name: "leaf1", Source: src})
	if err != nil {
		panic(err)
	}
	defer sw.Close()
	fmt.Println(sw.Name(), sw.Ports()) // subscribe at sw.Addr()

	src.Traffic(10, 1500)                                // counters move on the next tick
	_ = sw.SetOperStatus("eth2", "DOWN")                 // pushed at once
	_ = sw.SetCounter("eth1", gnmisim.InOctets, 1<<64-1) // wraps on the next traffic
	// Output: leaf1 [eth1 eth2]
}
