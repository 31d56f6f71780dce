package correction

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Errors returned by DecodeState; all decode failures wrap one of them.
var (
	ErrBadMagic           = errors.New("correction: not a wmrl calibration state")
	ErrUnsupportedVersion = errors.New("correction: unsupported state encoding version")
	ErrTruncated          = errors.New("correction: truncated state encoding")
	ErrCorruptState       = errors.New("correction: corrupt state encoding")
)

// stateMagic opens every encoded state; StateEncodingVersion follows it.
const stateMagic = "WMRLCAL\x00"

// StateEncodingVersion is the newest version Encode writes; DecodeState
// reads it and every earlier one. Version 2 adds the config's map kind
// byte; Encode writes version 1 for a config with Map = MapIsotonic, so
// those states encode (and digest) exactly as before the field existed.
// Version 3 is written only for a window holding a non-unit pair weight
// (Group.Weight): the map kind byte is always present, and the window's
// weights follow the tail, so unweighted states encode as before.
const StateEncodingVersion uint16 = 3

// encodingVersion is the version Encode writes for s.
func (s *State) encodingVersion() uint16 {
	if s.weighted > 0 {
		return 3
	}
	return encodingVersion(s.cfg)
}

func encodingVersion(c Config) uint16 {
	if c.Map != MapIsotonic {
		return 2
	}
	return 1
}

// maxIDLen bounds run and stream ids in an encoding.
const maxIDLen = 1 << 16

// Encode returns the versioned, deterministic binary encoding of s (little
// endian, fixed-width fields, window oldest first). Equal states encode to
// equal bytes, so the encoding — and Digest, a function of it — identify a
// state's content.
//
// Layout v1: magic[8] version u16 | config (see appendConfig; v2 adds the
// map kind u8 at its end) | config
// hash[32] | run, stream (u32 length + bytes) | sealed i64 | totalPairs u64 |
// pending u64 | n u64, n×(x f64, y f64) | fit version u64 | m u64, m×x f64,
// m×y f64 | ewma f64 | groups u64 | skipped u64 | c f64 | frozen u8 | v3 only:
// n×w f64, the window's pair weights oldest first.
func (s *State) Encode() []byte {
	size := len(stateMagic) + 2 + configEncodedLen + 1 + 32 + 8 + len(s.run) + len(s.stream) +
		8*4 + 16*s.win.len() + 16 + 16*len(s.fitX) + 8*4 + 1
	if s.weighted > 0 {
		size += 1 + 8*s.win.len()
	}
	b := s.appendPrefix(make([]byte, 0, size))
	b = s.win.appendRange(b, 0, s.win.len())
	b = s.appendFit(b, true)
	return s.appendTail(b)
}

// appendPrefix writes Encode's fields up to and including the window length n.
func (s *State) appendPrefix(b []byte) []byte {
	le := binary.LittleEndian
	b = append(b, stateMagic...)
	v := s.encodingVersion()
	b = le.AppendUint16(b, v)
	b = appendConfig(b, s.cfg)
	if v == 3 && s.cfg.Map == MapIsotonic {
		b = append(b, byte(MapIsotonic))
	}
	b = append(b, s.cfgHash[:]...)
	b = le.AppendUint32(b, uint32(len(s.run)))
	b = append(b, s.run...)
	b = le.AppendUint32(b, uint32(len(s.stream)))
	b = append(b, s.stream...)
	b = le.AppendUint64(b, uint64(s.sealed))
	b = le.AppendUint64(b, s.totalPairs)
	b = le.AppendUint64(b, s.pending)
	return le.AppendUint64(b, uint64(s.win.len()))
}

// appendFit writes the fit version and, if withMap, the breakpoints (else a count of 0).
func (s *State) appendFit(b []byte, withMap bool) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, s.version)
	if !withMap {
		return le.AppendUint64(b, 0)
	}
	b = le.AppendUint64(b, uint64(len(s.fitX)))
	for _, v := range s.fitX {
		b = le.AppendUint64(b, math.Float64bits(v))
	}
	for _, v := range s.fitY {
		b = le.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// appendTail writes the estimator fields that close Encode's layout.
func (s *State) appendTail(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, math.Float64bits(s.ewma))
	b = le.AppendUint64(b, s.groups)
	b = le.AppendUint64(b, s.skipped)
	b = le.AppendUint64(b, math.Float64bits(s.c))
	b = append(b, boolByte(s.frozen))
	if s.weighted > 0 {
		b = s.win.appendWeights(b)
	}
	return b
}

