package correct

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/topics"
)

// DigestConfig is everything besides a run's input records that decides its advantage rows, and
// so its digest. The live consumer writes it (Text) with every calibration snapshot; Replay
// compares its own with the newest one of the run and refuses to diverge silently. A setting that
// changes the rows belongs here and in digestSettings, nowhere else.
type DigestConfig struct {
	Correction   correction.Config
	MaxStaleness int64
	// Limits contributes its per-run and per-step limits and BatchBytes. The per-instance limits
	// depend on the other runs sharing an instance, so no replay can repeat them (Limits).
	Limits Limits
}

// digestSettings lists DigestConfig's settings in their canonical order: the name each has in
// Text and the flag of `wmrl correct` and `wmrl replay` that sets it. Settings without a flag of
// their own follow --mode (and --map's zspace bins).
// A setting whose value is nil is left out of Text: one added later is nil at its old default, so
// runs recorded before it existed (or with it at that default) keep their text and replay
// without a difference.
var digestSettings = []struct {
	name, flag string
	value      func(*DigestConfig) any
}{
	{"mode", "--mode", func(d *DigestConfig) any { return d.Correction.Mode }},
	{"map", "--map", func(d *DigestConfig) any { return d.Correction.Map }},
	{"advantage", "--advantage", func(d *DigestConfig) any { return d.Correction.Advantage }},
	{"window", "--window", func(d *DigestConfig) any { return d.Correction.Window }},
	{"min-pairs", "--min-pairs", func(d *DigestConfig) any { return d.Correction.MinPairs }},
	{"weight-cap", "--weight-cap", func(d *DigestConfig) any { return d.Correction.WeightCap }},
	{"eps", "--eps", func(d *DigestConfig) any { return d.Correction.Eps }},
	{"ddof", "--ddof", func(d *DigestConfig) any { return d.Correction.DDOF }},
	{"debias", "--no-debias", func(d *DigestConfig) any { return d.Correction.Debias }},
	{"denoise", "--no-denoise", func(d *DigestConfig) any { return d.Correction.Denoise }},
	{"refit-every", "--mode", func(d *DigestConfig) any { return d.Correction.RefitEvery }},
	{"bins", "--mode/--map", func(d *DigestConfig) any { return d.Correction.Bins }},
	{"half-life", "--mode", func(d *DigestConfig) any { return d.Correction.HalfLife }},
	{"freeze-after", "--mode", func(d *DigestConfig) any { return d.Correction.FreezeAfter }},
	{"max-staleness", "--max-staleness", func(d *DigestConfig) any { return d.MaxStaleness }},
	{"max-pending-steps-per-run", "--max-pending-steps-per-run", func(d *DigestConfig) any { return d.Limits.PendingStepsPerRun }},
	{"max-step-groups", "--max-step-groups", func(d *DigestConfig) any { return d.Limits.StepGroups }},
	{"max-step-rows", "--max-step-rows", func(d *DigestConfig) any { return d.Limits.StepRows }},
	{"max-batch-bytes", "--max-batch-bytes", func(d *DigestConfig) any { return d.Limits.BatchBytes }},
	{"trust-gate", "--trust-gate", func(d *DigestConfig) any { return ifOn(d.Correction.TrustGate) }},
}

// ifOn is true when on, else nil: a setting written only when on.
func ifOn(on bool) any {
	if on {
		return true
	}
	return nil
}

// Text is the canonical form written with the snapshots: name=value pairs separated by spaces, in
// digestSettings' order (floats in their shortest exact form).
func (d DigestConfig) Text() string {
	var b strings.Builder
	for _, s := range digestSettings {
		v := s.value(&d)
		if v == nil {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s.name)
		b.WriteByte('=')
		switch v := v.(type) {
		case float64:
			b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		default:
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

// SettingsHash is a short label of a settings text for logs.
func SettingsHash(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:6])
}

// SettingsDiff names every setting in which the texts live and mine differ, with the flag that
// sets it: "--max-staleness (max-staleness): live 3, replay 0". A setting only one side knows (a
// newer or older writer) counts as differing.
func SettingsDiff(live, mine string) []string {
	lv, mv := parseSettings(live), parseSettings(mine)
	flags := map[string]string{}
	for _, s := range digestSettings {
		flags[s.name] = s.flag
	}
	var out []string
	seen := map[string]bool{}
	for _, name := range append(mv.names, lv.names...) {
		if seen[name] {
			continue
		}
		seen[name] = true
		l, lok := lv.values[name]
		m, mok := mv.values[name]
		if lok && mok && l == m {
			continue
		}
		label := name
		if f, ok := flags[name]; ok {
			label = f + " (" + name + ")"
		}
		out = append(out, fmt.Sprintf("%s: live %s, replay %s", label, orNone(l, lok), orNone(m, mok)))
	}
	return out
}

type settingsText struct {
	names  []string
	values map[string]string
}

func parseSettings(s string) settingsText {
	out := settingsText{values: map[string]string{}}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		out.names = append(out.names, k)
		out.values[k] = v
	}
	return out
}

func orNone(v string, ok bool) string {
	if !ok {
		return "(not recorded)"
	}
	return v
}

// checkSettings compares mine (the replay's DigestConfig text) with the settings of the run's
// newest calibration snapshot on its partition of the calibration topic (the live consumer's
// changelog) and refuses a difference unless cfg.AllowConfigChange. A run without snapshots (none
// sealed yet, or all compacted away after its end) cannot be checked: the replay goes on and says so.
func checkSettings(ctx context.Context, cfg ReplayConfig, opts []kgo.Opt, part int32, mine string) error {
	topic := cfg.Names.Calibration()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	live, found := "", false
	start := map[string]map[int32]kgo.Offset{topic: {part: kgo.NewOffset().AtStart()}}
	err := topicread.ToEnd(ctx, opts, start, 5*time.Second, cfg.Logger, func(r *kgo.Record) error {
		if r.Value == nil || topics.IsCalibrationChunk(r) || topics.IsCalibrationEnd(r) {
			return nil
		}
		if run, _, err := topics.ParseCalibrationKey(r.Key); err != nil || run != cfg.Run {
			return nil
		}
		sn, err := cfg.Names.DecodeCalibrationRecord(ctx, r)
		if err != nil {
			return fmt.Errorf("snapshot at %s[%d] offset %d: %w", topic, part, r.Offset, err)
		}
		live, found = sn.Settings, true // the newest wins: a consumer restarted with --allow-config-change
		return nil
	})
	log := cfg.Logger.With("run", cfg.Run, "replay_settings", SettingsHash(mine))
	switch {
	case err != nil && cfg.AllowConfigChange:
		log.Warn("could not read the live consumer's settings; replaying without the check", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("%w: read the live settings of run %s: %w (--allow-config-change replays without the check)", ErrReplay, cfg.Run, err)
	case !found || live == "":
		log.Warn("no calibration snapshot of the run records the live consumer's settings: the replay digest may differ from the live one", "topic", topic, "partition", part)
		return nil
	}
	diff := SettingsDiff(live, mine)
	if len(diff) == 0 {
		return nil
	}
	if cfg.AllowConfigChange {
		log.Warn("replaying with other settings than the live consumer's: the replay digest will not equal the live one",
			"live_settings", SettingsHash(live), "differences", strings.Join(diff, "; "))
		return nil
	}
	return fmt.Errorf("%w: run %s was sealed with other settings than this replay's, so the digests would not match: %s; "+
		"replay with the live values, or pass --allow-config-change to replay anyway", ErrSettingsChanged, cfg.Run, strings.Join(diff, "; "))
}
