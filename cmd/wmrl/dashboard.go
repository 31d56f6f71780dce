package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/dashboard"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newDashboardCmd) }

// dashboardOptions holds dashboard's flags; its run method is the command's body.
type dashboardOptions struct {
	a                   *app
	listen, redisPrefix string
	noRedis             bool
}

func newDashboardCmd(a *app) *cobra.Command {
	o := &dashboardOptions{a: a}
	cmd := &cobra.Command{
		Use: "dashboard",
		Example: `  wmrl dashboard --listen 127.0.0.1:8080
  wmrl dashboard --topic-prefix wmrl.demo. --no-redis`,
		Short: "Serve a live web page following every run on the topics (read_committed) and Redis",
		Long: `dashboard follows every wmrl topic set under --topic-prefix (topics created later included) with
read_committed, and the correction consumer's head records in Redis, and serves a page at --listen:
per run the calibration map and anchor pairs over time, calibration error before/after Online
Debiasing per step, the IVD anchor weight, fit version and step latency (last reward → advantages);
consumer-group lag and topic throughput per stage; dead letters by reason. Runs are listed newest
first; an ended run says so; a run whose head Redis lost says "Redis lost this run's head;
rebuilding"; a topic set whose rollouts nothing scores is named. The page updates by
server-sent events; the JSON endpoints (/api/state, /api/events, /api/maps) are in docs/dashboard.md.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve the page on (host:port)")
	f.StringVar(&o.redisPrefix, "redis-prefix", statestore.DefaultPrefix, "Redis key namespace of the correction consumer (wmrl correct --redis-prefix; under a --topic-prefix other than wmrl.: <prefix>"+statestore.DefaultPrefix+")")
	f.BoolVar(&o.noRedis, "no-redis", false, "do not read Redis (the page then shows the topics only)")
	return cmd
}

func (o *dashboardOptions) run(cmd *cobra.Command, _ []string) error {
	a := o.a
	ctx, cancel := signalContext()
	defer cancel()
	kopts, err := a.conn.KafkaOpts()
	if err != nil {
		return err
	}
	cfg := dashboard.Config{KafkaOpts: kopts, TopicPrefix: a.conn.TopicPrefix, Logger: a.log, MaxBatchBytes: a.conn.BatchLimit(topics.MaxAdvantageBytes),
		RedisPrefix: func(tp string) string {
			if cmd.Flags().Changed("redis-prefix") {
				return o.redisPrefix
			}
			return tenantName(tp, statestore.DefaultPrefix) // correct's default under that topic prefix
		}}
	if !o.noRedis {
		rdb, err := a.redis()
		if err != nil {
			return err
		}
		defer rdb.Close()
		cfg.Redis = rdb
	}
	srv, err := dashboard.Start(ctx, o.listen, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "wmrl dashboard: %s (following %s*; Ctrl-C stops)\n", srv.URL(), cfg.TopicPrefix)
	<-ctx.Done()
	return srv.Close()
}
