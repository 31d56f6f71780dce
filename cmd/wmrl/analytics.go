package main

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/internal/conn"
	"github.com/wmrl/wmrl/sinks/analytics"
)

func init() { register(newAnalyticsCmd) }

// analyticsOptions holds analytics' flags; its run method is the command's body.
type analyticsOptions struct {
	a                 *app
	out, group, runID string
	roll              int
	groupWait         time.Duration
	metricsAddr       string
}

func newAnalyticsCmd(a *app) *cobra.Command {
	o := &analyticsOptions{a: a}
	cmd := &cobra.Command{
		Use: "analytics",
		Example: `  wmrl analytics --out /data/wmrl-parquet
  wmrl analytics --out ./parquet --run r1 --roll-steps 50 --metrics-addr :9468`,
		Short: "Tap advantages and calibration into Parquet files (kafka-go consumer, read_committed)",
		Long: `analytics consumes the advantages and calibration topics in its own consumer group with
segmentio/kafka-go and writes, per run, advantages-<run>-<first>-<last>.parquet (the advantage rows,
wire schema) and calibration-<run>-<first>-<last>.parquet (run, stream, step, fit_version, pairs,
step_pairs, anchor_weight, bias_before, bias_after, breakpoints_x/_y, digest), rolled every
--roll-steps steps. Offsets are committed only after a file is fsynced and renamed into place; on
SIGINT/SIGTERM the partial files are flushed before exiting.

Run one analytics process per consumer group. kafka-go does not tell the tap which partitions a
rebalance took away, so two taps sharing a group could move each other's offsets back. The tap
therefore waits up to --group-wait for the group to be empty before joining (a crashed tap's
membership expires after 30s) and fails otherwise; if the group rebalances later (another consumer
joined or left) it exits with an error without committing, and is safe to restart.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "directory for the Parquet files (created if missing)")
	f.StringVar(&o.group, "group", analytics.DefaultGroup, "consumer group of the tap (one tap per group; under a --topic-prefix other than wmrl.: <prefix>"+analytics.DefaultGroup+")")
	f.DurationVar(&o.groupWait, "group-wait", analytics.DefaultGroupWait, "how long to wait for the group to be empty before failing")
	f.IntVar(&o.roll, "roll-steps", analytics.DefaultRollSteps, "close a run's files after this many steps")
	f.StringVar(&o.runID, "run", "", "only this run (empty: every run)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz here, e.g. 127.0.0.1:9468 (:9468 for every interface; empty: off)")
	return cmd
}

func (o *analyticsOptions) run(cmd *cobra.Command, _ []string) error {
	a := o.a
	if o.out == "" {
		return errors.New("--out is required")
	}
	mech, err := kafkaGoSASL(a.conn)
	if err != nil {
		return err
	}
	// The tap is kafka-go; the check with franz-go uses the same brokers and credentials.
	kopts, err := a.kafkaOpts()
	if err != nil {
		return err
	}
	tc, err := a.conn.TLSConfig()
	if err != nil {
		return err
	}
	tap, err := analytics.New(analytics.Config{Brokers: a.conn.Seeds(), TLS: tc, SASL: mech, Names: a.conn.Names(),
		Group: a.groupFor(cmd, o.group, analytics.DefaultGroup), GroupWait: o.groupWait, Dir: o.out, RollSteps: o.roll, RunID: o.runID, Logger: a.log})
	if err != nil {
		return err
	}
	ctx, cancel := signalContext()
	defer cancel()
	reg := prometheus.NewRegistry()
	if err := registerTapMetrics(reg, tap); err != nil {
		return err
	}
	stop, err := serveSink(ctx, o.metricsAddr, reg, kopts, a.log)
	if err != nil {
		return err
	}
	defer stop()
	return tap.Run(ctx)
}

// kafkaGoSASL maps the global SASL options onto kafka-go's mechanisms.
func kafkaGoSASL(o conn.Options) (sasl.Mechanism, error) {
	switch strings.ToUpper(o.SASLMechanism) {
	case "":
		return nil, nil
	case conn.SASLPlain:
		return plain.Mechanism{Username: o.SASLUser, Password: o.SASLPassword}, nil
	case conn.SASLScramSHA256:
		return scram.Mechanism(scram.SHA256, o.SASLUser, o.SASLPassword)
	case conn.SASLScramSHA512:
		return scram.Mechanism(scram.SHA512, o.SASLUser, o.SASLPassword)
	default:
		return nil, conn.CheckSASLMechanism(o.SASLMechanism)
	}
}
