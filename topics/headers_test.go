package topics

import (
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestHeaders(t *testing.T) {
	hs := Headers(SchemaRollout, "r1", 42, Header(HeaderStream, "mle"))
	want := map[string]string{HeaderSchema: SchemaRollout, HeaderContentType: ContentTypeJSON, HeaderRun: "r1", HeaderStep: "42", HeaderStream: "mle"}
	if len(hs) != len(want) {
		t.Fatalf("%d headers", len(hs))
	}
	for k, v := range want {
		if got, ok := HeaderValue(hs, k); !ok || got != v {
			t.Errorf("%s = %q, %v; want %q", k, got, ok, v)
		}
	}
	for schema, want := range map[string]string{SchemaAdvantages: ContentTypeArrow, SchemaAdvantagesV2: ContentTypeArrow,
		SchemaCalibration: ContentTypeBinary, SchemaCalibrationChunk: ContentTypeBinary, SchemaStep: ContentTypeJSON} {
		if ct, _ := HeaderValue(Headers(schema, "r1", 0), HeaderContentType); ct != want {
			t.Errorf("%s content type %q, want %q", schema, ct, want)
		}
	}
	if _, ok := HeaderValue(hs, "nope"); ok {
		t.Error("found a missing header")
	}
	dup := append(hs, kgo.RecordHeader{Key: HeaderRun, Value: []byte("r2")})
	if v, _ := HeaderValue(dup, HeaderRun); v != "r2" {
		t.Errorf("last header should win, got %q", v)
	}
}

func TestParseChunk(t *testing.T) {
	good := []struct {
		in   string
		i, n int
	}{{"0/1", 0, 1}, {"3/4", 3, 4}, {"0/12", 0, 12}, {"999/1000", 999, 1000}}
	for _, g := range good {
		i, n, err := ParseChunk(g.in)
		if err != nil || i != g.i || n != g.n {
			t.Errorf("ParseChunk(%q) = %d, %d, %v", g.in, i, n, err)
		}
		if FormatChunk(i, n) != g.in {
			t.Errorf("FormatChunk(%d,%d) = %q", i, n, FormatChunk(i, n))
		}
	}
	for _, bad := range []string{"", "1", "/", "1/", "/1", "1/1", "2/1", "0/0", "-1/2", "+1/2", "01/2", "1/02", " 1/2", "1/2 ", "1/2/3", "a/b", "0/1000000000000000000000"} {
		if _, _, err := ParseChunk(bad); !errors.Is(err, ErrBadHeader) {
			t.Errorf("ParseChunk(%q) accepted or wrong error: %v", bad, err)
		}
	}
	if s, err := ParseStep("17"); err != nil || s != 17 {
		t.Errorf("ParseStep: %d %v", s, err)
	}
	if _, err := ParseStep("-1"); err == nil {
		t.Error("negative step accepted")
	}
}

func TestRecords(t *testing.T) {
	n := NewNames("")
	r := sampleRollout()
	rec, err := n.RolloutRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "wmrl.rollouts.v1" || string(rec.Key) != "r1" {
		t.Errorf("topic %q key %q", rec.Topic, rec.Key)
	}
	if s, _ := HeaderValue(rec.Headers, HeaderSchema); s != SchemaRollout {
		t.Errorf("schema header %q", s)
	}
	if s, _ := HeaderValue(rec.Headers, HeaderStream); s != "mle" {
		t.Errorf("stream header %q", s)
	}
	got, err := DecodeRollout(rec.Value)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Errorf("value does not decode back: %v", err)
	}
	bad := sampleRollout()
	bad.RunID = ""
	if _, err := n.RolloutRecord(bad); Reason(err) != "invalid-field:run_id" {
		t.Errorf("invalid rollout: %v", err)
	}

	builders := []struct {
		topic string
		build func() (*kgo.Record, error)
	}{
		{n.Steps(), func() (*kgo.Record, error) { return n.StepRecord(sampleStep()) }},
		{n.Predicted(), func() (*kgo.Record, error) { return n.PredictedRecord(samplePredicted()) }},
		{n.Executed(), func() (*kgo.Record, error) { return n.ExecutedRecord(sampleExecuted()) }},
	}
	for _, b := range builders {
		rec, err := b.build()
		if err != nil {
			t.Fatal(err)
		}
		schema, _ := HeaderValue(rec.Headers, HeaderSchema)
		if rec.Topic != b.topic || string(rec.Key) != "r1" {
			t.Errorf("%s: topic %q key %q", b.topic, rec.Topic, rec.Key)
		}
		if step, _ := HeaderValue(rec.Headers, HeaderStep); step != "3" {
			t.Errorf("%s: step header %q", b.topic, step)
		}
		if _, err := decodeAny(schema, rec.Value); err != nil {
			t.Errorf("%s: %v", b.topic, err)
		}
	}

	cal, err := n.CalibrationRecord(sampleCalibration())
	if err != nil {
		t.Fatal(err)
	}
	if string(cal.Key) != "r1/mle" || cal.Topic != n.Calibration() {
		t.Errorf("calibration key %q topic %q", cal.Key, cal.Topic)
	}
	run, stream, err := ParseCalibrationKey(cal.Key)
	if err != nil || run != "r1" || stream != "mle" {
		t.Errorf("ParseCalibrationKey: %q %q %v", run, stream, err)
	}
	for _, k := range []string{"r1", "/mle", "r1/", "r1/mle/x", "r 1/mle"} {
		if _, _, err := ParseCalibrationKey([]byte(k)); err == nil {
			t.Errorf("ParseCalibrationKey(%q) accepted", k)
		}
	}
}

