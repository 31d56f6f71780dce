// Package jsonscan is the wire decoder's fast path for the JSON records of package topics: one
// pass over the bytes that fills a struct (described by its json tags) or declines, so that the
// slow, precise encoding/json path runs only for the records that need an error message.
package jsonscan

import (
	"encoding"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth bounds JSON nesting; no record nests deeper than 3, so anything deep is hostile.
const MaxDepth = 16

// Decode is topics' decodeJSON fast path: one pass over b that checks syntax, exact and unique
// keys, value types, nesting and the top-level schema (which must equal want) while it fills v,
// a pointer to a zero struct. It reports false, with v reset to zero, for anything it does not
// accept; topics' decodeJSONSlow then decides and builds the precise error. It therefore never accepts
// what decodeJSONSlow rejects, and it decodes every value the way encoding/json does: scalars it
// parses with the same strconv and base64 calls, and escaped strings, created_at and
// any string with invalid UTF-8 it hands to encoding/json (or time.Time.UnmarshalJSON) itself.
func Decode(b []byte, want string, v any) bool {
	pv := reflect.ValueOf(v)
	rv := pv.Elem()
	p := planFor(rv.Type())
	if p.kind != fkStruct || p.schemaField < 0 {
		return false
	}
	d := fastDec{b: b, want: want}
	d.ws()
	ok := d.object(p, pv.UnsafePointer(), 1, true)
	if ok {
		d.ws()
		ok = d.i == len(b) && d.schemaOK
	}
	if !ok {
		rv.SetZero()
	}
	return ok
}

// fastKind is how the fast path decodes one Go type.
type fastKind uint8

const (
	fkUnsupported fastKind = iota // always left to the slow path
	fkString
	fkBool
	fkInt
	fkUint
	fkFloat
	fkTime
	fkBytes
	fkPointer
	fkSlice
	fkMap
	fkStruct
)

// fastPlan is the precomputed decoding of one Go type, cached per type.
type fastPlan struct {
	kind fastKind
	typ  reflect.Type
	bits int
	elem *fastPlan // pointer, slice and map element
	// intern: a string field tagged `wmrl:"intern"` (a value most records repeat, such as a run
	// id), decoded through the intern table instead of a new allocation each time.
	intern bool
	// struct only: fields in declaration order (which is also encoding order) and the index of
	// the field named "schema", or -1.
	fields      []fastField
	schemaField int
}

// fastField is one struct field; the decoder writes it at offset from the struct's address, as a
// value of the type its plan was built for, which is what keeps those writes type-safe.
type fastField struct {
	name   string
	offset uintptr
	plan   *fastPlan
}

var (
	planCache         sync.Map // reflect.Type → *fastPlan
	timeType          = reflect.TypeFor[time.Time]()
	jsonUnmarshaler   = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler   = reflect.TypeFor[encoding.TextUnmarshaler]()
	maxFastStructSize = 64 // fields tracked by fastDec.object's duplicate bitmask
)

func planFor(t reflect.Type) *fastPlan {
	if p, ok := planCache.Load(t); ok {
		return p.(*fastPlan)
	}
	p := buildPlan(t, 0)
	planCache.Store(t, p)
	return p
}

// buildPlan mirrors what encoding/json and jsonScan do with t; any type feature whose decoding
// the fast path does not reproduce exactly (custom unmarshalers, embedded fields, `,string`,
// interfaces) makes the type fkUnsupported, which sends every record holding such a value to the
// slow path.
func buildPlan(t reflect.Type, depth int) *fastPlan {
	p := &fastPlan{typ: t, schemaField: -1}
	if depth > MaxDepth {
		return p
	}
	if t == timeType {
		p.kind = fkTime
		return p
	}
	if t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		return p
	}
	switch t.Kind() {
	case reflect.String:
		p.kind = fkString
	case reflect.Bool:
		p.kind = fkBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.kind, p.bits = fkInt, t.Bits()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		p.kind, p.bits = fkUint, t.Bits()
	case reflect.Float32, reflect.Float64:
		p.kind, p.bits = fkFloat, t.Bits()
	case reflect.Pointer:
		if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) {
			return p
		}
		p.kind, p.elem = fkPointer, buildPlan(t.Elem(), depth+1)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			if t.Elem() == reflect.TypeFor[byte]() {
				p.kind = fkBytes
			}
			return p
		}
		p.kind, p.elem = fkSlice, buildPlan(t.Elem(), depth+1)
	case reflect.Map:
		if t.Key().Kind() == reflect.String && !reflect.PointerTo(t.Key()).Implements(textUnmarshaler) {
			p.kind, p.elem = fkMap, buildPlan(t.Elem(), depth+1)
		}
	case reflect.Struct:
		if t.NumField() > maxFastStructSize {
			return p
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous {
				return p
			}
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" && opts == "" {
				continue
			}
			if name == "" || name == "-" || strings.Contains(","+opts+",", ",string,") {
				// Untagged names and `,string` decode differently in encoding/json and jsonScan.
				return &fastPlan{typ: t, schemaField: -1}
			}
			for _, g := range p.fields {
				if g.name == name {
					return &fastPlan{typ: t, schemaField: -1} // encoding/json ignores both
				}
			}
			if name == "schema" {
				p.schemaField = len(p.fields)
			}
			fp := buildPlan(f.Type, depth+1) // a fresh plan: the intern flag is the field's alone
			fp.intern = fp.kind == fkString && f.Tag.Get("wmrl") == "intern"
			p.fields = append(p.fields, fastField{name: name, offset: f.Offset, plan: fp})
		}
		p.kind = fkStruct
	}
	return p
}

