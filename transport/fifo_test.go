package transport

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFifoMatchesASlice runs random pushes, pops and truncations against
// a plain slice.
func TestFifoMatchesASlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q fifo[int]
	var want []int
	for i := range 100000 {
		switch r := rng.IntN(10); {
		case r < 5:
			q.push(i)
			want = append(want, i)
		case r < 9 && len(want) > 0:
			if got := q.pop(); got != want[0] {
				t.Fatalf("op %d: pop %d, want %d", i, got, want[0])
			}
			want = want[1:]
		case r == 9 && len(want) > 0:
			k := rng.IntN(len(want))
			q.truncate(k)
			want = want[:k]
		}
		if q.len() != len(want) {
			t.Fatalf("op %d: len %d, want %d", i, q.len(), len(want))
		}
		if len(want) > 0 && (q.front() != want[0] || q.at(len(want)-1) != want[len(want)-1]) {
			t.Fatalf("op %d: front %d last %d, want %d %d", i, q.front(), q.at(len(want)-1), want[0], want[len(want)-1])
		}
	}
}

// TestFifoKeepsItsArray: a queue that never holds more than n entries
// never needs more than about 2n of array, however long it runs, and
// popped entries are cleared.
func TestFifoKeepsItsArray(t *testing.T) {
	var q fifo[*int]
	for i := range 10000 {
		v := i
		q.push(&v)
		if q.len() > 3 {
			q.pop()
		}
	}
	if c := cap(q.items); c > 8 {
		t.Errorf("array of %d for a queue of at most 4", c)
	}
	if slices.ContainsFunc(q.items[:q.head], func(p *int) bool { return p != nil }) {
		t.Error("a popped entry is still referenced")
	}
}
