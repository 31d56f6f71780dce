package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// errRunNotFound: Redis holds neither state nor an end of the run under the prefix.
var errRunNotFound = errors.New("run not found")

// StreamState (exported: encoding/json fills embedded pointers only to exported types) is what `runs show` reads from a stream's decoded state (ReadState).
type StreamState struct {
	ConfigHash  string  `json:"config_hash"`
	Map         string  `json:"map"`
	TotalPairs  uint64  `json:"total_pairs"`
	NoiseRatio  float64 `json:"noise_ratio"` // s̄² = σ²_ξ/σ²_true, the inverse-variance weight's input
	NoiseGroups uint64  `json:"noise_groups"`
	// Mean |x − y| and |f(x) − y| over the window's anchor pairs (predicted x, executed y) under
	// the map f in force: in-sample, so an optimistic calibration error. Null under the z-space
	// map, whose pairs are within-group standardised and whose map acts on advantages.
	CalErrRaw    *float64 `json:"calibration_error_raw"`
	CalErrFitted *float64 `json:"calibration_error_fitted"`
	StateError   string   `json:"state_error,omitempty"` // the state could not be read back
}

// showJSON is `runs show --output json`.
type showJSON struct {
	runJSON
	Prefix          string `json:"redis_prefix"`
	StepsTopic      string `json:"steps_topic"`
	StepsPartition  *int32 `json:"steps_partition"` // null: see steps_partition_error
	StepsPartitions int    `json:"steps_partitions"`
	PartitionError  string `json:"steps_partition_error,omitempty"`
	// NewestManifest is the largest step of the run's manifests in the last lagTail records of
	// its steps partition (null: none there), and Lag how many steps beyond the last sealed one
	// it is: steps the trainer published that 'wmrl correct' has not sealed yet.
	NewestManifest *int64 `json:"newest_manifest_step"`
	Lag            *int64 `json:"lag_steps"`
}

