package correction

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Mode selects the correction algorithm family.
type Mode uint8

const (
	// ModeDefault is wmrl's mode: exact isotonic regression, refit at every
	// sealed step, inverse-variance weight with c = 1.
	ModeDefault Mode = iota
	// ModeReference reproduces the authors' CorrectionLoop row for row:
	// sequential over the manifest's groups, refits between pairs (doc.go).
	ModeReference
)

func (m Mode) String() string { return enumName(m, "Mode", "default", "reference") }

// enumName is the name of v among names (those of the values from 0 on, as iota numbers them), or
// typ(v) for a value without one.
func enumName[T ~uint8](v T, typ string, names ...string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// AdvantageKind selects the group-relative advantage estimator.
type AdvantageKind uint8

const (
	// GRPO is (r − mean) / (std + eps).
	GRPO AdvantageKind = iota
	// DrGRPO is r − mean (no std normalisation, Liu et al. 2025).
	DrGRPO
)

func (k AdvantageKind) String() string { return enumName(k, "AdvantageKind", "grpo", "drgrpo") }

// MapKind selects the shape of the default mode's calibration map.
type MapKind uint8

const (
	// MapIsotonic is exact isotonic regression: a step function joined
	// linearly, flat wherever the window shows no increasing evidence.
	MapIsotonic MapKind = iota
	// MapCentred is centred isotonic regression (Oron & Flournoy 2017):
	// each pooled block is one point at its weighted-mean x with the
	// block's value, joined linearly, so the map is strictly increasing
	// between the outermost block centres and keeps the world model's
	// ranking there, which a flat stretch would erase.
	MapCentred
	// MapZSpace is the authors' abandoned variant (doc.go): φ(z_wm) =
	// E[z_exec | z_wm] fitted on within-group standardised anchor pairs by
	// quantile bins and PAV, applied to world-model advantages instead of
	// rewards, so std-normalised GRPO cannot cancel it. ZSpaceConfig gives
	// the authors' settings (12 bins, 400 pairs).
	MapZSpace
)

func (k MapKind) String() string { return enumName(k, "MapKind", "isotonic", "centred", "zspace") }

// ErrUnknownMap is returned by ParseMapKind for a name it does not know.
var ErrUnknownMap = errors.New("correction: unknown map kind")

// MapKinds lists the map kinds in their order, for flags and help texts.
var MapKinds = []MapKind{MapIsotonic, MapCentred, MapZSpace}

// ParseMapKind returns the map kind String names.
func ParseMapKind(name string) (MapKind, error) {
	for _, k := range MapKinds {
		if k.String() == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w %q (isotonic, centred or zspace)", ErrUnknownMap, name)
}

// ErrInvalidConfig is wrapped by every Config.Validate failure.
var ErrInvalidConfig = errors.New("correction: invalid config")

// maxWindow bounds Window so a decoded state can never demand an absurd
// allocation.
const maxWindow = 1 << 24

// Config parameterises a Corrector. The zero value is not valid; start from
// DefaultConfig or ReferenceConfig.
type Config struct {
	Mode        Mode
	Window      int     // FIFO size of anchor pairs, default 5000
	MinPairs    int     // identity map until this many pairs, default 200
	RefitEvery  int     // default: 0 = refit at every sealed step with new pairs; reference: after every 64th pushed pair (0: every pair), mid-step
	Bins        int     // reference mode only: number of equal-width bins on [0,1], 10
	HalfLife    float64 // EWMA half-life in anchor groups, 64 (reference mode uses max(1, HalfLife), as the authors)
	FreezeAfter int     // 0 = never freeze (c = 1); reference: freeze c = 1/s̄² after 32 groups
	WeightCap   float64 // anchor weight is clipped to [1, WeightCap]; 4 in both modes
	Advantage   AdvantageKind
	Eps         float64 // GRPO std epsilon, 1e-4
	DDOF        int     // 0 (population std, reference) or 1 (sample std)
	Debias      bool    // OD on/off (ablations); off => identity calibration
	Denoise     bool    // IVD on/off (ablations); off => anchor weight 1
	Map         MapKind // default mode only: MapIsotonic (default), MapCentred or MapZSpace
	// TrustGate masks a step's world-model rows while the window's anchors show the world model
	// uninformative (gate.go; default mode only, off by default). It changes rows, never the
	// state (only anchor rows feed the window and the noise estimate), so a state is valid under
	// either setting: the field is left out of Hash and of the state encoding, and the pipeline
	// records it with its digest settings instead.
	TrustGate bool
}

// DefaultConfig is wmrl's recommended configuration.
func DefaultConfig() Config {
	return Config{
		Mode:        ModeDefault,
		Window:      5000,
		MinPairs:    200,
		RefitEvery:  0,
		Bins:        10,
		HalfLife:    64,
		FreezeAfter: 0,
		WeightCap:   4,
		Advantage:   GRPO,
		Eps:         1e-4,
		DDOF:        0,
		Debias:      true,
		Denoise:     true,
	}
}

// ReferenceConfig reproduces the authors' CorrectionLoop with the settings of
// their 4B/9B configs (wmrl_4b.yaml): buffer 5000, 200 pairs before the first
// fit, refit every 64 pairs, 10 bins, half-life 64, warm-up 32, weight cap 4.
func ReferenceConfig() Config {
	return Config{
		Mode:        ModeReference,
		Window:      5000,
		MinPairs:    200,
		RefitEvery:  64,
		Bins:        10,
		HalfLife:    64,
		FreezeAfter: 32,
		WeightCap:   4,
		Advantage:   GRPO,
		Eps:         1e-4,
		DDOF:        0,
		Debias:      true,
		Denoise:     true,
	}
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Mode > ModeReference:
		return bad("unknown mode %d", c.Mode)
	case c.Window < 1 || c.Window > maxWindow:
		return bad("window %d not in [1, %d]", c.Window, maxWindow)
	case c.MinPairs < 1 || c.MinPairs > c.Window:
		return bad("min pairs %d not in [1, window=%d]", c.MinPairs, c.Window)
	case c.RefitEvery < 0 || c.RefitEvery > maxWindow:
		return bad("refit every %d not in [0, %d]", c.RefitEvery, maxWindow)
	case c.Mode == ModeReference && (c.Bins < 1 || c.Bins > 1<<16):
		return bad("bins %d not in [1, 65536]", c.Bins)
	case c.Bins < 0 || c.Bins > 1<<16:
		return bad("bins %d not in [0, 65536]", c.Bins)
	case !(c.HalfLife > 0) || math.IsInf(c.HalfLife, 0):
		return bad("half-life %v must be positive and finite", c.HalfLife)
	case c.FreezeAfter < 0 || c.FreezeAfter > math.MaxInt32:
		return bad("freeze after %d must be non-negative", c.FreezeAfter)
	case !(c.WeightCap >= 1) || math.IsInf(c.WeightCap, 0):
		return bad("weight cap %v must be finite and >= 1", c.WeightCap)
	case c.Advantage > DrGRPO:
		return bad("unknown advantage kind %d", c.Advantage)
	case !(c.Eps >= 0) || math.IsInf(c.Eps, 0):
		return bad("eps %v must be finite and >= 0", c.Eps)
	case c.DDOF != 0 && c.DDOF != 1:
		return bad("ddof %d must be 0 or 1", c.DDOF)
	case c.Map > MapZSpace:
		return bad("unknown map kind %d", c.Map)
	case c.Map == MapZSpace && c.Bins < 2:
		return bad("bins %d: the z-space map needs at least 2 quantile bins", c.Bins)
	case c.Mode == ModeReference && c.Map != MapIsotonic:
		return bad("map %v: reference mode has the authors' binned map only", c.Map)
	case c.Mode == ModeReference && c.TrustGate:
		return bad("trust gate: reference mode reproduces the authors' loop, which has no gate")
	}
	return nil
}

// configEncodedLen is the size of appendConfig's output for a config with
// Map = MapIsotonic; any other map adds one byte.
const configEncodedLen = 1 + 8*4 + 8 + 8 + 8 + 1 + 8 + 1 + 1 + 1

// appendConfig writes the canonical encoding used both for Hash and inside
// the state encoding: fixed-width fields, then the map kind only when it is
// not MapIsotonic, so configs that predate the field keep their hash and
// their states their encoding (version 1).
func appendConfig(b []byte, c Config) []byte {
	b = append(b, byte(c.Mode))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Window))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.MinPairs))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.RefitEvery))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Bins))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.HalfLife))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.FreezeAfter))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.WeightCap))
	b = append(b, byte(c.Advantage))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.Eps))
	b = append(b, byte(c.DDOF))
	b = append(b, boolByte(c.Debias), boolByte(c.Denoise))
	if c.Map != MapIsotonic {
		b = append(b, byte(c.Map))
	}
	return b
}

// Hash is a SHA-256 over a domain tag and the canonical encoding of every
// field but TrustGate (which never changes a state), stored with the state so
// a resumed run detects a config change.
func (c Config) Hash() [32]byte {
	b := make([]byte, 0, 32+configEncodedLen)
	b = append(b, "wmrl/correction/config/v1\x00"...)
	b = appendConfig(b, c)
	return sha256.Sum256(b)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
