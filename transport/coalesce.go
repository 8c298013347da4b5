package transport

// coalescer gathers batches bound for the same ports into full ones, so
// the datagrams of many connections leave in few send calls: a receiver
// of 4,000 connections acked each in its own call (one datagram per call),
// and a sender's workers wrote each connection's turn in its own calls.
type coalescer struct {
	t   *Transport
	msg string     // logged when a send fails
	out []outBatch // at most one per port
	n   int        // datagrams held
}

// add takes ob's datagrams (ob's batch is consumed); full batches leave
// at once.
func (co *coalescer) add(ob outBatch) {
	if ob.batch == nil {
		return
	}
	i := 0
	for i < len(co.out) && co.out[i].port != ob.port {
		i++
	}
	if i == len(co.out) {
		co.out = append(co.out, ob)
		co.n += len(ob.batch.Pkts)
		co.sendIfFull(i)
		return
	}
	cur := &co.out[i]
	for _, pk := range ob.batch.Pkts {
		np := cur.batch.Next()
		np.Buf = append(np.Buf, pk.Buf...)
		np.Addr = pk.Addr
		co.n++
		co.sendIfFull(i)
	}
	ob.batch.Release()
}

func (co *coalescer) sendIfFull(i int) {
	cur := &co.out[i]
	if !cur.batch.Full() {
		return
	}
	co.n -= len(cur.batch.Pkts)
	co.t.sendOut(*cur, co.msg)
	cur.batch = cur.port.Pool().Get()
}

// flush sends what is held.
func (co *coalescer) flush() {
	for i, ob := range co.out {
		if len(ob.batch.Pkts) > 0 {
			co.t.sendOut(ob, co.msg)
		} else {
			ob.batch.Release()
		}
		co.out[i] = outBatch{}
	}
	co.out = co.out[:0]
	co.n = 0
}