// decoder reads fixed-width little-endian fields, remembering the first
// truncation so call sites stay linear.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b)-d.off < n {
		d.err = fmt.Errorf("%w: need %d bytes at offset %d, have %d", ErrTruncated, n, d.off, len(d.b)-d.off)
		return nil
	}
	v := d.b[d.off : d.off+n]
	d.off += n
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) f64() float64 { return math.Float64frombits(d.u64()) }

func (d *decoder) boolean(field string) bool {
	v := d.u8()
	if d.err == nil && v > 1 {
		d.err = fmt.Errorf("%w: %s byte %d is not 0 or 1", ErrCorruptState, field, v)
	}
	return v == 1
}

// count reads a u64 element count and checks that elemSize·n bytes remain,
// so a corrupt length can never trigger a huge allocation.
func (d *decoder) count(elemSize int) int {
	n := d.u64()
	if d.err == nil && n > uint64((len(d.b)-d.off)/elemSize) {
		d.err = fmt.Errorf("%w: count %d at offset %d exceeds remaining bytes", ErrTruncated, n, d.off-8)
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.u32()
	if d.err == nil && n > maxIDLen {
		d.err = fmt.Errorf("%w: id length %d exceeds %d", ErrCorruptState, n, maxIDLen)
	}
	return string(d.take(int(n)))
}

func (d *decoder) intField(field string) int {
	v := d.u64()
	if d.err == nil && v > math.MaxInt32 {
		d.err = fmt.Errorf("%w: config %s %d out of range", ErrCorruptState, field, v)
	}
	return int(v)
}

// DecodeState parses an Encode output. It rejects (with ErrBadMagic,
// ErrUnsupportedVersion, ErrTruncated or ErrCorruptState) anything Encode
// could not have produced, so Encode(DecodeState(b)) == b whenever it
// succeeds.
func DecodeState(b []byte) (*State, error) {
	if k := min(len(b), len(stateMagic)); string(b[:k]) != stateMagic[:k] {
		return nil, ErrBadMagic
	}
	if len(b) < len(stateMagic)+2 {
		return nil, fmt.Errorf("%w: %d bytes", ErrTruncated, len(b))
	}
	d := &decoder{b: b, off: len(stateMagic)}
	version := d.u16()
	if version < 1 || version > StateEncodingVersion {
		return nil, fmt.Errorf("%w: %d (this build reads 1..%d)", ErrUnsupportedVersion, version, StateEncodingVersion)
	}
	cfg, err := d.config(version)
	if err != nil {
		return nil, err
	}
	s := &State{cfg: cfg}
	copy(s.cfgHash[:], d.take(32))
	if d.err == nil && s.cfgHash != cfg.Hash() {
		return nil, fmt.Errorf("%w: config hash does not match config", ErrCorruptState)
	}
	s.run = d.str()
	s.stream = d.str()
	s.sealed = int64(d.u64())
	s.totalPairs = d.u64()
	s.pending = d.u64()
	ps, err := d.window(s)
	if err != nil {
		return nil, err
	}
	if err := d.fit(s); err != nil {
		return nil, err
	}
	s.ewma = d.f64()
	s.groups = d.u64()
	s.skipped = d.u64()
	s.c = d.f64()
	s.frozen = d.boolean("frozen")
	if version == 3 {
		if err := d.weights(s, ps); err != nil {
			return nil, err
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	for _, p := range ps {
		s.win.push(p)
	}
	if !finite(s.ewma) || s.ewma < 0 || !finite(s.c) || s.c < 0 {
		return nil, fmt.Errorf("%w: estimator values ewma=%v c=%v", ErrCorruptState, s.ewma, s.c)
	}
	if d.off != len(b) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptState, len(b)-d.off)
	}
	if cfg.Mode == ModeDefault {
		s.sorted = s.win.pairs()
		slices.SortFunc(s.sorted, cmpPair)
		s.sortedOwned = true
	}
	return s, nil
}

// config reads the Config block of an encoding of the given version and validates it.
func (d *decoder) config(version uint16) (Config, error) {
	var cfg Config
	cfg.Mode = Mode(d.u8())
	cfg.Window = d.intField("window")
	cfg.MinPairs = d.intField("min pairs")
	cfg.RefitEvery = d.intField("refit every")
	cfg.Bins = d.intField("bins")
	cfg.HalfLife = d.f64()
	cfg.FreezeAfter = d.intField("freeze after")
	cfg.WeightCap = d.f64()
	cfg.Advantage = AdvantageKind(d.u8())
	cfg.Eps = d.f64()
	cfg.DDOF = int(d.u8())
	cfg.Debias = d.boolean("debias")
	cfg.Denoise = d.boolean("denoise")
	if version >= 2 {
		cfg.Map = MapKind(d.u8())
		if d.err == nil && version == 2 && cfg.Map == MapIsotonic {
			return Config{}, fmt.Errorf("%w: version 2 with the version 1 map kind", ErrCorruptState)
		}
	}
	if d.err != nil {
		return Config{}, d.err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrCorruptState, err)
	}
	return cfg, nil
}

