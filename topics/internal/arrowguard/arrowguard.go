// Package arrowguard checks an Arrow IPC stream's framing and flatbuffers before arrow-go reads
// it, so that hostile bytes cannot make the reader allocate without bound.
package arrowguard

import (
	"encoding/binary"
	"fmt"
)

// arrow-go's IPC reader sizes slices from counts in the message flatbuffers (fields, children,
// metadata entries) before checking them against the input, so a few hostile bytes can request
// hundreds of gigabytes and kill the process, which recover cannot catch. Check walks
// the stream's framing and flatbuffers first, with bounds checks, and accepts only what an
// advantage batch can contain: one schema message of flat columns, then uncompressed record
// batches, then the end marker. It mirrors arrow-go's framing (continuation token, legacy
// lengths, EOS) so that every message arrow-go will parse has been checked.

const (
	ipcContinuation = 0xFFFFFFFF

	msgSchema      = 1
	msgRecordBatch = 3

	guardMaxFields   = 64
	guardMaxMetadata = 64
	guardMaxBuffers  = 3 * guardMaxFields
)

func guardErr(format string, args ...any) error {
	return fmt.Errorf("advantages: %s", fmt.Sprintf(format, args...))
}

// Check returns the stream's length in bytes, up to and including its end marker (or
// the end of b when the marker is missing, which arrow-go accepts too).
func Check(b []byte) (int, error) {
	pos, msgs := 0, 0
	for {
		if pos == len(b) {
			return pos, nil
		}
		if len(b)-pos < 4 {
			return 0, guardErr("truncated message header at byte %d", pos)
		}
		cid := binary.LittleEndian.Uint32(b[pos:])
		pos += 4
		var msgLen int64
		switch cid {
		case 0:
			return pos, nil
		case ipcContinuation:
			if len(b)-pos < 4 {
				return 0, guardErr("truncated message length at byte %d", pos)
			}
			msgLen = int64(int32(binary.LittleEndian.Uint32(b[pos:])))
			pos += 4
			if msgLen == 0 {
				return pos, nil
			}
		default:
			msgLen = int64(int32(cid))
		}
		if msgLen < 4 || msgLen > int64(len(b)-pos) {
			return 0, guardErr("message %d: metadata length %d out of range", msgs, msgLen)
		}
		bodyLen, err := checkMessage(b[pos:pos+int(msgLen)], msgs, int64(len(b)-pos)-msgLen)
		if err != nil {
			return 0, err
		}
		pos += int(msgLen) + int(bodyLen)
		msgs++
	}
}

// checkMessage verifies one Message flatbuffer and returns its body length.
func checkMessage(buf []byte, index int, remaining int64) (int64, error) {
	fb := flatbuf(buf)
	msg, ok := fb.root()
	if !ok {
		return 0, guardErr("message %d: corrupt flatbuffer root", index)
	}
	bodyLen, ok := msg.int64(3)
	if !ok || bodyLen < 0 || bodyLen > remaining {
		return 0, guardErr("message %d: body length %d out of range", index, bodyLen)
	}
	if err := fb.checkKeyValues(msg, 4, index); err != nil {
		return 0, err
	}
	kind, ok := msg.uint8(1)
	if !ok {
		return 0, guardErr("message %d: corrupt header type", index)
	}
	header, present, ok := msg.table(2)
	if !ok || !present {
		return 0, guardErr("message %d: corrupt or missing header", index)
	}
	switch {
	case index == 0 && kind == msgSchema:
		return bodyLen, fb.checkSchema(header)
	case index > 0 && kind == msgRecordBatch:
		return bodyLen, fb.checkRecordBatch(header, bodyLen, index)
	case index == 0:
		return 0, guardErr("stream starts with message type %d, want a schema", kind)
	default:
		return 0, guardErr("message %d has type %d, want a record batch (dictionaries are not part of the schema)", index, kind)
	}
}

func (fb flatbuf) checkSchema(s fbTable) error {
	fields, n, ok := s.vector(1, 4)
	if !ok {
		return guardErr("schema: corrupt field list")
	}
	if n > guardMaxFields {
		return guardErr("schema: %d fields", n)
	}
	for i := 0; i < n; i++ {
		f, ok := fb.tableAt(fields + 4*i)
		if !ok {
			return guardErr("schema: corrupt field %d", i)
		}
		if _, _, ok := f.vector(0, 1); !ok {
			return guardErr("schema: corrupt name of field %d", i)
		}
		if _, present, ok := f.table(3); !ok || !present {
			return guardErr("schema: corrupt type of field %d", i)
		}
		if _, present, ok := f.table(4); !ok || present {
			return guardErr("schema: field %d is dictionary-encoded", i)
		}
		if _, nc, ok := f.vector(5, 4); !ok || nc > 0 {
			return guardErr("schema: field %d is nested", i)
		}
		if err := fb.checkKeyValues(f, 6, 0); err != nil {
			return err
		}
	}
	if err := fb.checkKeyValues(s, 2, 0); err != nil {
		return err
	}
	if _, _, ok := s.vector(3, 8); !ok {
		return guardErr("schema: corrupt feature list")
	}
	return nil
}

