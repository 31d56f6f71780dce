package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/statestore"
)

// runsClock is the clock `runs list` and `runs show` measure "ago" with; tests fix it.
var runsClock = time.Now

// The STATE column's values.
const (
	runActive = "active"
	runEnded  = "ended"
)

// runsViewOptions are the flags `runs list` and `runs show` share.
type runsViewOptions struct {
	a       *app
	prefix  string
	output  string
	timeout time.Duration
	// changelog: `runs list` also lists the runs only the calibration changelog still holds.
	changelog bool
}

func (o *runsViewOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.prefix, "redis-prefix", statestore.DefaultPrefix, "key prefix of the correction state in Redis (as 'wmrl correct --redis-prefix'; under a --topic-prefix other than wmrl.: <prefix>"+statestore.DefaultPrefix+")")
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		o.prefix = o.a.identity(cmd, "redis-prefix", o.prefix, statestore.DefaultPrefix)
	}
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "give up after this long")
}

func (o *runsViewOptions) checkOutput() error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output %q: want table or json", o.output)
	}
	return nil
}

// store returns the state store under --redis-prefix and a function closing its client.
func (o *runsViewOptions) store() (*statestore.Store, func(), error) {
	rdb, err := o.a.redis()
	if err != nil {
		return nil, nil, err
	}
	return statestore.New(rdb, o.prefix, 0), func() { _ = rdb.Close() }, nil
}

