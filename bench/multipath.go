package bench

import "fmt"

// newTransportMode adapts package transport (modes multipath and gbn).
// Package transport has no public API yet; until it does these modes fail
// with ErrModeUnavailable rather than measure anything else.
func newTransportMode(m Mode) (Transport, error) {
	return nil, fmt.Errorf("%w: %q needs package transport's public API, not merged yet; use --mode mptcp or tcp", ErrModeUnavailable, m)
}
