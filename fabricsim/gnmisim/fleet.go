package gnmisim

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/multiplane/multiplane/planes"
)

// FleetConfig describes N switches × M ports.
type FleetConfig struct {
	Switches int    // default 1
	Ports    int    // per switch; default 4
	Planes   int    // switches are spread round-robin over this many planes; default 1
	Prefix   string // switch name prefix; default "sw" (sw0, sw1, ...)
	// Tick, Burst: as in Config. OctetsPerSec: per port and direction, for
	// the Synthetic source (default 1e6).
	Tick  time.Duration
	Burst bool
	// Stagger spreads the switches' Ticks evenly over one Tick (switch i
	// publishes i × Tick / Switches later) instead of all in step.
	Stagger      bool
	OctetsPerSec float64
	OperPoll     time.Duration // as in Config
	// Source, when set, makes the source of switch i (default Synthetic).
	Source func(i int) CounterSource
	Logger *slog.Logger
}

// Fleet is a set of switches started together.
type Fleet struct {
	cfg      FleetConfig
	Switches []*Switch
}

// StartFleet starts cfg.Switches switches, each on its own loopback port.
func StartFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.Switches <= 0 {
		cfg.Switches = 1
	}
	if cfg.Ports <= 0 {
		cfg.Ports = 4
	}
	if cfg.Planes <= 0 {
		cfg.Planes = 1
	}
	if cfg.Switches%cfg.Planes != 0 {
		return nil, fmt.Errorf("gnmisim: %d switches do not spread evenly over %d planes", cfg.Switches, cfg.Planes)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "sw"
	}
	if cfg.OctetsPerSec == 0 {
		cfg.OctetsPerSec = 1e6
	}
	f := &Fleet{cfg: cfg, Switches: make([]*Switch, cfg.Switches)}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range f.Switches {
		wg.Go(func() {
			src := Synthetic(cfg.Ports, cfg.OctetsPerSec)
			if cfg.Source != nil {
				src = cfg.Source(i)
			}
			var phase time.Duration
			if cfg.Stagger {
				phase = cfg.Tick * time.Duration(i) / time.Duration(cfg.Switches)
			}
			sw, err := Start(Config{Name: fmt.Sprintf("%s%d", cfg.Prefix, i), Source: src,
				Tick: cfg.Tick, Phase: phase, Burst: cfg.Burst, OperPoll: cfg.OperPoll, Logger: cfg.Logger})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			f.Switches[i] = sw
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Close stops every switch.
func (f *Fleet) Close() error {
	var wg sync.WaitGroup
	for _, sw := range f.Switches {
		if sw != nil {
			wg.Go(func() { sw.Close() })
		}
	}
	wg.Wait()
	return nil
}

// Topology describes the fleet: planes p0..p(P-1), switch i on plane i mod
// P (insecure gNMI at its address), and Switches/P × Ports endpoints
// ep0, ep1, ..., each cabled to one interface of one switch per plane.
func (f *Fleet) Topology() *planes.Topology {
	P := f.cfg.Planes
	t := &planes.Topology{}
	for p := range P {
		t.Planes = append(t.Planes, planes.Plane{Name: fmt.Sprintf("p%d", p)})
	}
	for i, sw := range f.Switches {
		t.Switches = append(t.Switches, planes.Switch{Name: sw.Name(), Plane: fmt.Sprintf("p%d", i%P),
			GNMI: planes.GNMITarget{Address: sw.Addr(), Insecure: true}})
	}
	perPlane := len(f.Switches) / P
	for e := range perPlane * f.cfg.Ports {
		ep := planes.Endpoint{Name: fmt.Sprintf("ep%d", e)}
		for p := range P {
			sw := f.Switches[(e/f.cfg.Ports)*P+p]
			ep.Ports = append(ep.Ports, planes.Port{
				Plane: fmt.Sprintf("p%d", p), Switch: sw.Name(), Interface: fmt.Sprintf("eth%d", e%f.cfg.Ports+1),
				Address: netip.AddrFrom4([4]byte{10, byte(p), byte(e >> 8), byte(e)}),
			})
		}
		t.Endpoints = append(t.Endpoints, ep)
	}
	return t
}
