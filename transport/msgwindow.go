package transport

// msgWindow tracks which message ids of one direction of a connection are
// finished (delivered, or acknowledged whole): every id below below, and
// the ids in set, which are above it.
type msgWindow struct {
	below uint32
	set   map[uint32]struct{}
}

func newMsgWindow() msgWindow { return msgWindow{set: map[uint32]struct{}{}} }

// done reports whether id is finished; ids wrap around.
func (w *msgWindow) done(id uint32) bool {
	if int32(id-w.below) < 0 {
		return true
	}
	_, ok := w.set[id]
	return ok
}

// finish marks id finished and moves below past every finished id.
func (w *msgWindow) finish(id uint32) {
	if id != w.below {
		w.set[id] = struct{}{}
		return
	}
	w.below++
	for {
		if _, ok := w.set[w.below]; !ok {
			return
		}
		delete(w.set, w.below)
		w.below++
	}
}
