// Command gohelper is the Go side of the Python client's end-to-end tests and benchmark: it
// writes a run's advantages to a real broker with the topics builders, exactly as the correction
// consumer frames them (one transaction per step, chunked Arrow payloads, wmrl-* headers), plus an
// aborted transaction and another run's steps that a correct reader must not return, and prints
// the canonical digest of the committed rows. It also checks, with the strict Go decoders, what the
// Python RolloutProducer wrote. The full pipeline (`wmrl demo --external`, read back with `wmrl
// digest --topic`) is tested too; this helper adds the shapes the pipeline does not make on demand:
// many chunks per step, an aborted transaction, interleaved runs, and a benchmark-sized run.
//
//	gohelper produce  --brokers B --prefix P --run R --steps N --groups G --group-size S
//	gohelper verify-rollouts --brokers B --prefix P --run R --rollouts N --steps M [--end-of-run]
//	gohelper delete-topics --brokers B --prefix P
//	gohelper produce-framed --brokers B --prefix P --registry URL   (framed.go)
//	gohelper partitions --n N KEY...   (the partition the Go stages' partitioner gives each key)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicadmin"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gohelper produce|verify-rollouts|delete-topics|produce-framed|partitions [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "verify-rollouts":
		err = verifyRollouts(os.Args[2:])
	case "delete-topics":
		err = deleteTopics(os.Args[2:])
	case "produce-framed":
		err = produceFramed(os.Args[2:])
	case "partitions":
		err = partitions(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gohelper:", err)
		os.Exit(1)
	}
}

type common struct {
	brokers string
	prefix  string
	timeout time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "seed brokers, comma-separated")
	fs.StringVar(&c.prefix, "prefix", topics.DefaultPrefix, "topic prefix")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "overall deadline")
}

func (c *common) seeds() []string { return strings.Split(c.brokers, ",") }

// produceResult is what `produce` prints: the Python test compares its reads with it.
type produceResult struct {
	Run          string  `json:"run"`
	Steps        int     `json:"steps"`
	Rows         int     `json:"rows"`
	Chunks       int     `json:"chunks"`
	Digest       string  `json:"digest"`
	AbortedRows  int     `json:"aborted_rows"`
	OtherRunRows int     `json:"other_run_rows"`
	Seconds      float64 `json:"seconds"`
}

func produce(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	var c common
	c.register(fs)
	run := fs.String("run", "py-e2e", "run id")
	other := fs.String("other-run", "", "also write this run's steps, interleaved (a reader of --run must skip them)")
	first := fs.Int64("first-step", 0, "first step number")
	steps := fs.Int("steps", 4, "steps to write")
	groups := fs.Int("groups", 8, "groups per step")
	size := fs.Int("group-size", 8, "rollouts per group")
	chunkBytes := fs.Int("chunk-bytes", topics.DefaultChunkBytes, "max bytes of one Arrow chunk")
	partitions := fs.Int("partitions", 3, "partitions of the topics it creates")
	abort := fs.Bool("abort", true, "write an aborted transaction with a bogus copy of the first step")
	framed := fs.Bool("framed", false, "write the advantages as `wmrl correct` does with a schema registry: a Confluent-framed wmrl.v1.AdvantageBatch (against an in-process registry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	names := topics.NewNames(c.prefix)
	if *framed {
		fake := schemareg.NewDouble()
		defer fake.Close()
		reg, err := schemareg.New(schemareg.Config{URLs: []string{fake.URL()}})
		if err != nil {
			return err
		}
		if names, err = reg.FramingNames(ctx, names); err != nil {
			return err
		}
	}
	if err := createTopics(ctx, c.seeds(), names, int32(*partitions)); err != nil {
		return err
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.seeds()...),
		kgo.TransactionalID("gohelper-"+c.prefix+*run),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(1<<20),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	start := time.Now()
	res := produceResult{Run: *run, Steps: *steps}
	var all []topics.AdvantageRow
	txn := func(recs []*kgo.Record, commit bool) error {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
			return fmt.Errorf("produce: %w", err)
		}
		end := kgo.TryAbort
		if commit {
			end = kgo.TryCommit
		}
		return cl.EndTransaction(ctx, end)
	}
	for i := 0; i < *steps; i++ {
		step := *first + int64(i)
		rows := stepRows(*run, step, *groups, *size)
		if *abort && i == 0 {
			bogus := stepRows(*run, step, *groups, *size)
			for j := range bogus {
				if bogus[j].Mask {
					bogus[j].Advantage += 1
				}
			}
			recs, err := names.AdvantageRecords(*run, "", step, bogus, *chunkBytes)
			if err != nil {
				return err
			}
			if err := txn(recs, false); err != nil {
				return fmt.Errorf("aborted step %d: %w", step, err)
			}
			res.AbortedRows += len(bogus)
		}
		recs, err := names.AdvantageRecords(*run, "", step, rows, *chunkBytes)
		if err != nil {
			return err
		}
		if *other != "" {
			orows := stepRows(*other, step, 2, *size)
			orecs, err := names.AdvantageRecords(*other, "", step, orows, *chunkBytes)
			if err != nil {
				return err
			}
			recs = append(orecs, recs...)
			res.OtherRunRows += len(orows)
		}
		if err := txn(recs, true); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		for _, r := range recs {
			if string(r.Key) == *run {
				res.Chunks++
			}
		}
		all = append(all, rows...)
	}
	res.Rows = len(all)
	res.Digest = topics.DigestRows(all)
	res.Seconds = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(res)
}

