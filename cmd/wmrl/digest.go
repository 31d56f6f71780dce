package main

import (
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

func newDigestCmd(a *app) *cobra.Command {
	var run, topic, file string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "digest",
		Short: "Print the canonical SHA-256 of a run's advantage rows, from a topic or a replay file",
		Long: `digest reads advantage rows and prints "digest <hex> rows <n> steps <k>": the SHA-256 over the rows
in canonical order (run, step, stream, group, rollout; see topics.Digest), so two runs, a replay
and the original, or the Go and Python clients can be compared byte for byte.

With --topic (default: the advantages topic under --topic-prefix) the topic is read read_committed
from the start to its last stable offset, without a consumer group; chunk sets seen twice count
once. With --file it reads a replay file written by 'wmrl replay --out'. A bad record or an
incomplete step is an error rather than a digest that silently left rows out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic != "" && file != "" {
				return errors.New("--topic and --file are exclusive")
			}
			var res trainer.DigestResult
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				var payloads [][]byte
				if err := topics.ReadReplay(f, func(p []byte) error {
					payloads = append(payloads, p)
					return nil
				}); err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
				if res, err = trainer.DigestPayloads(payloads, run); err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
			} else {
				if topic == "" {
					topic = a.conn.Names().Advantages()
				}
				opts, err := a.kafkaOpts()
				if err != nil {
					return err
				}
				sctx, cancel := signalContext()
				defer cancel()
				ctx, cancelT := context.WithTimeout(sctx, timeout)
				defer cancelT()
				if res, err = trainer.DigestTopicResult(ctx, opts, topic, run); err != nil {
					return err
				}
			}
			_, err := fmt.Fprintf(a.stdout, "digest %s rows %d steps %d\n", res.Digest, res.Rows, res.Steps)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&run, "run", "", "run id to digest (empty: every run)")
	f.StringVar(&topic, "topic", "", "advantages topic to read (default: the advantages topic under --topic-prefix)")
	f.StringVar(&file, "file", "", "replay file to read instead of a topic")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "give up reading the topic after this long")
	return cmd
}
