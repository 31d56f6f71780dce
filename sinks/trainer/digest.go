package trainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/topicread"
	"github.com/wmrl/wmrl/sinks/steps"
	"github.com/wmrl/wmrl/topics"
)

// maxReportedErrors bounds how many record errors a failed digest lists.
const maxReportedErrors = 20

// DigestResult is the canonical digest of an advantage stream (see topics.Digest).
type DigestResult struct {
	// Digest is the hex SHA-256 over the rows in canonical order.
	Digest string
	Rows   int
	Steps  int
	// Duplicates counts chunks (topic) or rows (file) seen twice with equal content and ignored.
	Duplicates int64
}

// DigestTopicResult reads the advantages topic read_committed from the start up to the last
// stable offset of every partition at call time (no consumer group), reassembles chunks, keeps
// run's rows ("" keeps all runs), ignores chunk sets seen twice, and returns the hex digest of
// the rows in canonical order with the row, step and duplicate counts. Any bad record or
// incomplete step fails the digest, because a digest that silently skipped rows would prove
// nothing.
func DigestTopicResult(ctx context.Context, kafkaOpts []kgo.Opt, topic, run string) (DigestResult, error) {
	all, stats, err := ReadTopicSteps(ctx, kafkaOpts, topic, run)
	if err != nil {
		return DigestResult{}, err
	}
	res := digestSteps(all)
	res.Duplicates = stats.Duplicates
	return res, nil
}

// ReadTopicSteps reads every complete step of the topic as DigestTopicResult does, sorted by run and
// step; it is the bounded, group-less counterpart of Stream.
func ReadTopicSteps(ctx context.Context, kafkaOpts []kgo.Opt, topic, run string) ([]*steps.Step, steps.Stats, error) {
	start, err := topicread.Partitions(ctx, kafkaOpts, topic)
	if err != nil {
		return nil, steps.Stats{}, fmt.Errorf("digest: %w", err)
	}
	asm := steps.NewAssembler(steps.AssemblerConfig{Run: run, MaxBufferedSteps: 1 << 30})
	var done []*steps.Step
	var errs []error
	// No settling: a digest of a live run reads what is committed now.
	err = topicread.ToEnd(ctx, kafkaOpts, start, 0, nil, func(r *kgo.Record) error {
		s, e := asm.Add(r)
		done = append(done, s...)
		errs = append(errs, e...)
		return nil
	})
	if err != nil {
		return nil, steps.Stats{}, fmt.Errorf("digest %s: %w", topic, err)
	}
	errs = append(errs, asm.Incomplete()...)
	if len(errs) > 0 {
		n := len(errs)
		if n > maxReportedErrors {
			errs = errs[:maxReportedErrors]
		}
		return nil, asm.Stats(), fmt.Errorf("digest %s: %d bad records or incomplete steps: %w", topic, n, errors.Join(errs...))
	}
	slices.SortFunc(done, func(a, b *steps.Step) int {
		return cmp.Or(cmp.Compare(a.Run, b.Run), cmp.Compare(a.Step, b.Step))
	})
	return done, asm.Stats(), nil
}

func digestSteps(all []*steps.Step) DigestResult {
	d := topics.NewDigest()
	for _, st := range all {
		rows := append([]topics.AdvantageRow(nil), st.Rows...)
		topics.SortRows(rows)
		d.Add(rows...)
	}
	return DigestResult{Digest: d.Hex(), Rows: d.Rows(), Steps: len(all)}
}

// DigestPayloads digests Arrow IPC payloads without headers (the frames of a replay file),
// keeping run's rows ("" keeps all). Payload boundaries carry no meaning, so duplicates are
// found per row: a row seen again with equal content is ignored, with different content it is
// an error (topics.ErrConflict), as is an undecodable payload.
func DigestPayloads(payloads [][]byte, run string) (DigestResult, error) {
	type key struct {
		run, group, rollout string
		step                int64
	}
	type stepKey struct {
		run  string
		step int64
	}
	seen := make(map[key]int)
	var rows []topics.AdvantageRow
	stepSet := make(map[stepKey]struct{})
	var dups int64
	for i, p := range payloads {
		decoded, err := topics.DecodeAdvantages(p)
		if err != nil {
			return DigestResult{}, fmt.Errorf("payload %d: %w", i, err)
		}
		for _, r := range decoded {
			if run != "" && r.RunID != run {
				continue
			}
			k := key{r.RunID, r.GroupID, r.RolloutID, r.Step}
			if j, ok := seen[k]; ok {
				if rows[j] != r {
					return DigestResult{}, fmt.Errorf("payload %d: run %s step %d rollout %s differs from an earlier copy: %w", i, r.RunID, r.Step, r.RolloutID, topics.ErrConflict)
				}
				dups++
				continue
			}
			seen[k] = len(rows)
			rows = append(rows, r)
			stepSet[stepKey{r.RunID, r.Step}] = struct{}{}
		}
	}
	topics.SortRows(rows)
	d := topics.NewDigest()
	d.Add(rows...)
	return DigestResult{Digest: d.Hex(), Rows: d.Rows(), Steps: len(stepSet), Duplicates: dups}, nil
}
