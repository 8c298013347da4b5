package publish

import "github.com/multiplane/multiplane/contract"

// CrashAfterTxns makes the publisher stop dead mid-update after n
// transactions, as a killed leader would.
func (p *Publisher) CrashAfterTxns(n int) { p.crashAfterTxns = n }

// NoWatch makes the leader find drift only by its periodic reconciliation.
func (p *Publisher) NoWatch() { p.noWatch = true }

// Counts returns drift repairs, reconciliations and refused publications.
func (p *Publisher) Counts() (drift, reconciliations, refusals uint64) {
	return p.driftRepairs.Load(), p.reconciliations.Load(), p.refusals.Load()
}

// SameSpec exposes sameDocument for endpoint documents.
func SameSpec(a, b contract.EndpointSpec) bool {
	x, y := endpointDoc(a), endpointDoc(b)
	return sameDocument(&x, &y)
}