func createTopics(ctx context.Context, seeds []string, names topics.Names, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	plan := topicadmin.DefaultPlan(names)
	plan.Partitions = partitions
	plan.Replication = 1
	if _, err := topicadmin.Create(ctx, kadm.NewClient(cl), plan); err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	return nil
}

// stepRows builds one step's advantage rows the way the correction consumer shapes them: anchor
// groups (IsAnchor at 0.25) use the executed score, world-model groups the calibrated prediction,
// every seventh rollout failed and is masked out (Mask false), advantages are group-relative. Deterministic in
// (run, step).
func stepRows(run string, step int64, groups, size int) []topics.AdvantageRow {
	rng := rand.New(rand.NewPCG(uint64(step), uint64(len(run))))
	var rows []topics.AdvantageRow
	for g := 0; g < groups; g++ {
		gid := fmt.Sprintf("s%d-g%d", step, g)
		anchor := topics.IsAnchor(run, gid, 0.25)
		start := len(rows)
		for i := 0; i < size; i++ {
			r := topics.AdvantageRow{
				RunID: run, Stream: "mle", Step: step, GroupID: gid, RolloutID: fmt.Sprintf("%s-r%d", gid, i),
				PolicyVersion: fmt.Sprintf("ckpt-%d", step), CalibrationVersion: uint64(step / 2),
			}
			if (g*size+i)%7 == 6 {
				r.Source = topics.SourceWorldModel // failed: masked out (Mask false), advantage 0
				rows = append(rows, r)
				continue
			}
			r.Mask = true // the row counts in the loss
			r.Predicted, r.PredictedOK = rng.Float64(), true
			r.Calibrated = 0.1 + 0.8*r.Predicted
			if anchor {
				r.Source, r.Executed, r.ExecutedOK, r.Used, r.Weight = topics.SourceAnchor, rng.Float64(), true, 0, 1.75
				r.Used = r.Executed
			} else {
				r.Source, r.Used, r.Weight = topics.SourceWorldModel, r.Calibrated, 1
			}
			rows = append(rows, r)
		}
		var sum, sq float64
		n := 0
		for _, r := range rows[start:] {
			if r.Mask {
				sum += r.Used
				n++
			}
		}
		mean := sum / float64(n)
		for _, r := range rows[start:] {
			if r.Mask {
				sq += (r.Used - mean) * (r.Used - mean)
			}
		}
		std := math.Sqrt(sq / float64(n))
		for j := start; j < len(rows); j++ {
			if rows[j].Mask {
				rows[j].Advantage = (rows[j].Used - mean) / (std + 1e-4)
			}
		}
	}
	return rows
}

type verifyResult struct {
	Rollouts int `json:"rollouts"`
	Steps    int `json:"steps"`
	// EndOfRun is the last step the run's end-of-run record names (absent: none read); such a
	// record is not counted in Steps.
	EndOfRun *int64   `json:"end_of_run,omitempty"`
	Errors   []string `json:"errors"`
}

