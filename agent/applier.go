package agent

import (
	"errors"

	"github.com/multiplane/multiplane/contract"
)

// Applier is the seam to the transport. Apply replaces the endpoint's path
// set and rate policy in one step: it either applies the document or
// returns an error and leaves the previous one in force, except that an
// error wrapping ErrNotEnforced means the path set was applied but part of
// the rate policy could not be (the agent counts the document applied and
// reports the error in its status). Stats returns per-plane counters for
// the status. Apply is never called concurrently with itself; Stats may be
// called concurrently with Apply.
type Applier interface {
	Apply(doc contract.EndpointDoc) error
	Stats() []contract.PathStatus
}

// ErrNotEnforced is wrapped by an Apply error when the document was applied
// but part of it (typically rates) is not enforced by the transport.
var ErrNotEnforced = errors.New("agent: not enforced by the transport")

// planeCounter is implemented by appliers that know the number of local
// planes (used when Config.Planes is 0).
type planeCounter interface{ Planes() int }

// verdictSource is implemented by appliers that judge their peers'
// reachability per plane (TransportApplier): the agent polls Verdicts
// every Config.EvidenceInterval and reports at once when it changes.
type verdictSource interface{ Verdicts() string }
