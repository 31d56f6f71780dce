// Package stepstest builds advantage records for the tests of the packages that read them
// (sinks/steps, sinks/trainer): steps of rows, their chunk records and altered copies.
package stepstest

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/topics"
)

// StepRows builds a deterministic, valid step: groups of size g, group 0 an anchor group, one
// masked row per group so masks and null scores are exercised.
func StepRows(run string, step int64, groups, g int) []topics.AdvantageRow {
	var rows []topics.AdvantageRow
	for gi := 0; gi < groups; gi++ {
		for ri := 0; ri < g; ri++ {
			v := float64((int(step)*31+gi*7+ri*3)%97) / 97
			r := topics.AdvantageRow{
				RunID: run, Stream: "mle", Step: step, GroupID: fmt.Sprintf("g%02d", gi),
				RolloutID: fmt.Sprintf("g%02d-r%02d", gi, ri), PolicyVersion: fmt.Sprintf("ckpt-%d", step),
				Source: topics.SourceWorldModel, Predicted: v, PredictedOK: true, Calibrated: v * 0.9,
				Used: v * 0.9, Advantage: v - 0.5, Weight: 1, Mask: true, CalibrationVersion: uint64(step / 2),
			}
			if gi == 0 {
				r.Source, r.Executed, r.ExecutedOK, r.Used, r.Weight = topics.SourceAnchor, 1-v, true, 1-v, 2
			}
			if ri == g-1 {
				r.Source, r.Predicted, r.PredictedOK, r.Executed, r.ExecutedOK, r.Advantage, r.Weight, r.Mask = "", 0, false, 0, false, 0, 0, false
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// ChunkRecords returns the records of one step, split into chunks of at most maxBytes.
func ChunkRecords(t testing.TB, names topics.Names, rows []topics.AdvantageRow, maxBytes int) []*kgo.Record {
	t.Helper()
	recs, err := names.AdvantageRecords(rows[0].RunID, "", rows[0].Step, rows, maxBytes)
	if err != nil {
		t.Fatalf("AdvantageRecords: %v", err)
	}
	return recs
}

// Placed gives records a partition and consecutive offsets from start, as a broker would.
func Placed(recs []*kgo.Record, partition int32, start int64) []*kgo.Record {
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Partition, c.Offset = partition, start+int64(i)
		out[i] = &c
	}
	return out
}

// WithHeader returns a copy of r with one more header.
func WithHeader(r *kgo.Record, key, value string) *kgo.Record {
	c := *r
	c.Headers = append(append([]kgo.RecordHeader(nil), r.Headers...), kgo.RecordHeader{Key: key, Value: []byte(value)})
	return &c
}

// WithoutHeader returns a copy of r without the header key.
func WithoutHeader(r *kgo.Record, key string) *kgo.Record {
	c := *r
	c.Headers = nil
	for _, h := range r.Headers {
		if h.Key != key {
			c.Headers = append(c.Headers, h)
		}
	}
	return &c
}

// Reverse returns the records in reverse order.
func Reverse(rs []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(rs))
	for i, r := range rs {
		out[len(rs)-1-i] = r
	}
	return out
}

// Revalue returns a copy of r with value v.
func Revalue(r *kgo.Record, v []byte) *kgo.Record {
	c := *r
	c.Value = v
	return &c
}

// Mutate re-encodes a chunk with one advantage changed, keeping its headers.
func Mutate(t testing.TB, r *kgo.Record) *kgo.Record {
	t.Helper()
	rows, err := topics.DecodeAdvantages(r.Value)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Calibrated == 0.25 {
		rows[0].Calibrated = 0.75
	} else {
		rows[0].Calibrated = 0.25
	}
	b, err := topics.EncodeAdvantages(rows)
	if err != nil {
		t.Fatal(err)
	}
	return Revalue(r, b)
}
