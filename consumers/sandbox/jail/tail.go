package jail

// tailBuffer keeps the last max bytes written to it, so a chatty or hostile
// child cannot make the executor buffer unbounded output.
type tailBuffer struct {
	max   int
	buf   []byte
	total int64
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	// Compact only past 2*max so that small writes stay amortised O(1).
	if len(t.buf) > 2*t.max {
		n := copy(t.buf, t.buf[len(t.buf)-t.max:])
		t.buf = t.buf[:n]
	}
	return len(p), nil
}

// Bytes returns the retained tail (at most max bytes).
func (t *tailBuffer) Bytes() []byte {
	if len(t.buf) > t.max {
		return t.buf[len(t.buf)-t.max:]
	}
	return t.buf
}

// Truncated reports whether bytes were dropped.
func (t *tailBuffer) Truncated() bool { return t.total > int64(t.max) }
