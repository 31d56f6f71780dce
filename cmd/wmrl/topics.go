package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/wmrl/wmrl/internal/topicadmin"
)

func init() { register(newTopicsCmd) }

func newTopicsCmd(a *app) *cobra.Command {
	var partitions int32
	var replication int16
	var retention time.Duration
	var forever bool
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create, check and describe wmrl's Kafka topics",
		Long: `Manage the topic layout. Every wmrl topic shares one partition count because the
correction consumer joins rollouts, steps and rewards of a run on one partition; the calibration
changelog is compacted (key run/stream) so state can always be rebuilt.`,
	}
	plan := func() topicadmin.Plan {
		p := topicadmin.DefaultPlan(a.conn.Names())
		p.Partitions = partitions
		p.Replication = replication
		p.RetentionMS = retention.Milliseconds()
		if forever {
			p.RetentionMS = -1
		}
		return p
	}
	pf := cmd.PersistentFlags()
	pf.Int32Var(&partitions, "partitions", 3, "partitions of every wmrl topic")
	pf.Int16Var(&replication, "replication-factor", 1, "replication factor of every wmrl topic")
	pf.DurationVar(&retention, "retention", 7*24*time.Hour, "retention of the non-compacted topics (replay needs the inputs retained)")
	pf.BoolVar(&forever, "retain-forever", false, "keep the non-compacted topics forever (retention.ms=-1)")

	cmd.AddCommand(&cobra.Command{
		Use:   "create",
		Short: "Create missing topics (idempotent); existing topics are left unchanged",
		RunE: a.withAdmin(func(ctx context.Context, adm *kadm.Client) error {
			res, err := topicadmin.Create(ctx, adm, plan())
			for _, r := range res {
				state := "exists"
				if r.Created {
					state = "created"
				}
				fmt.Fprintf(a.stdout, "%-40s %s\n", r.Topic, state)
			}
			return err
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Compare the cluster with the plan; exit 1 and list every mismatch",
		RunE: a.withAdmin(func(ctx context.Context, adm *kadm.Client) error {
			mm, err := topicadmin.Check(ctx, adm, plan())
			if err != nil {
				return err
			}
			for _, m := range mm {
				fmt.Fprintln(a.stdout, m.String())
			}
			if len(mm) > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d topic mismatches (run `wmrl topics create` for missing topics; fix the others by hand)", len(mm))}
			}
			fmt.Fprintln(a.stdout, "topics ok")
			return nil
		}),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "describe",
		Short: "Show partitions, replication, cleanup policy, retention and record counts",
		RunE: a.withAdmin(func(ctx context.Context, adm *kadm.Client) error {
			infos, err := topicadmin.Describe(ctx, adm, a.conn.Names())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tREPLICATION\tCLEANUP\tRETENTION.MS\tRECORDS")
			missing := 0
			for _, in := range infos {
				if !in.Exists {
					missing++
					fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tmissing\n", in.Topic)
					continue
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\n", in.Topic, in.Partitions, in.Replication,
					in.Configs["cleanup.policy"], in.Configs["retention.ms"], in.Records)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if missing > 0 {
				return &exitError{code: 1, err: errors.New("some topics are missing (run `wmrl topics create`)")}
			}
			return nil
		}),
	})
	return cmd
}

// withAdmin runs fn with an admin client and a one-minute deadline, closing the client after.
func (a *app) withAdmin(fn func(context.Context, *kadm.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
		defer cancel()
		adm, done, err := a.admin()
		if err != nil {
			return err
		}
		defer done()
		return fn(ctx, adm)
	}
}
