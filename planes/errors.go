package planes

import "errors"

// Sentinel errors of the fabric model.
var (
	ErrInvalidTopology = errors.New("planes: invalid topology")
	ErrNotFound        = errors.New("planes: not found")
)
