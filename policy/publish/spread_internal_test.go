package publish

import (
	"testing"

	"github.com/multiplane/multiplane/contract"
)

// The status spread a generation asks for keeps the fleet's writes at the
// rate, within the contract's bound.
func TestStatusSpreadKeepsTheFleetAtTheRate(t *testing.T) {
	for _, c := range []struct {
		endpoints, rate int
		want            int64
	}{
		{10, 4000, 2}, {4000, 4000, 1000}, {16000, 4000, 4000}, {1_000_000, 1, contract.MaxStatusSpreadMS},
	} {
		if got := statusSpreadMS(c.endpoints, c.rate); got != c.want {
			t.Errorf("%d endpoints at %d/s: spread %d ms, want %d", c.endpoints, c.rate, got, c.want)
		}
	}
}
