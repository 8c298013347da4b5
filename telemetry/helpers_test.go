package telemetry

import (
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/multiplane/multiplane/planes"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/golang/glog.(*fileSink).flushDaemon"))
}

// recorder is an Observer that keeps everything it is given.
type recorder struct {
	mu      sync.Mutex
	samples []planes.InterfaceSample
	reach   []planes.SwitchReachability
}

func (r *recorder) ObserveInterfaces(b []planes.InterfaceSample) {
	r.mu.Lock()
	r.samples = append(r.samples, b...)
	r.mu.Unlock()
}

func (r *recorder) ObserveSwitch(x planes.SwitchReachability) {
	r.mu.Lock()
	r.reach = append(r.reach, x)
	r.mu.Unlock()
}

// mark returns positions to look from later.
func (r *recorder) mark() (samples, reach int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples), len(r.reach)
}

func (r *recorder) samplesSince(i int) []planes.InterfaceSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]planes.InterfaceSample(nil), r.samples[i:]...)
}

func (r *recorder) reachSince(i int) []planes.SwitchReachability {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]planes.SwitchReachability(nil), r.reach[i:]...)
}
