package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/sinks/trainer"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newDigestCmd) }

// digestOptions holds digest's flags; its run method is the command's body.
type digestOptions struct {
	a                  *app
	runID, topic, file string
	timeout            time.Duration
}

func newDigestCmd(a *app) *cobra.Command {
	o := &digestOptions{a: a}
	cmd := &cobra.Command{
		Use: "digest",
		Example: `  wmrl digest --run r1
  wmrl digest --run r1 --file replay.bin`,
		Short: "Print the canonical SHA-256 of a run's advantage rows, from a topic or a replay file",
		Long: `digest reads advantage rows and prints "digest <hex> rows <n> steps <k>": the SHA-256 over the rows
in canonical order (run, step, stream, group, rollout; see topics.Digest), so two runs, a replay
and the original, or the Go and Python clients can be compared byte for byte.

With --topic (default: the advantages topic under --topic-prefix) the topic is read read_committed
from the start to its last stable offset, without a consumer group; chunk sets seen twice count
once. With --file it reads a replay file written by 'wmrl replay --out'. A bad record or an
incomplete step is an error rather than a digest that silently left rows out.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.StringVar(&o.runID, "run", "", "run id to digest (empty: every run)")
	f.StringVar(&o.topic, "topic", "", "advantages topic to read (default: the advantages topic under --topic-prefix)")
	f.StringVar(&o.file, "file", "", "replay file to read instead of a topic")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up reading the topic after this long")
	return cmd
}

func (o *digestOptions) run(_ *cobra.Command, _ []string) error {
	if o.topic != "" && o.file != "" {
		return errors.New("--topic and --file are exclusive")
	}
	var res trainer.DigestResult
	var err error
	if o.file != "" {
		res, err = o.fromFile()
	} else {
		res, err = o.fromTopic()
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.a.stdout, "digest %s rows %d steps %d\n", res.Digest, res.Rows, res.Steps)
	return err
}

func (o *digestOptions) fromFile() (trainer.DigestResult, error) {
	f, err := os.Open(o.file)
	if err != nil {
		return trainer.DigestResult{}, err
	}
	defer f.Close()
	var payloads [][]byte
	if err := topics.ReadReplay(f, func(p []byte) error {
		payloads = append(payloads, p)
		return nil
	}); err != nil {
		return trainer.DigestResult{}, fmt.Errorf("%s: %w", o.file, err)
	}
	res, err := trainer.DigestPayloads(payloads, o.runID)
	if err != nil {
		return res, fmt.Errorf("%s: %w", o.file, err)
	}
	return res, nil
}

func (o *digestOptions) fromTopic() (trainer.DigestResult, error) {
	topic := cmp.Or(o.topic, o.a.conn.Names().Advantages())
	opts, err := o.a.kafkaOpts()
	if err != nil {
		return trainer.DigestResult{}, err
	}
	sctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(sctx, o.timeout)
	defer cancelT()
	return trainer.DigestTopicResult(ctx, opts, topic, o.runID)
}