// fastDec is the cursor of one decodeFast call. Its methods report false for anything the fast
// path leaves to the slow one.
type fastDec struct {
	b        []byte
	i        int
	want     string
	schemaOK bool
}

func (d *fastDec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// str scans a string literal at d.i. It returns the span with quotes and whether the contents
// are plain: no escapes and valid UTF-8, so that they are the decoded string byte for byte.
func (d *fastDec) str() (span []byte, plain, ok bool) {
	start := d.i
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false, false
	}
	d.i++
	plain, ascii := true, true
	// Eight bytes at a time while none of them ends the string or needs a closer look: the
	// common run of plain ASCII costs a load and a few arithmetic operations per word.
	for d.i+8 <= len(d.b) {
		m := special(binary.LittleEndian.Uint64(d.b[d.i:]))
		if m != 0 {
			d.i += bits.TrailingZeros64(m) >> 3 // the first such byte; the loop below looks at it
			break
		}
		d.i += 8
	}
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			span = d.b[start:d.i]
			if !ascii && plain && !utf8.Valid(span[1:len(span)-1]) {
				plain = false
			}
			return span, plain, true
		case c == '\\':
			plain = false
			d.i += 2 // encoding/json checks the escape itself when it decodes the string
		case c < 0x20:
			return nil, false, false
		default:
			if c >= utf8.RuneSelf {
				ascii = false
			}
			d.i++
		}
	}
	return nil, false, false
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special marks with its high bit each byte of w (little-endian) that is a quote, a backslash, a
// control character or not ASCII. Bytes above the first marked one may be marked wrongly (a
// borrow), so only the lowest mark is exact, which is all str uses.
func special(w uint64) uint64 {
	zero := func(x uint64) uint64 { return (x - ones) &^ x & highs }
	ctl := (w - ones*0x20) &^ w & highs // bytes below 0x20
	return zero(w^(ones*'"')) | zero(w^(ones*'\\')) | ctl | w&highs
}

// number scans a number with JSON's grammar and reports whether it is an integer literal.
func (d *fastDec) number() (lit []byte, integer, ok bool) {
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		d.digits()
	default:
		return nil, false, false
	}
	integer = true
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if !d.digits() {
			return nil, false, false
		}
		integer = false
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return nil, false, false
		}
		integer = false
	}
	return d.b[start:d.i], integer, true
}

