package bench

import (
	"errors"
	"testing"
)

func TestMessageRoundTripAndCorruption(t *testing.T) {
	for _, size := range []int{HeaderLen, HeaderLen + 1, 1500, 65536} {
		msg := make([]byte, size)
		h := header{session: 42, seq: 7, conn: 1, conns: 2}
		fillData(msg, newPattern(size), h)
		got, err := verify(msg)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if got.kind != kindData || got.session != 42 || got.seq != 7 || got.conn != 1 || got.conns != 2 || int(got.length) != size-HeaderLen {
			t.Fatalf("size %d: header %+v", size, got)
		}
		for n := range size {
			if _, err := verify(msg[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("size %d: prefix %d accepted", size, n)
			}
		}
		for _, i := range []int{0, 4, 9, 17, 25, 33, size - 1} {
			bad := append([]byte(nil), msg...)
			bad[i] ^= 0x10
			if _, err := verify(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("size %d: flipped byte %d accepted", size, i)
			}
		}
	}
}

func TestCounts(t *testing.T) {
	msg := appendCounts(header{kind: kindResult, session: 1}, counts{3, 4, 5})
	if _, err := verify(msg); err != nil {
		t.Fatal(err)
	}
	c, err := parseCounts(msg)
	if err != nil || c != (counts{3, 4, 5}) {
		t.Fatalf("%+v %v", c, err)
	}
}

func TestBitset(t *testing.T) {
	var b bitset
	for _, i := range []uint64{0, 63, 64, 1000, 5} {
		if b.testAndSet(i) {
			t.Fatalf("%d set before", i)
		}
	}
	if !b.testAndSet(1000) || !b.testAndSet(0) {
		t.Fatal("duplicate not seen")
	}
}

func FuzzVerify(f *testing.F) {
	msg := make([]byte, 100)
	fillData(msg, newPattern(100), header{session: 1, seq: 2})
	f.Add(msg)
	f.Add(appendCounts(header{kind: kindEnd}, counts{1, 2, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := verify(b)
		if err == nil && len(b) != HeaderLen+int(h.length) {
			t.Fatalf("accepted %d bytes with length %d", len(b), h.length)
		}
	})
}