func TestAdvantageRecords(t *testing.T) {
	n := NewNames("test.")
	rows := manyRows(300)
	recs, err := n.AdvantageRecords("run-0001", "mle", 12, rows, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 {
		t.Fatalf("want several chunks, got %d", len(recs))
	}
	var got []AdvantageRow
	for idx, rec := range recs {
		if rec.Topic != "test.advantages.v1" || string(rec.Key) != "run-0001" || len(rec.Value) > 8<<10 {
			t.Errorf("chunk %d: topic %q key %q size %d", idx, rec.Topic, rec.Key, len(rec.Value))
		}
		cv, _ := HeaderValue(rec.Headers, HeaderChunk)
		i, cn, err := ParseChunk(cv)
		if err != nil || i != idx || cn != len(recs) {
			t.Errorf("chunk header %q: %v", cv, err)
		}
		part, err := DecodeAdvantages(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if rv, _ := HeaderValue(rec.Headers, HeaderRows); rv != strconv.Itoa(len(part)) {
			t.Errorf("rows header %q for %d rows", rv, len(part))
		}
		if ct, _ := HeaderValue(rec.Headers, HeaderContentType); ct != ContentTypeArrow {
			t.Errorf("content type %q", ct)
		}
		got = append(got, part...)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Error("chunks do not reassemble the step")
	}
	if _, err := n.AdvantageRecords("run-0002", "mle", 12, rows, 8<<10); Reason(err) != "conflict" {
		t.Errorf("foreign run: %v", err)
	}
	if _, err := n.AdvantageRecords("run-0001", "mle", 13, rows, 8<<10); Reason(err) != "conflict" {
		t.Errorf("foreign step: %v", err)
	}
	if _, err := n.AdvantageRecords("run-0001", "other", 12, rows, 8<<10); Reason(err) != "conflict" {
		t.Errorf("foreign stream: %v", err)
	}
	mixed := manyRows(4)
	mixed[1].Stream = "dsbench"
	recs, err = n.AdvantageRecords("run-0001", "", 12, mixed, DefaultChunkBytes)
	if err != nil || len(recs) != 1 {
		t.Fatalf("mixed streams: %v", err)
	}
	if _, ok := HeaderValue(recs[0].Headers, HeaderStream); ok {
		t.Error("mixed-stream batch carries a stream header")
	}
}