func (d *fastDec) digits() bool {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

func (d *fastDec) literal(word string) bool {
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word {
		return false
	}
	d.i += len(word)
	return true
}

// object decodes an object at d.i into the struct or map at ptr, described by p.
func (d *fastDec) object(p *fastPlan, ptr unsafe.Pointer, depth int, top bool) bool {
	if depth > MaxDepth || d.i >= len(d.b) || d.b[d.i] != '{' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return true
	}
	var seen uint64
	var rv reflect.Value // the map, for fkMap
	if p.kind == fkMap {
		rv = reflect.NewAt(p.typ, ptr).Elem()
	}
	next := 0 // fields usually arrive in declaration order: try the next one first
	for {
		key, plain, ok := d.str()
		if !ok || !plain {
			return false
		}
		key = key[1 : len(key)-1]
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return false
		}
		d.i++
		d.ws()
		switch p.kind {
		case fkStruct:
			f := -1
			if next < len(p.fields) && p.fields[next].name == string(key) {
				f = next
			} else {
				for j := range p.fields {
					if p.fields[j].name == string(key) {
						f = j
						break
					}
				}
			}
			if f < 0 || seen&(1<<f) != 0 {
				return false
			}
			seen |= 1 << f
			next = f + 1
			fp := unsafe.Add(ptr, p.fields[f].offset)
			if top && f == p.schemaField {
				span, plain, ok := d.str()
				if !ok || !plain || string(span[1:len(span)-1]) != d.want || p.fields[f].plan.kind != fkString {
					return false
				}
				*(*string)(fp) = d.want
				d.schemaOK = true
			} else if !d.value(p.fields[f].plan, fp, depth+1) {
				return false
			}
		case fkMap:
			if rv.IsNil() {
				rv.Set(reflect.MakeMap(p.typ))
			}
			k := reflect.ValueOf(string(key))
			if kt := p.typ.Key(); kt != k.Type() {
				k = k.Convert(kt)
			}
			if rv.MapIndex(k).IsValid() {
				return false
			}
			ev := reflect.New(p.typ.Elem())
			if !d.value(p.elem, ev.UnsafePointer(), depth+1) {
				return false
			}
			rv.SetMapIndex(k, ev.Elem())
		default:
			return false
		}
		d.ws()
		if d.i >= len(d.b) {
			return false
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			d.ws()
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// value decodes the value at d.i into the variable at ptr, of the type p describes.
func (d *fastDec) value(p *fastPlan, ptr unsafe.Pointer, depth int) bool {
	if d.i >= len(d.b) {
		return false
	}
	c := d.b[d.i]
	if c == 'n' {
		switch p.kind {
		case fkPointer, fkSlice, fkMap, fkBytes:
			reflect.NewAt(p.typ, ptr).Elem().SetZero()
			return d.literal("null")
		}
		return false
	}
	switch p.kind {
	case fkString:
		span, plain, ok := d.str()
		if !ok {
			return false
		}
		if plain {
			if p.intern {
				*(*string)(ptr) = intern(span[1 : len(span)-1])
			} else {
				*(*string)(ptr) = string(span[1 : len(span)-1])
			}
			return true
		}
		return json.Unmarshal(span, reflect.NewAt(p.typ, ptr).Interface()) == nil
	case fkTime:
		span, _, ok := d.str()
		return ok && (*time.Time)(ptr).UnmarshalJSON(span) == nil
	case fkBytes:
		span, plain, ok := d.str()
		if !ok {
			return false
		}
		if !plain {
			return json.Unmarshal(span, reflect.NewAt(p.typ, ptr).Interface()) == nil
		}
		s := span[1 : len(span)-1]
		out := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
		n, err := base64.StdEncoding.Decode(out, s)
		if err != nil {
			return false
		}
		*(*[]byte)(ptr) = out[:n]
		return true
	case fkBool:
		switch {
		case c == 't' && d.literal("true"):
			*(*bool)(ptr) = true
			return true
		case c == 'f' && d.literal("false"):
			*(*bool)(ptr) = false
			return true
		}
		return false
	case fkInt:
		lit, integer, ok := d.number()
		if !ok || !integer {
			return false
		}
		n, err := strconv.ParseInt(string(lit), 10, p.bits)
		if err != nil {
			return false
		}
		switch p.bits {
		case 8:
			*(*int8)(ptr) = int8(n)
		case 16:
			*(*int16)(ptr) = int16(n)
		case 32:
			*(*int32)(ptr) = int32(n)
		default:
			*(*int64)(ptr) = n
		}
		return true
	case fkUint:
		lit, integer, ok := d.number()
		if !ok || !integer {
			return false
		}
		n, err := strconv.ParseUint(string(lit), 10, p.bits)
		if err != nil {
			return false
		}
		switch p.bits {
		case 8:
			*(*uint8)(ptr) = uint8(n)
		case 16:
			*(*uint16)(ptr) = uint16(n)
		case 32:
			*(*uint32)(ptr) = uint32(n)
		default:
			*(*uint64)(ptr) = n
		}
		return true
	case fkFloat:
		lit, _, ok := d.number()
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(string(lit), p.bits)
		if err != nil {
			return false
		}
		if p.bits == 32 {
			*(*float32)(ptr) = float32(f)
		} else {
			*(*float64)(ptr) = f
		}
		return true
	case fkPointer:
		nv := reflect.New(p.typ.Elem())
		if !d.value(p.elem, nv.UnsafePointer(), depth) {
			return false
		}
		*(*unsafe.Pointer)(ptr) = nv.UnsafePointer()
		return true
	case fkStruct:
		return d.object(p, ptr, depth, false)
	case fkMap:
		if c != '{' {
			return false
		}
		reflect.NewAt(p.typ, ptr).Elem().Set(reflect.MakeMap(p.typ))
		return d.object(p, ptr, depth, false)
	case fkSlice:
		if c != '[' || depth > MaxDepth {
			return false
		}
		d.i++
		rv := reflect.NewAt(p.typ, ptr).Elem()
		s := reflect.MakeSlice(p.typ, 0, 0)
		d.ws()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			rv.Set(s)
			return true
		}
		for {
			s = reflect.Append(s, reflect.Zero(p.typ.Elem()))
			if !d.value(p.elem, s.Index(s.Len()-1).Addr().UnsafePointer(), depth+1) {
				return false
			}
			d.ws()
			if d.i >= len(d.b) {
				return false
			}
			switch d.b[d.i] {
			case ',':
				d.i++
				d.ws()
			case ']':
				d.i++
				rv.Set(s)
				return true
			default:
				return false
			}
		}
	}
	return false
}