func newRunsListCmd(a *app) *cobra.Command {
	o := &runsViewOptions{a: a}
	cmd := &cobra.Command{
		Use: "list",
		Example: `  wmrl runs list
  wmrl runs list --output json
  wmrl runs list --redis redis://redis:6379/0 --redis-prefix lab`,
		Short: "List the active and recently ended runs 'wmrl correct' holds state of in Redis",
		Long: `list prints one line per run under --redis-prefix, sorted by run id:

  STATE          active, or ended once 'wmrl correct' retired the run (its end is recorded in
                 Redis; its keys expire after correct's --ended-run-retention)
  SEALED_STEP    the last sealed step (the largest over the run's streams)
  STREAMS        the run's streams; the next two columns list their values in this order
  STATE_BYTES    the bytes of the latest sealed states as stored in Redis: each stream's state
                 value (digest and head, STRLEN) plus the window chunks that state reaches
                 (STRLEN); Redis's per-key overhead and older kept snapshots are not counted
  ANCHOR_WEIGHT  the inverse-variance weight of anchor rows for the next step
  FIT_VERSION    the number of refits of the calibration map (0: identity)
  ENDED          when the run ended, its last step and why (marker: an end-of-run record;
                 idle: correct's --run-idle-timeout), or -

With --changelog (the default) it also reads the calibration changelog topic (Kafka) and lists
the runs Redis holds nothing of (Redis restarted empty, or an ended run's keys expired while
its changelog records are still within the retention) from their last snapshot per stream and
their end record, with a '*' after STATE (json: "source": "changelog"); STATE_BYTES is then 0.
'wmrl correct' rewrites an active run's Redis state at its next sealed step; nothing rewrites
an ended or idle run's. If Kafka cannot be read, a warning says so and Redis's runs are listed.

Lag (steps the trainer published that are not sealed yet) is not listed: it needs the newest
manifest of each run on the steps topic, which only a read of the whole topic gives; 'wmrl runs
show RUN' reads it from the tail of the run's partition.

It scans the Redis keyspace (every master of a cluster) and reads the runs in four pipelined
round trips: an operator's view, not something to poll. --output json prints the same data per
stream, with each key's remaining time to live.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			st, done, err := o.store()
			if err != nil {
				return err
			}
			defer done()
			sums, err := listRuns(ctx, st)
			if err != nil {
				return err
			}
			warnUnreadable(o.a.stderr, sums)
			var fromLog map[string]bool
			if o.changelog {
				sums, fromLog = o.withChangelog(ctx, sums)
			}
			if o.output == "json" {
				return writeRunsJSON(a.stdout, sums, fromLog)
			}
			return writeRunsTable(a.stdout, sums, fromLog, runsClock())
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVar(&o.changelog, "changelog", true, "also list the runs only the calibration changelog holds (Redis lost them, or their keys expired)")
	return cmd
}

// withChangelog adds the changelog's runs Redis holds nothing of; a failed read is a warning.
func (o *runsViewOptions) withChangelog(ctx context.Context, sums []statestore.RunSummary) ([]statestore.RunSummary, map[string]bool) {
	topic := o.a.conn.Names().Calibration()
	opts, err := o.a.kafkaOpts()
	var fromLog map[string]*statestore.RunSummary
	if err == nil {
		lctx, cancel := context.WithTimeout(ctx, changelogTimeout)
		fromLog, err = changelogRuns(lctx, opts, topic)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(o.a.stderr, "wmrl: runs list: the calibration changelog %s was not read, so runs Redis lost are not listed (--changelog=false skips it): %v\n", topic, err)
		return sums, nil
	}
	return mergeChangelog(sums, fromLog)
}

// warnUnreadable tells of every stream whose Redis state this build cannot read (it is listed
// with the value's bytes alone; wmrl correct rebuilds such a state from the changelog).
func warnUnreadable(w io.Writer, sums []statestore.RunSummary) {
	for _, s := range sums {
		for _, ss := range s.Streams {
			if ss.Unreadable != nil {
				fmt.Fprintf(w, "wmrl: runs: %v (counted by its value alone)\n", ss.Unreadable)
			}
		}
	}
}

// listRuns reads the summaries of every run under st's prefix.
func listRuns(ctx context.Context, st *statestore.Store) ([]statestore.RunSummary, error) {
	runs, err := st.ListRuns(ctx)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	sums, err := st.Summaries(ctx, runs)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	return sums, nil
}

func runState(s *statestore.RunSummary) string {
	if s.End != nil {
		return runEnded
	}
	return runActive
}

// writeRunsTable prints sums as `runs list`'s table; now dates the ENDED column's "ago".
func writeRunsTable(out io.Writer, sums []statestore.RunSummary, fromLog map[string]bool, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tSTATE\tSEALED_STEP\tSTREAMS\tSTATE_BYTES\tANCHOR_WEIGHT\tFIT_VERSION\tENDED")
	for i := range sums {
		s := &sums[i]
		var streams, weights, versions []string
		for _, ss := range s.Streams {
			streams = append(streams, ss.Stream)
			if ss.Head == nil {
				weights, versions = append(weights, "-"), append(versions, "-")
				continue
			}
			weights = append(weights, strconv.FormatFloat(ss.Head.AnchorWeight, 'g', 4, 64))
			versions = append(versions, strconv.FormatUint(ss.Head.FitVersion, 10))
		}
		state := runState(s)
		if fromLog[s.Run] {
			state += "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Run, state, stepCell(s.SealedStep()),
			cmp.Or(strings.Join(streams, ","), "-"), humanBytes(s.StateBytes()), cmp.Or(strings.Join(weights, ","), "-"),
			cmp.Or(strings.Join(versions, ","), "-"), endCell(s.End, now))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(fromLog) > 0 {
		_, err := fmt.Fprintln(out, "* Redis holds nothing of the run: read from the calibration changelog (wmrl correct rewrites an active run's state at its next sealed step)")
		return err
	}
	return nil
}

func stepCell(v int64) string {
	if v < 0 {
		return "-"
	}
	return strconv.FormatInt(v, 10)
}

// endCell is e as "<time> after step N (<reason>, <ago> ago)", or "-".
func endCell(e *statestore.RunEnd, now time.Time) string {
	if e == nil {
		return "-"
	}
	return fmt.Sprintf("%s after step %d (%s, %s ago)", e.EndedAt.UTC().Format(time.RFC3339), e.LastStep,
		cmp.Or(e.Reason, "-"), now.Sub(e.EndedAt).Round(time.Second))
}

// ttlCell is a key's remaining time to live for a table.
func ttlCell(d time.Duration) string {
	switch {
	case d == statestore.NoExpiry:
		return "never"
	case d <= 0:
		return "-"
	}
	return d.Round(time.Second).String()
}

// humanBytes is n in B, KiB or MiB with one decimal.
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// runJSON is one run in `runs list --output json` (and the run part of `runs show`'s).
type runJSON struct {
	Run   string `json:"run"`
	State string `json:"state"`
	// Source is "redis", or "changelog" for a run Redis holds nothing of (`runs list`).
	Source     string       `json:"source"`
	SealedStep *int64       `json:"last_sealed_step"` // null: no step sealed
	StateBytes int64        `json:"state_bytes"`
	Ended      *endJSON     `json:"ended"`
	ExpiresIn  *float64     `json:"expires_in_seconds"` // null: the keys do not expire
	Streams    []streamJSON `json:"streams"`
}

type endJSON struct {
	LastStep int64     `json:"last_step"`
	At       time.Time `json:"at"`
	Reason   string    `json:"reason"`
}

type streamJSON struct {
	Stream       string   `json:"stream"`
	SealedStep   *int64   `json:"last_sealed_step"`
	FitVersion   *uint64  `json:"fit_version"`
	AnchorWeight *float64 `json:"anchor_weight"`
	Pairs        *int     `json:"window_pairs"`
	StateBytes   int64    `json:"state_bytes"`
	ExpiresIn    *float64 `json:"expires_in_seconds"`
	// The fields `runs show` adds from the decoded state.
	*StreamState
}

func expiresIn(d time.Duration) *float64 {
	if d == statestore.NoExpiry {
		return nil
	}
	s := max(d, 0).Seconds()
	return &s
}

func toRunJSON(s *statestore.RunSummary) runJSON {
	r := runJSON{Run: s.Run, State: runState(s), Source: "redis", StateBytes: s.StateBytes(), ExpiresIn: expiresIn(s.TTL), Streams: []streamJSON{}}
	if v := s.SealedStep(); v >= 0 {
		r.SealedStep = &v
	}
	if s.End != nil {
		r.Ended = &endJSON{LastStep: s.End.LastStep, At: s.End.EndedAt.UTC(), Reason: s.End.Reason}
	}
	for _, ss := range s.Streams {
		sj := streamJSON{Stream: ss.Stream, StateBytes: ss.StateBytes, ExpiresIn: expiresIn(ss.TTL)}
		if h := ss.Head; h != nil {
			sj.SealedStep, sj.FitVersion, sj.AnchorWeight, sj.Pairs = &h.SealedStep, &h.FitVersion, &h.AnchorWeight, &h.Pairs
		}
		r.Streams = append(r.Streams, sj)
	}
	return r
}

func writeRunsJSON(out io.Writer, sums []statestore.RunSummary, fromLog map[string]bool) error {
	rs := make([]runJSON, len(sums))
	for i := range sums {
		rs[i] = toRunJSON(&sums[i])
		if fromLog[sums[i].Run] {
			rs[i].Source = "changelog"
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rs)
}
