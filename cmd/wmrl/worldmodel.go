package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/consumers/worldmodel"
	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/stage"
)

func init() { register(newWorldModelCmd) }

// worldModelOptions holds worldmodel's flags; its run method is the command's body.
type worldModelOptions struct {
	a                     *app
	backend, templateFile string
	cfg                   worldmodel.OpenAIConfig
	concurrency           int
	stage                 stageFlags
}

func newWorldModelCmd(a *app) *cobra.Command {
	o := &worldModelOptions{a: a}
	cmd := &cobra.Command{
		Use: "worldmodel",
		Example: `  wmrl worldmodel --base-url http://vllm-wm:8000/v1 --model world-model --concurrency 64
  wmrl worldmodel --base-url http://judge:8001/v1 --model judge --max-failure-share 0.2 --failure-window 200`,
		Short: "Score every rollout with a world model (OpenAI-compatible server) into rewards.predicted",
		Long: `Consume the rollouts topic and publish exactly one predicted-reward record per rollout: a score,
or a failure (timeout, error, invalid) with its reason. Up to --concurrency requests are in flight;
each has --request-timeout and is retried with jittered backoff on 429, 5xx and timeouts, never on
other 4xx. Offsets are committed only below the lowest unfinished rollout, so a crash redoes work
but never skips it. Bad input records go to the dead-letter topic. The API key comes from
--wm-api-key-file, WMRL_WM_API_KEY or OPENAI_API_KEY. The built-in task's proxy world model runs in 'wmrl demo'.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	cfg := &o.cfg
	f := cmd.Flags()
	f.StringVar(&o.backend, "backend", "openai", "world model: openai (an OpenAI-compatible server)")
	f.StringVar(&cfg.BaseURL, "base-url", "http://127.0.0.1:8000/v1", "API root including /v1; requests go to <base-url>/chat/completions")
	f.StringVar(&cfg.Model, "model", "", "served model name")
	f.IntVar(&o.concurrency, "concurrency", 32, "scoring requests in flight")
	f.DurationVar(&cfg.Timeout, "request-timeout", worldmodel.DefaultTimeout, "per-request timeout")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", worldmodel.DefaultMaxAttempts, "tries per rollout, first included")
	f.DurationVar(&cfg.BaseBackoff, "base-backoff", worldmodel.DefaultBaseBackoff, "first retry delay (doubles, jittered)")
	f.DurationVar(&cfg.MaxBackoff, "max-backoff", worldmodel.DefaultMaxBackoff, "retry delay cap, also for Retry-After")
	f.Float64Var(&cfg.Temperature, "temperature", 0, "sampling temperature (0: as repeatable as the server allows)")
	f.IntVar(&cfg.MaxTokens, "max-tokens", 0, "reply length cap (0: server default; reasoning models need room)")
	f.StringVar(&cfg.SystemPrompt, "system-prompt", "", "system message")
	f.StringVar(&o.templateFile, "prompt-template", "", "file with a text/template for the user message (default: built in)")
	f.String("wm-api-key-file", "", "file holding the world model server's API key, instead of WMRL_WM_API_KEY (trailing line breaks removed)")
	o.stage.add(f, worldmodel.StageName, "9464", "time in-flight requests get to finish on shutdown")
	f.DurationVar(&o.stage.member.StallAfter, "stall-after", worldmodel.DefaultStallAfter,
		"warn, and fail /healthz/scoring, while requests are in flight and none has been answered for this long (0: off); raise it for a judge slower than this")
	return cmd
}

func (o *worldModelOptions) run(cmd *cobra.Command, _ []string) error {
	a, cfg := o.a, o.cfg
	if o.backend == "builtin" {
		return errors.New("--backend builtin is the demo's proxy world model: run it with `wmrl demo`")
	}
	if o.backend != "openai" {
		return fmt.Errorf("--backend %q: want openai", o.backend)
	}
	if o.templateFile != "" {
		b, err := os.ReadFile(o.templateFile)
		if err != nil {
			return fmt.Errorf("--prompt-template: %w", err)
		}
		cfg.PromptTemplate = string(b)
	}
	cfg.APIKey = a.keys.wm()
	cfg.MaxIdleConnsPerHost = o.concurrency
	cfg.Logger = a.log
	scorer, err := worldmodel.NewOpenAIScorer(cfg)
	if err != nil {
		return err
	}
	return o.stage.run(a, cmd, worldmodel.StageName, func(member stage.Config, artifacts artifact.Resolver) (stageRunner, error) {
		member.Started = func() {
			a.log.Info("world model", "base_url", cfg.BaseURL, "model", cfg.Model, "scoring_concurrency", o.concurrency,
				"max_failure_share", member.MaxFailureShare, "failure_window", member.FailureWindow, "stall_after", member.StallAfter)
		}
		// Before the stage's client exists: it joins the group at once, and leaving it would log.
		if err := scorer.Probe(a.startupContext()); err != nil {
			return nil, err
		}
		return worldmodel.NewStage(member, worldmodel.HandlerConfig{Scorer: scorer, Concurrency: o.concurrency, Model: cfg.Model,
			Logger: a.log, Artifacts: artifacts})
	})
}
