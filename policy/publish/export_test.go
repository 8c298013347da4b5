package publish

// CrashAfterTxns makes the publisher stop dead mid-update after n
// transactions, as a killed leader would.
func (p *Publisher) CrashAfterTxns(n int) { p.crashAfterTxns = n }
