package correct

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxMaskedShare is the masked share of a step's rows above which the consumer warns
// (Config.MaxMaskedShare).
const DefaultMaxMaskedShare = 0.5

// maskedWarnEvery bounds the masked-share warnings to one per interval; each counts the steps
// above the threshold since the previous one.
const maskedWarnEvery = 10 * time.Second

// newMaskedMetrics makes the masked-row series: a row is masked when it has no usable reward
// (the world model or the sandbox failed on it) or a policy masked it (stale). A step whose rows
// are mostly masked trains on nothing, so the share is exported per (run, stream) for alerts.
func newMaskedMetrics(s *series) (*prometheus.GaugeVec, prometheus.Counter) {
	return s.gaugeVec("wmrl_correct_masked_share",
			"Share of the last sealed step's advantage rows that are masked (mask false: no usable reward, or a masking policy), per (run, stream).",
			"run", "stream"),
		s.counter("wmrl_correct_masked_rows_total", "Masked advantage rows (mask false) in committed transactions.")
}

// maskedWarner rate-limits the warnings about steps whose masked share is above the threshold.
type maskedWarner struct {
	last    time.Time
	pending int // steps above the threshold since the last warning
}

// observeMasked sets the masked-share gauges of a committed step and warns (rate-limited) when
// a stream's share is above MaxMaskedShare: the trainer would get advantages of zero weight and
// nothing else would say so.
func (c *Consumer) observeMasked(s *sealed, now time.Time) {
	type count struct{ masked, rows int }
	per := map[string]*count{}
	for _, r := range s.rows {
		n := per[r.Stream]
		if n == nil {
			n = &count{}
			per[r.Stream] = n
		}
		n.rows++
		if !r.Mask {
			n.masked++
		}
	}
	streams := make([]string, 0, len(per))
	for st := range per {
		streams = append(streams, st)
	}
	sort.Strings(streams)
	for _, st := range streams {
		n := per[st]
		share := float64(n.masked) / float64(n.rows)
		c.m.maskedShare.WithLabelValues(s.run, st).Set(share)
		c.m.maskedRows.Add(float64(n.masked))
		if share <= c.cfg.MaxMaskedShare {
			continue
		}
		c.masked.pending++
		if !c.masked.last.IsZero() && now.Sub(c.masked.last) < maskedWarnEvery {
			continue
		}
		c.log.Warn("step mostly masked: its rows have no usable reward (check the world model's and the sandbox's failures)",
			"run", s.run, "step", s.step, "stream", st, "masked", n.masked, "rows", n.rows,
			"max_masked_share", c.cfg.MaxMaskedShare, "steps_above_since_last_warning", c.masked.pending)
		c.masked.last, c.masked.pending = now, 0
	}
}