func (fb flatbuf) checkRecordBatch(rb fbTable, bodyLen int64, index int) error {
	rows, ok := rb.int64(0)
	if !ok || rows < 0 || rows > bodyLen {
		return guardErr("batch %d: row count %d out of range", index, rows)
	}
	nodes, nn, ok := rb.vector(1, 16)
	if !ok || nn > guardMaxFields {
		return guardErr("batch %d: corrupt node list", index)
	}
	for i := 0; i < nn; i++ {
		length := int64(binary.LittleEndian.Uint64(fb[nodes+16*i:]))
		nulls := int64(binary.LittleEndian.Uint64(fb[nodes+16*i+8:]))
		if length != rows || nulls < 0 || nulls > length {
			return guardErr("batch %d: node %d has length %d and %d nulls for %d rows", index, i, length, nulls, rows)
		}
	}
	bufs, nb, ok := rb.vector(2, 16)
	if !ok || nb > guardMaxBuffers {
		return guardErr("batch %d: corrupt buffer list", index)
	}
	for i := 0; i < nb; i++ {
		off := int64(binary.LittleEndian.Uint64(fb[bufs+16*i:]))
		length := int64(binary.LittleEndian.Uint64(fb[bufs+16*i+8:]))
		if off < 0 || length < 0 || off > bodyLen || length > bodyLen-off {
			return guardErr("batch %d: buffer %d [%d,+%d) outside the %d byte body", index, i, off, length, bodyLen)
		}
	}
	if _, present, ok := rb.table(3); !ok || present {
		return guardErr("batch %d: compressed batches are not accepted", index)
	}
	if _, _, ok := rb.vector(4, 8); !ok {
		return guardErr("batch %d: corrupt variadic buffer counts", index)
	}
	return nil
}

func (fb flatbuf) checkKeyValues(t fbTable, slot, index int) error {
	kvs, n, ok := t.vector(slot, 4)
	if !ok || n > guardMaxMetadata {
		return guardErr("message %d: corrupt custom metadata", index)
	}
	for i := 0; i < n; i++ {
		kv, ok := fb.tableAt(kvs + 4*i)
		if !ok {
			return guardErr("message %d: corrupt metadata entry %d", index, i)
		}
		if _, _, ok := kv.vector(0, 1); !ok {
			return guardErr("message %d: corrupt metadata key %d", index, i)
		}
		if _, _, ok := kv.vector(1, 1); !ok {
			return guardErr("message %d: corrupt metadata value %d", index, i)
		}
	}
	return nil
}

// flatbuf is a bounds-checked reader of the few flatbuffer constructs Arrow messages use.
type flatbuf []byte

type fbTable struct {
	fb      flatbuf
	pos     int // table start
	vt      int // vtable start
	vtLen   int
	dataLen int
}

func (fb flatbuf) u32(p int) (uint32, bool) {
	if p < 0 || p > len(fb)-4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(fb[p:]), true
}

func (fb flatbuf) root() (fbTable, bool) {
	off, ok := fb.u32(0)
	if !ok {
		return fbTable{}, false
	}
	return fb.tableAtPos(int64(off))
}

// tableAt follows the uoffset stored at p to a table.
func (fb flatbuf) tableAt(p int) (fbTable, bool) {
	off, ok := fb.u32(p)
	if !ok {
		return fbTable{}, false
	}
	return fb.tableAtPos(int64(p) + int64(off))
}

func (fb flatbuf) tableAtPos(pos int64) (fbTable, bool) {
	if pos < 0 || pos > int64(len(fb))-4 {
		return fbTable{}, false
	}
	soff := int64(int32(binary.LittleEndian.Uint32(fb[pos:])))
	vt := pos - soff
	if vt < 0 || vt > int64(len(fb))-4 {
		return fbTable{}, false
	}
	vtLen := int(binary.LittleEndian.Uint16(fb[vt:]))
	dataLen := int(binary.LittleEndian.Uint16(fb[vt+2:]))
	if vtLen < 4 || vtLen%2 != 0 || vt+int64(vtLen) > int64(len(fb)) || pos+int64(dataLen) > int64(len(fb)) {
		return fbTable{}, false
	}
	return fbTable{fb: fb, pos: int(pos), vt: int(vt), vtLen: vtLen, dataLen: dataLen}, true
}

// field returns the absolute position of slot's value, or 0 when the slot is absent.
func (t fbTable) field(slot int, size int) (int, bool) {
	at := 4 + 2*slot
	if at+2 > t.vtLen {
		return 0, true
	}
	off := int(binary.LittleEndian.Uint16(t.fb[t.vt+at:]))
	if off == 0 {
		return 0, true
	}
	if off+size > t.dataLen {
		return 0, false
	}
	return t.pos + off, true
}

func (t fbTable) int64(slot int) (int64, bool) {
	p, ok := t.field(slot, 8)
	if !ok || p == 0 {
		return 0, ok
	}
	return int64(binary.LittleEndian.Uint64(t.fb[p:])), true
}

func (t fbTable) uint8(slot int) (uint8, bool) {
	p, ok := t.field(slot, 1)
	if !ok || p == 0 {
		return 0, ok
	}
	return t.fb[p], true
}

// table returns the table an offset slot points to; present is false for an absent slot.
func (t fbTable) table(slot int) (tab fbTable, present, ok bool) {
	p, ok := t.field(slot, 4)
	if !ok || p == 0 {
		return fbTable{}, false, ok
	}
	tab, ok = t.fb.tableAt(p)
	return tab, true, ok
}

// vector returns the start of the elements and the length of the vector in slot, checking that
// n elements of elemSize bytes lie inside the buffer. An absent slot is an empty vector.
func (t fbTable) vector(slot, elemSize int) (start, n int, ok bool) {
	p, ok := t.field(slot, 4)
	if !ok || p == 0 {
		return 0, 0, ok
	}
	off, _ := t.fb.u32(p)
	v := int64(p) + int64(off)
	ln, ok := t.fb.u32(int(min(v, int64(len(t.fb)))))
	if !ok || v > int64(len(t.fb)) {
		return 0, 0, false
	}
	if v+4+int64(ln)*int64(elemSize) > int64(len(t.fb)) {
		return 0, 0, false
	}
	return int(v) + 4, int(ln), true
}
