package transport

// fifo is a queue that keeps its array: q = q[1:] moves a slice's start
// past its array's front, so a queue that drains and refills (one message
// in flight, a connection woken per packet) allocated a new array each
// time. Popped entries are zeroed so they do not keep objects alive.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

// front returns the first entry; the queue must not be empty.
func (q *fifo[T]) front() T { return q.items[q.head] }

// at returns entry i counted from the front.
func (q *fifo[T]) at(i int) T { return q.items[q.head+i] }

func (q *fifo[T]) push(v T) {
	// Move the entries to the front when the array is full and at least
	// half of it is popped space, so each push costs O(1) amortized.
	if n := len(q.items); n == cap(q.items) && q.head > 0 && q.head >= n/2 {
		k := copy(q.items, q.items[q.head:])
		clear(q.items[k:])
		q.items, q.head = q.items[:k], 0
	}
	q.items = append(q.items, v)
}

// pop removes and returns the first entry; the queue must not be empty.
func (q *fifo[T]) pop() T {
	var zero T
	v := q.items[q.head]
	q.items[q.head] = zero
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return v
}

// truncate keeps the first n entries.
func (q *fifo[T]) truncate(n int) {
	clear(q.items[q.head+n:])
	q.items = q.items[:q.head+n]
	if n == 0 {
		q.items, q.head = q.items[:0], 0
	}
}

// reset empties the queue and drops its array.
func (q *fifo[T]) reset() { *q = fifo[T]{} }
