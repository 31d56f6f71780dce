package worldmodel

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// TestHandlerFormats: the stage reads a rollout in whichever format its content-type names and
// writes its reward in the format of its own --format (HandlerConfig.Names.Format).
func TestHandlerFormats(t *testing.T) {
	for _, in := range topics.Formats {
		for _, out := range topics.Formats {
			inNames, outNames := topics.NewNames(""), topics.NewNames("")
			inNames.Format, outNames.Format = in, out
			rec, err := inNames.RolloutRecord(baseRollout())
			if err != nil {
				t.Fatal(err)
			}
			h, err := NewHandler(HandlerConfig{Scorer: &scripted{res: Result{Status: StatusOK, Score: 0.75}}, Model: "m",
				Names: outNames, Now: func() time.Time { return stageNow }})
			if err != nil {
				t.Fatal(err)
			}
			outs, err := h.Handle(context.Background(), rec)
			if err != nil || len(outs) != 1 {
				t.Fatalf("%s → %s: %v, %d records", in, out, err, len(outs))
			}
			if got := topics.RecordFormat(outs[0]); got != out {
				t.Fatalf("%s → %s: reward written as %s", in, out, got)
			}
			got, err := topics.DecodePredictedRecord(outs[0])
			if err != nil {
				t.Fatal(err)
			}
			jsonRec, _ := h.Handle(context.Background(), rolloutRecord(t, baseRollout()))
			want, err := topics.CodecFor(out).DecodePredicted(jsonRec[0].Value)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s → %s: %+v, want %+v (%v)", in, out, got, want, err)
			}
		}
	}
}