// verifyRollouts reads the rollouts and steps topics from the start (read_committed) and checks
// each record of --run: strict Go decoding, and value bytes and headers equal to what the Go
// builders produce for the decoded value.
func verifyRollouts(args []string) error {
	fs := flag.NewFlagSet("verify-rollouts", flag.ContinueOnError)
	var c common
	c.register(fs)
	run := fs.String("run", "py-e2e", "run id")
	wantRollouts := fs.Int("rollouts", 0, "rollouts to expect")
	wantSteps := fs.Int("steps", 0, "step manifests to expect")
	wantEnd := fs.Bool("end-of-run", false, "expect the run's end-of-run record too")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	names := topics.NewNames(c.prefix)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.seeds()...),
		kgo.ConsumeTopics(names.Rollouts(), names.Steps(), names.Runs()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	res := verifyResult{Errors: []string{}}
	stepsPartition := int32(-1) // every steps record of the run, the end included, on one partition
	for res.Rollouts < *wantRollouts || res.Steps < *wantSteps || (*wantEnd && res.EndOfRun == nil) {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("timed out with %d rollouts and %d steps", res.Rollouts, res.Steps))
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			res.Errors = append(res.Errors, fmt.Sprintf("fetch %s[%d]: %v", t, p, err))
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if string(r.Key) != *run {
				return
			}
			var want *kgo.Record
			var err error
			switch r.Topic {
			case names.Rollouts():
				var ro topics.Rollout
				if ro, err = topics.DecodeRollout(r.Value); err == nil {
					want, err = names.RolloutRecord(ro)
				}
				res.Rollouts++
			case names.Steps():
				var st topics.StepManifest
				if st, err = topics.DecodeStep(r.Value); err == nil {
					want, err = names.StepRecord(st)
				}
				if stepsPartition >= 0 && r.Partition != stepsPartition && err == nil {
					err = fmt.Errorf("steps record on partition %d, the run's others on %d", r.Partition, stepsPartition)
				}
				stepsPartition = r.Partition
				if err == nil && st.EndOfRun {
					err = fmt.Errorf("an end-of-run record (step %d) on the steps topic: it belongs on %s", st.Step, names.Runs())
				}
				res.Steps++
			case names.Runs():
				// The end request: on the run-control topic, on the partition number of the run's
				// steps (wmrl correct relays it there), encoded as Go's EndRequestRecord.
				var st topics.StepManifest
				if st, err = topics.DecodeStep(r.Value); err == nil {
					want, err = names.EndRequestRecord(st.RunID, st.Step, st.CreatedAt)
				}
				if err == nil && !st.EndOfRun {
					err = fmt.Errorf("step %d on the run-control topic is no end-of-run record", st.Step)
				}
				if err == nil && stepsPartition >= 0 && r.Partition != stepsPartition {
					err = fmt.Errorf("end request on partition %d, the run's steps on %d", r.Partition, stepsPartition)
				}
				if err == nil && res.EndOfRun != nil {
					err = fmt.Errorf("a second end-of-run record (step %d after %d)", st.Step, *res.EndOfRun)
				}
				if err == nil {
					res.EndOfRun = &st.Step
				}
			}
			if err == nil {
				err = sameRecord(r, want)
			}
			if err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("%s[%d]@%d: %s: %v", r.Topic, r.Partition, r.Offset, topics.Reason(err), err))
			}
		})
	}
	if res.Rollouts != *wantRollouts || res.Steps != *wantSteps {
		res.Errors = append(res.Errors, fmt.Sprintf("read %d rollouts and %d steps, want %d and %d", res.Rollouts, res.Steps, *wantRollouts, *wantSteps))
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return err
	}
	if len(res.Errors) > 0 {
		return errors.New(strings.Join(res.Errors, "; "))
	}
	return nil
}

func sameRecord(got, want *kgo.Record) error {
	if !bytes.Equal(got.Value, want.Value) {
		return fmt.Errorf("value differs from Go's encoding:\n got %s\nwant %s", got.Value, want.Value)
	}
	if !bytes.Equal(got.Key, want.Key) {
		return fmt.Errorf("key %q, want %q", got.Key, want.Key)
	}
	if len(got.Headers) != len(want.Headers) {
		return fmt.Errorf("%d headers, want %d (%v vs %v)", len(got.Headers), len(want.Headers), got.Headers, want.Headers)
	}
	for i := range want.Headers {
		if got.Headers[i].Key != want.Headers[i].Key || !bytes.Equal(got.Headers[i].Value, want.Headers[i].Value) {
			return fmt.Errorf("header %d is %s=%q, want %s=%q", i, got.Headers[i].Key, got.Headers[i].Value, want.Headers[i].Key, want.Headers[i].Value)
		}
	}
	return nil
}

func deleteTopics(args []string) error {
	fs := flag.NewFlagSet("delete-topics", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.prefix == topics.DefaultPrefix {
		return errors.New("refusing to delete the default prefix's topics")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, topics.NewNames(c.prefix).All()...)
	if err != nil {
		return err
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !strings.Contains(r.Err.Error(), "UNKNOWN_TOPIC") {
			return fmt.Errorf("delete %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// partitions prints {"KEY": partition} for n partitions with franz-go's StickyKeyPartitioner
// (murmur2, as Kafka's Java client), which every Go stage uses for records keyed by run_id: a
// run's records from Python must land on the same partition number.
func partitions(args []string) error {
	fs := flag.NewFlagSet("partitions", flag.ContinueOnError)
	n := fs.Int("n", 2, "partition count")
	if err := fs.Parse(args); err != nil {
		return err
	}
	out := map[string]int{}
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, k := range fs.Args() {
		out[k] = p.Partition(&kgo.Record{Key: []byte(k)}, *n)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
