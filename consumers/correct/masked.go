package correct

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wmrl/wmrl/topics"
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

// maskedCount counts one stream's rows of a step: all, masked, and the world-model rows a closed
// trust gate masked (--trust-gate), which the gate's own gauge reports.
type maskedCount struct{ rows, masked, gated int }

// unexplained is the masked share the warning watches: of the rows the trust gate left alone, the
// masked ones (the gate masks world-model rows on purpose, the anchors carry the step).
func (n maskedCount) unexplained() float64 {
	if n.rows == n.gated {
		return 0
	}
	return float64(n.masked-n.gated) / float64(n.rows-n.gated)
}

// maskedCounts counts the rows of a sealed step per stream.
func maskedCounts(s *sealed) map[string]*maskedCount {
	closed := map[string]bool{}
	for _, sn := range s.snaps {
		closed[sn.Stream] = sn.Gate != nil && sn.Gate.Closed
	}
	per := map[string]*maskedCount{}
	for _, r := range s.rows {
		n := per[r.Stream]
		if n == nil {
			n = &maskedCount{}
			per[r.Stream] = n
		}
		n.rows++
		if !r.Mask {
			n.masked++
			if closed[r.Stream] && r.Source == topics.SourceWorldModel {
				n.gated++
			}
		}
	}
	return per
}

// maskedWarner rate-limits the warnings about steps whose masked share is above the threshold.
type maskedWarner struct {
	last    time.Time
	pending int // steps above the threshold since the last warning
}

// observeMasked sets the masked-share gauges of a committed step and warns (rate-limited) when
// a stream's share is above MaxMaskedShare: the trainer would get advantages of zero weight and
// nothing else would say so. Rows a closed trust gate masked count in the gauge but not in the
// warning: the gate says so itself (wmrl_correct_trust_gate_closed).
func (c *Consumer) observeMasked(s *sealed, now time.Time) {
	per := maskedCounts(s)
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
		if n.unexplained() <= c.cfg.MaxMaskedShare {
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
