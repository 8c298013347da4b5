package gnmisim

import (
	"strings"
	"testing"
	"time"

	"github.com/openconfig/gnmi/ctree"
	pb "github.com/openconfig/gnmi/proto/gnmi"

	"github.com/multiplane/multiplane/internal/testenv"
)

// TestSamplesSharePaths: a port's notifications of one sample and the
// next carry the same prefix and leaf path objects (a fleet of 128,000
// ports made new ones per sample, a quarter of the benchmark's heap),
// with the new values.
func TestSamplesSharePaths(t *testing.T) {
	src := NewStaticSource([]string{"eth1"}, "q0")
	sw, err := Start(Config{Name: "sw1", Source: src, Tick: time.Hour, Logger: testenv.Logger(t)}) // publish by hand
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	notes := func() map[string]*pb.Notification {
		got := map[string]*pb.Notification{}
		err := sw.cache.Query("sw1", []string{"*"}, func(path []string, _ *ctree.Leaf, v any) error {
			if n, ok := v.(*pb.Notification); ok {
				got[strings.Join(path, "/")] = n
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	src.Traffic(10, 100)
	if err := sw.Publish(); err != nil {
		t.Fatal(err)
	}
	first := notes()
	src.Traffic(20, 100)
	if err := sw.Publish(); err != nil {
		t.Fatal(err)
	}
	second := notes()
	counters := 0
	for k, n := range second {
		f := first[k]
		if f == nil {
			t.Fatalf("%s: not in the first sample", k)
		}
		if len(n.Update) < 2 { // oper/admin status: published on a change only
			continue
		}
		counters++
		if f == n {
			t.Fatalf("%s: the second sample did not publish", k)
		}
		if f.Prefix != n.Prefix {
			t.Errorf("%s: each sample made its own prefix", k)
		}
		for i := range n.Update {
			if f.Update[i].Path != n.Update[i].Path {
				t.Errorf("%s: each sample made its own path for %v", k, n.Update[i].Path)
			}
		}
	}
	if counters != 2 {
		t.Fatalf("%d counter notifications, want the interface's and the queue's", counters)
	}
	in := func(m map[string]*pb.Notification) uint64 {
		for _, n := range m {
			for _, u := range n.Update {
				if u.Path.Elem[0].Name == "in-octets" {
					return u.Val.GetUintVal()
				}
			}
		}
		return 0
	}
	if a, b := in(first), in(second); b <= a {
		t.Errorf("in-octets %d then %d: the second sample's values are not new", a, b)
	}
}