// window reads the window's pairs (unit weight; version 3 adds the weights after the
// estimators) and checks them against the counters already read into s.
func (d *decoder) window(s *State) ([]pair, error) {
	n := d.count(16)
	if d.err != nil {
		return nil, d.err
	}
	if n > s.cfg.Window {
		return nil, fmt.Errorf("%w: %d pairs exceed window %d", ErrCorruptState, n, s.cfg.Window)
	}
	if s.sealed < -1 || uint64(n) > s.totalPairs || s.pending > s.totalPairs {
		return nil, fmt.Errorf("%w: inconsistent counters (sealed %d, pairs %d, total %d, pending %d)",
			ErrCorruptState, s.sealed, n, s.totalPairs, s.pending)
	}
	ps := make([]pair, n)
	for i := range ps {
		ps[i] = unitPair(d.f64(), d.f64())
		if !validScore(ps[i].x) || !validScore(ps[i].y) {
			return nil, fmt.Errorf("%w: window pair %d is not a valid score pair", ErrCorruptState, i)
		}
	}
	return ps, nil
}

// fit reads the fit's version and breakpoints into s: finite, x strictly and y weakly increasing.
func (d *decoder) fit(s *State) error {
	s.version = d.u64()
	m := d.count(16)
	if d.err != nil {
		return d.err
	}
	if (m == 0) != (s.version == 0) {
		return fmt.Errorf("%w: fit version %d with %d breakpoints", ErrCorruptState, s.version, m)
	}
	if m == 0 {
		return nil
	}
	s.fitX, s.fitY = make([]float64, m), make([]float64, m)
	for i := range s.fitX {
		s.fitX[i] = d.f64()
	}
	for i := range s.fitY {
		s.fitY[i] = d.f64()
	}
	for i := range m {
		if !finite(s.fitX[i]) || !finite(s.fitY[i]) ||
			(i > 0 && (!(s.fitX[i] > s.fitX[i-1]) || s.fitY[i] < s.fitY[i-1])) {
			return fmt.Errorf("%w: breakpoint %d breaks monotonicity or finiteness", ErrCorruptState, i)
		}
	}
	return nil
}

// weights reads a version 3 encoding's pair weights into ps and counts the non-unit ones in
// s; a version 3 encoding with unit weights only is not one Encode writes.
func (d *decoder) weights(s *State, ps []pair) error {
	for i := range ps {
		ps[i].w = d.f64()
		if !finite(ps[i].w) || !(ps[i].w > 0) || ps[i].w > maxWeight {
			return fmt.Errorf("%w: window pair %d has weight %v", ErrCorruptState, i, ps[i].w)
		}
		if ps[i].w != 1 {
			s.weighted++
		}
	}
	if d.err == nil && s.weighted == 0 {
		return fmt.Errorf("%w: version 3 with unit weights only", ErrCorruptState)
	}
	return nil
}
