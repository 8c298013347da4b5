// Package page paginates sorted lists for the REST API with opaque cursors:
// a cursor is the key of the last item returned, so pages stay stable while
// items are added or removed.
package page

import (
	"encoding/base64"
	"errors"
	"strconv"
)

// Limits on page sizes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// ErrBadRequest is returned for an invalid limit or cursor.
var ErrBadRequest = errors.New("page: invalid pagination")

// Request is a page request as given in the query string.
type Request struct {
	Limit  int
	Cursor string // opaque
}

// Parse reads the limit and cursor query values ("" = defaults).
func Parse(limit, cursor string) (Request, error) {
	r := Request{Limit: DefaultLimit}
	if limit != "" {
		n, err := strconv.Atoi(limit)
		if err != nil || n < 1 || n > MaxLimit {
			return r, &FieldError{Field: "limit", Msg: "limit must be an integer from 1 to " + strconv.Itoa(MaxLimit)}
		}
		r.Limit = n
	}
	if cursor != "" {
		b, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || len(b) == 0 {
			return r, &FieldError{Field: "cursor", Msg: "cursor is not one this API returned"}
		}
		r.Cursor = string(b)
	}
	return r, nil
}

// FieldError says which pagination parameter is wrong.
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrBadRequest) true.
func (e *FieldError) Unwrap() error { return ErrBadRequest }

// Slice returns the page of items (sorted by key, ascending) after the
// cursor, and the cursor of the next page ("" when this is the last).
func Slice[T any](items []T, key func(T) string, r Request) ([]T, string) {
	start := 0
	if r.Cursor != "" {
		for start < len(items) && key(items[start]) <= r.Cursor {
			start++
		}
	}
	end := min(start+r.Limit, len(items))
	out := items[start:end]
	if end < len(items) && len(out) > 0 {
		return out, base64.RawURLEncoding.EncodeToString([]byte(key(out[len(out)-1])))
	}
	return out, ""
}
