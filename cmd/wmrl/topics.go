package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/wmrl/wmrl/internal/topicadmin"
)

func init() { register(newTopicsCmd) }

// topicsOptions holds the topic plan flags shared by the topics subcommands; its create, check
// and describe methods are their bodies.
type topicsOptions struct {
	a           *app
	partitions  int32
	replication int16
	retention   time.Duration
	forever     bool
	// flags are the persistent flags, to tell a given --partitions from the default.
	flags *pflag.FlagSet
}

func newTopicsCmd(a *app) *cobra.Command {
	o := &topicsOptions{a: a}
	cmd := &cobra.Command{
		Use: "topics",
		Example: `  wmrl topics create --partitions 6
  wmrl topics check --topic-prefix lab. --partitions 6
  wmrl topics describe`,
		Short: "Create, check and describe wmrl's Kafka topics",
		Long: `Manage the topic layout. Every wmrl topic shares one partition count because the
correction consumer joins rollouts, steps and rewards of a run on one partition; the calibration
changelog is compacted (key run/stream) so state can always be rebuilt.`,
	}
	pf := cmd.PersistentFlags()
	o.flags = pf
	pf.Int32Var(&o.partitions, "partitions", 3, "partitions of every wmrl topic")
	pf.Int16Var(&o.replication, "replication-factor", 1, "replication factor of every wmrl topic")
	pf.DurationVar(&o.retention, "retention", 7*24*time.Hour, "retention of the non-compacted topics (replay needs the inputs retained)")
	pf.BoolVar(&o.forever, "retain-forever", false, "keep the non-compacted topics forever (retention.ms=-1)")
	cmd.AddCommand(&cobra.Command{
		Use:     "create",
		Example: `  wmrl topics create --partitions 6 --replication-factor 3`,
		Short:   "Create missing topics (idempotent); existing topics are left unchanged",
		Args:    cobra.NoArgs,
		RunE:    a.withAdmin(o.create),
	}, &cobra.Command{
		Use:     "check",
		Example: `  wmrl topics check --partitions 6`,
		Short:   "Compare the cluster with the plan; exit 1 and list every mismatch",
		Args:    cobra.NoArgs,
		RunE:    a.withAdmin(o.check),
	}, &cobra.Command{
		Use:     "describe",
		Example: `  wmrl topics describe --topic-prefix lab.`,
		Short:   "Show partitions, replication, cleanup policy, retention and record counts",
		Args:    cobra.NoArgs,
		RunE:    a.withAdmin(o.describe),
	})
	return cmd
}

func (o *topicsOptions) plan() topicadmin.Plan {
	p := topicadmin.DefaultPlan(o.a.conn.Names())
	p.Partitions = o.partitions
	p.Replication = o.replication
	p.RetentionMS = o.retention.Milliseconds()
	if o.forever {
		p.RetentionMS = -1
	}
	return p
}

func (o *topicsOptions) create(ctx context.Context, adm *kadm.Client) error {
	res, err := topicadmin.Create(ctx, adm, o.plan())
	for _, r := range res {
		state := "exists"
		if r.Created {
			state = "created"
		}
		fmt.Fprintf(o.a.stdout, "%-40s %s\n", r.Topic, state)
	}
	if err != nil {
		return err
	}
	return o.registerSchemas(ctx)
}

func (o *topicsOptions) check(ctx context.Context, adm *kadm.Client) error {
	p := o.plan()
	// Without --partitions (--replication-factor) the check is that every topic agrees, not that
	// they have the create command's default count.
	if !o.flags.Changed("partitions") {
		p.Partitions = 0
	}
	if !o.flags.Changed("replication-factor") {
		p.Replication = 0
	}
	mm, err := topicadmin.Check(ctx, adm, p)
	if err != nil {
		return err
	}
	for _, m := range mm {
		fmt.Fprintln(o.a.stdout, m.String())
	}
	bad, err := o.checkSchemas(ctx)
	if err != nil {
		return err
	}
	if len(mm) > 0 || bad > 0 {
		if len(mm) == 0 {
			return &exitError{code: 1, err: fmt.Errorf("%d schema registry subjects missing or not at --schema-compatibility (run `wmrl topics create --schema-registry ...`)", bad)}
		}
		return &exitError{code: 1, err: fmt.Errorf("%d topic mismatches (run `wmrl topics create` for missing topics; fix the others by hand)", len(mm))}
	}
	fmt.Fprintln(o.a.stdout, "topics ok")
	return nil
}

func (o *topicsOptions) describe(ctx context.Context, adm *kadm.Client) error {
	infos, err := topicadmin.Describe(ctx, adm, o.a.conn.Names())
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(o.a.stdout, 0, 4, 2, ' ', 0)
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
