package publish_test

import (
	"testing"
	"time"

	"github.com/multiplane/multiplane/kv/kvtest"
	"github.com/multiplane/multiplane/policy/publish"
)

// BenchmarkPlaneEvent16000 publishes a plane state flip at 16,000
// endpoints: what fabricd spends besides computing the policy.
func BenchmarkPlaneEvent16000(b *testing.B) {
	cli := kvtest.New(b).Client
	src := &source{}
	up, down := output(16000, false), output(16000, false)
	down.Planes[1].State, down.Planes[1].CapacityRatio = "down", 0
	src.set(up)
	results := make(chan publish.Result, 10)
	p, _ := start(b, cli, "a", src, results)
	waitResult(b, results)
	var took time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			src.set(down)
		} else {
			src.set(up)
		}
		p.Trigger()
		r := waitResult(b, results)
		took += r.Duration
	}
	b.ReportMetric(float64(took.Microseconds())/float64(b.N)/1000, "write-ms/op")
}
