package page

import (
	"errors"
	"fmt"
	"testing"
)

func TestSliceWalksAllPages(t *testing.T) {
	var items []string
	for i := 0; i < 25; i++ {
		items = append(items, fmt.Sprintf("k%02d", i))
	}
	id := func(s string) string { return s }
	var got []string
	r := Request{Limit: 10}
	pages := 0
	for {
		p, next := Slice(items, id, r)
		got = append(got, p...)
		pages++
		if next == "" {
			break
		}
		var err error
		if r, err = Parse("10", next); err != nil {
			t.Fatal(err)
		}
	}
	if pages != 3 || len(got) != 25 || got[24] != "k24" {
		t.Fatalf("pages=%d items=%d last=%q", pages, len(got), got[len(got)-1])
	}
}

func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ limit, cursor, field string }{
		{"0", "", "limit"}, {"1001", "", "limit"}, {"x", "", "limit"}, {"", "!!", "cursor"},
	} {
		_, err := Parse(c.limit, c.cursor)
		var fe *FieldError
		if !errors.Is(err, ErrBadRequest) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Parse(%q,%q) = %v, want error on %s", c.limit, c.cursor, err, c.field)
		}
	}
}
