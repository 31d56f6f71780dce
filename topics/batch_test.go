package topics

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A batch reference dead letter parses back to its fields, with no key or value, and its reason
// is batch-too-large; a dead letter of one record reads as the range of that record.
func TestBatchRecordParses(t *testing.T) {
	names := NewNames("p.")
	w := NewDeadLetterWriter(names, "worldmodel")
	for _, tc := range []struct {
		name       string
		compressed int
	}{{"compressed size known", 14029}, {"compressed size unknown", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ref := BatchRef{Topic: names.Rollouts(), Partition: 3, Offset: 10, NextOffset: 266, Epoch: 2, CompressedBytes: tc.compressed, Limit: 16 << 20}
			rec := w.BatchRecord(ref)
			if rec.Topic != names.DLQ() || rec.Key != nil || rec.Value != nil {
				t.Fatalf("record topic %s key %q value %d bytes: want the DLQ, no key, no value", rec.Topic, rec.Key, len(rec.Value))
			}
			d, err := ParseDeadLetter(rec)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason != ReasonBatchTooLarge || d.Stage != "worldmodel" || d.SourceTopic != ref.Topic || d.SourcePartition != 3 ||
				d.SourceOffset != 10 || d.SourceEndOffset != 266 || d.LimitBytes != 16<<20 || d.CompressedBytes != tc.compressed || len(d.Headers) != 0 {
				t.Errorf("parsed %+v, want the reference to %+v", d, ref)
			}
		})
	}
	src := &kgo.Record{Topic: names.Rollouts(), Partition: 1, Offset: 7, Value: []byte("x")}
	d, err := ParseDeadLetter(w.Record(src, ErrInvalid))
	if err != nil {
		t.Fatal(err)
	}
	if d.SourceEndOffset != 8 || d.LimitBytes != 0 || d.CompressedBytes != 0 {
		t.Errorf("one record's dead letter: end %d limit %d compressed %d, want 8 0 0", d.SourceEndOffset, d.LimitBytes, d.CompressedBytes)
	}
	err = &BatchTooLargeError{Ref: BatchRef{Topic: "t", Offset: 1, NextOffset: 3, Limit: 5}}
	if !errors.Is(err, ErrBatchTooLarge) || Reason(err) != ReasonBatchTooLarge {
		t.Errorf("%v: Is ErrBatchTooLarge %v, reason %q", err, errors.Is(err, ErrBatchTooLarge), Reason(err))
	}
}

func TestMaxBatchBytes(t *testing.T) {
	for _, tc := range []struct{ record, want int }{
		{MaxRecordBytes, MinBatchBytes},
		{MaxAdvantageBytes, 2 * MaxAdvantageBytes},
		{0, MinBatchBytes},
	} {
		if got := MaxBatchBytes(tc.record); got != tc.want {
			t.Errorf("MaxBatchBytes(%d) = %d, want %d", tc.record, got, tc.want)
		}
	}
}
