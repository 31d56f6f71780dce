package formattrial

import (
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/wmrl/wmrl/topics"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ptr(f float64) *float64 { return &f }

// The records are those of a correction run: a rollout with a short inline artifact, a step of
// three groups, an ok world-model score and a timed-out sandbox run with an imputed score.
func rollout() topics.Rollout {
	return topics.Rollout{
		Schema: topics.SchemaRollout, RunID: "run-0001", Step: 3, GroupID: "s3-g12", RolloutID: "s3-g12-r2", Stream: "mle",
		PolicyVersion: "ckpt-3", Anchor: true, Index: 2, Prompt: "fit the <data> & report",
		Artifact: `{"model":"ridge","alpha":0.1}`, ArtifactSize: 29,
		Meta: map[string]string{"task": "t17", "lang": "python"}, CreatedAt: t0,
	}
}

func step() topics.StepManifest {
	return topics.StepManifest{
		Schema: topics.SchemaStep, RunID: "run-0001", Step: 3, PolicyVersion: "ckpt-3", CreatedAt: t0,
		Groups: []topics.GroupManifest{
			{GroupID: "s3-g0", Stream: "mle", Size: 8},
			{GroupID: "s3-g12", Stream: "mle", Size: 8, Anchor: true},
			{GroupID: "s3-g5", Stream: "dsbench", Size: 4},
		},
	}
}

func predicted() topics.PredictedReward {
	return topics.PredictedReward{
		Schema:     topics.SchemaPredicted,
		RolloutRef: topics.RolloutRef{RunID: "run-0001", Step: 3, GroupID: "s3-g12", RolloutID: "s3-g12-r2", Stream: "mle", PolicyVersion: "ckpt-3"},
		Anchor:     true, Score: ptr(0.625), Status: topics.StatusOK, Model: "wm-proxy", Attempts: 1, LatencyMS: 12.5, CreatedAt: t0,
	}
}

func executed() topics.ExecutedReward {
	return topics.ExecutedReward{
		Schema:     topics.SchemaExecuted,
		RolloutRef: topics.RolloutRef{RunID: "run-0001", Step: 3, GroupID: "s3-g12", RolloutID: "s3-g12-r2", Stream: "mle", PolicyVersion: "ckpt-3"},
		Score:      ptr(0), Imputed: true, Status: topics.StatusTimeout, Reason: "wall clock 600s exceeded",
		ExitCode: -9, DurationMS: 600000, StderrTail: "killed\n", CreatedAt: t0,
	}
}

// Avro schemas with the JSON field names; hamba/avro decodes straight into the topics types
// (TagKey "json"), a reused value, so the Avro path does no conversion at all.
const (
	avroRef = `{"name":"run_id","type":"string"},{"name":"step","type":"long"},{"name":"group_id","type":"string"},` +
		`{"name":"rollout_id","type":"string"},{"name":"stream","type":"string"},{"name":"policy_version","type":"string"}`
	avroTime    = `{"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}}`
	avroScore   = `{"name":"score","type":["null","double"],"default":null}`
	avroRollout = `{"type":"record","name":"Rollout","namespace":"wmrl.v1","fields":[` + avroRef + `,` +
		`{"name":"anchor","type":"boolean"},{"name":"index","type":"long"},{"name":"prompt","type":"string"},` +
		`{"name":"artifact","type":"string"},{"name":"artifact_uri","type":"string"},{"name":"artifact_sha256","type":"string"},` +
		`{"name":"artifact_size","type":"long"},{"name":"meta","type":{"type":"map","values":"string"}},` + avroTime + `]}`
	avroStep = `{"type":"record","name":"StepManifest","namespace":"wmrl.v1","fields":[{"name":"run_id","type":"string"},` +
		`{"name":"step","type":"long"},{"name":"policy_version","type":"string"},{"name":"policy_step","type":["null","long"],"default":null},` +
		`{"name":"end_of_run","type":"boolean"},{"name":"groups","type":{"type":"array","items":{"type":"record","name":"GroupManifest",` +
		`"fields":[{"name":"group_id","type":"string"},{"name":"stream","type":"string"},{"name":"size","type":"long"},{"name":"anchor","type":"boolean"}]}}},` +
		avroTime + `]}`
	avroPredicted = `{"type":"record","name":"PredictedReward","namespace":"wmrl.v1","fields":[` + avroRef + `,` +
		`{"name":"anchor","type":"boolean"},` + avroScore + `,{"name":"status","type":"string"},{"name":"reason","type":"string"},` +
		`{"name":"model","type":"string"},{"name":"attempts","type":"long"},{"name":"latency_ms","type":"double"},` + avroTime + `]}`
	avroExecuted = `{"type":"record","name":"ExecutedReward","namespace":"wmrl.v1","fields":[` + avroRef + `,` + avroScore + `,` +
		`{"name":"imputed","type":"boolean"},{"name":"status","type":"string"},{"name":"reason","type":"string"},` +
		`{"name":"exit_code","type":"long"},{"name":"duration_ms","type":"double"},{"name":"stderr_tail","type":"string"},` + avroTime + `]}`
)

var avroAPI = avro.Config{TagKey: "json"}.Freeze()

type validator interface{ Validate() error }

// benchFormats runs the three decoders of one record type as sub-benchmarks json, protobuf and
// avro, so one `go test -bench` run alternates them (-count) on the same machine state.
func benchFormats[T any, P interface {
	*T
	validator
}](b *testing.B, v T, encJSON func(T) ([]byte, error), decJSON func([]byte) (T, error),
	encProto func(T) ([]byte, error), decProto func([]byte) (T, error), avroSchema string, blank T) {
	js, err := encJSON(v)
	if err != nil {
		b.Fatal(err)
	}
	pb, err := encProto(v)
	if err != nil {
		b.Fatal(err)
	}
	sch := avro.MustParse(avroSchema)
	av, err := avroAPI.Marshal(sch, &v)
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, p []byte, dec func([]byte) error) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if err := dec(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// validate is the part every format shares: the decoders differ by the rest.
	run("validate", js, func([]byte) error { c := v; return P(&c).Validate() })
	run("json", js, func(p []byte) error { _, err := decJSON(p); return err })
	run("protobuf", pb, func(p []byte) error { _, err := decProto(p); return err })
	var out T
	run("avro", av, func(p []byte) error {
		out = blank // Avro records carry no schema member either: the blank sets it, as the Proto decoders do
		if err := avroAPI.Unmarshal(sch, p, &out); err != nil {
			return err
		}
		return P(&out).Validate()
	})
}

func BenchmarkDecodeRollout(b *testing.B) {
	benchFormats(b, rollout(), topics.EncodeRollout, topics.DecodeRollout, topics.EncodeRolloutProto, topics.DecodeRolloutProto, avroRollout, topics.Rollout{Schema: topics.SchemaRollout})
}

func BenchmarkDecodeStep(b *testing.B) {
	benchFormats(b, step(), topics.EncodeStep, topics.DecodeStep, topics.EncodeStepProto, topics.DecodeStepProto, avroStep, topics.StepManifest{Schema: topics.SchemaStep})
}

func BenchmarkDecodePredicted(b *testing.B) {
	benchFormats(b, predicted(), topics.EncodePredicted, topics.DecodePredicted, topics.EncodePredictedProto, topics.DecodePredictedProto, avroPredicted, topics.PredictedReward{Schema: topics.SchemaPredicted})
}

func BenchmarkDecodeExecuted(b *testing.B) {
	benchFormats(b, executed(), topics.EncodeExecuted, topics.DecodeExecuted, topics.EncodeExecutedProto, topics.DecodeExecutedProto, avroExecuted, topics.ExecutedReward{Schema: topics.SchemaExecuted})
}