func newRunsShowCmd(a *app) *cobra.Command {
	o := &runsViewOptions{a: a}
	cmd := &cobra.Command{
		Use: "show RUN",
		Example: `  wmrl runs show r1
  wmrl runs show r1 --output json
  wmrl runs show r1 --redis redis://redis:6379/0 --redis-prefix lab --topic-prefix lab.`,
		Short: "Show one run's state in Redis per stream, its end, and its partition of the steps topic",
		Long: `show prints what 'wmrl correct' holds of RUN in Redis under --redis-prefix: per stream the last
sealed step, the anchor pairs in the window, the fit version, the anchor weight, the noise ratio
s̄² behind it, the window's calibration error before and after the map in force (in-sample over
the window pairs, so optimistic), the state's bytes and its keys' remaining time to live (an
ended run's keys expire after correct's --ended-run-retention); then the run's end record, the
partition of the steps topic its records go to, and its lag: how many steps beyond the last
sealed one the trainer has published, from the newest manifest of the run among the last 10000
records of that partition (unknown when there is none among them). Kafka is asked for the
partition and the lag; if it cannot answer, the line says why instead.

A run Redis holds nothing of (never sealed a step, or its keys expired) is an error naming the
run and the prefix; the exit status is then 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			show, err := o.show(ctx, args[0])
			if err != nil {
				return err
			}
			if o.output == "json" {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(show)
			}
			return writeShowTable(a.stdout, show, runsClock())
		},
	}
	o.flags(cmd)
	return cmd
}

func (o *runsViewOptions) show(ctx context.Context, run string) (*showJSON, error) {
	if !topics.ValidID(run) {
		return nil, fmt.Errorf("run id %q is not a valid id (see topics.ValidID)", run)
	}
	st, done, err := o.store()
	if err != nil {
		return nil, err
	}
	defer done()
	sums, err := st.Summaries(ctx, []string{run})
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", run, err)
	}
	warnUnreadable(o.a.stderr, sums)
	sum := &sums[0]
	if len(sum.Streams) == 0 && sum.End == nil {
		return nil, &exitError{code: 1, err: fmt.Errorf("%w: Redis holds no state and no end of run %q under prefix %q (wmrl runs list --redis-prefix %s lists the runs there)",
			errRunNotFound, run, o.prefix, o.prefix)}
	}
	out := &showJSON{runJSON: toRunJSON(sum), Prefix: o.prefix, StepsTopic: o.a.conn.Names().Steps()}
	for i, ss := range sum.Streams {
		if ss.Head == nil {
			continue
		}
		out.Streams[i].StreamState = readStreamState(ctx, st, run, ss.Stream, ss.Head.SealedStep)
	}
	info, err := o.steps(ctx, out.StepsTopic, run)
	if err != nil {
		out.PartitionError = err.Error()
		return out, nil
	}
	out.StepsPartition, out.StepsPartitions = &info.partition, info.partitions
	if info.newest >= 0 {
		out.NewestManifest = &info.newest
		lag := max(info.newest-sum.SealedStep(), 0)
		out.Lag = &lag
	}
	return out, nil
}

// readStreamState decodes the state of (run, stream) sealed after step; a state that cannot
// be read back (trimmed in between, or failing its digest) is reported in StateError.
func readStreamState(ctx context.Context, st *statestore.Store, run, stream string, step int64) *StreamState {
	b, err := st.ReadState(ctx, run, stream, step)
	if err != nil {
		return &StreamState{StateError: err.Error()}
	}
	s, err := correction.DecodeState(b)
	if err != nil {
		return &StreamState{StateError: err.Error()}
	}
	h := s.ConfigHash()
	out := &StreamState{ConfigHash: fmt.Sprintf("%x", h[:]), Map: s.Config().Map.String(), TotalPairs: s.TotalPairs()}
	out.NoiseRatio, out.NoiseGroups = s.NoiseRatio()
	if s.Config().Map != correction.MapZSpace {
		out.CalErrRaw, out.CalErrFitted = windowErrors(s)
	}
	return out
}

// windowErrors returns the mean |x − y| and |f(x) − y| over s's window pairs, nil if empty.
func windowErrors(s *correction.State) (raw, fitted *float64) {
	first, n := s.WindowSpan()
	if n == 0 {
		return nil, nil
	}
	b := s.AppendWindow(nil, first, first+uint64(n))
	var r, f float64
	for i := 0; i+16 <= len(b); i += 16 {
		x := math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
		y := math.Float64frombits(binary.LittleEndian.Uint64(b[i+8:]))
		r += math.Abs(x - y)
		f += math.Abs(s.Calibrate(x) - y)
	}
	r, f = r/float64(n), f/float64(n)
	return &r, &f
}

// lagTail bounds the records of the run's steps partition that `runs show` reads for the run's
// newest manifest: the lag costs one bounded read of one partition.
const lagTail = 10000

// stepsInfo is what `runs show` reads of the steps topic: the run's partition and its newest
// manifest in the partition's last lagTail records (-1: none there).
type stepsInfo struct {
	partition  int32
	partitions int
	newest     int64
}

func (o *runsViewOptions) steps(ctx context.Context, topic, run string) (*stepsInfo, error) {
	opts, err := o.a.kafkaOpts()
	if err != nil {
		return nil, err
	}
	n, err := topicread.PartitionCount(ctx, opts, topic)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", topic, err)
	}
	info := &stepsInfo{partitions: n, partition: topics.PartitionFor(run, n), newest: -1}
	start := map[string]map[int32]kgo.Offset{topic: {info.partition: kgo.NewOffset().AtEnd().Relative(-lagTail)}}
	err = topicread.ToEnd(ctx, opts, start, 0, nil, func(r *kgo.Record) error {
		if string(r.Key) != run {
			return nil
		}
		if m, err := topics.DecodeStepRecord(r); err == nil && !m.EndOfRun {
			info.newest = max(info.newest, m.Step)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s partition %d: %w", topic, info.partition, err)
	}
	return info, nil
}

func optFloat(f *float64) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f, 'g', 4, 64)
}

func writeShowTable(out io.Writer, s *showJSON, now time.Time) error {
	fmt.Fprintf(out, "run %s (Redis prefix %s): ", s.Run, s.Prefix)
	if e := s.Ended; e != nil {
		fmt.Fprintf(out, "ended %s", endCell(&statestore.RunEnd{LastStep: e.LastStep, EndedAt: e.At, Reason: e.Reason}, now))
	} else {
		fmt.Fprint(out, s.State)
	}
	if s.ExpiresIn != nil {
		fmt.Fprintf(out, ", keys expire in %s", ttlCell(time.Duration(*s.ExpiresIn*float64(time.Second))))
	}
	fmt.Fprintln(out)
	if s.StepsPartition != nil {
		fmt.Fprintf(out, "steps topic %s: partition %d of %d; ", s.StepsTopic, *s.StepsPartition, s.StepsPartitions)
		if s.Lag != nil {
			fmt.Fprintf(out, "lag %d steps (newest manifest: step %d)\n", *s.Lag, *s.NewestManifest)
		} else {
			fmt.Fprintf(out, "lag unknown (no manifest of the run in the partition's last %d records)\n", lagTail)
		}
	} else {
		fmt.Fprintf(out, "steps topic %s: partition unknown: %s\n", s.StepsTopic, s.PartitionError)
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "STREAM\tSEALED_STEP\tPAIRS\tFIT_VERSION\tANCHOR_WEIGHT\tNOISE_RATIO\tCAL_ERR_RAW\tCAL_ERR_FITTED\tSTATE_BYTES\tEXPIRES_IN")
	var problems []string
	for _, ss := range s.Streams {
		step, pairs, version, weight := "-", "-", "-", "-"
		if ss.SealedStep != nil {
			step, pairs = strconv.FormatInt(*ss.SealedStep, 10), strconv.Itoa(*ss.Pairs)
			version, weight = strconv.FormatUint(*ss.FitVersion, 10), optFloat(ss.AnchorWeight)
		}
		noise, raw, fitted := "-", "-", "-"
		if st := ss.StreamState; st != nil && st.StateError == "" {
			noise, raw, fitted = optFloat(&st.NoiseRatio), optFloat(st.CalErrRaw), optFloat(st.CalErrFitted)
		} else if st != nil {
			problems = append(problems, fmt.Sprintf("stream %s: state not readable: %s", ss.Stream, st.StateError))
		}
		ttl := statestore.NoExpiry
		if ss.ExpiresIn != nil {
			ttl = time.Duration(*ss.ExpiresIn * float64(time.Second))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ss.Stream, step, pairs, version, weight,
			noise, raw, fitted, humanBytes(ss.StateBytes), ttlCell(ttl))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(out, p)
	}
	return nil
}
