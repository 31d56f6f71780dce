package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/producers"
	"github.com/wmrl/wmrl/producers/pacing"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

func init() { register(newGenerateCmd) }

// envPolicyAPIKey holds the policy server's API key; it comes before OPENAI_API_KEY so a shell's
// OpenAI key does not leak to a self-hosted server.
const envPolicyAPIKey = "WMRL_POLICY_API_KEY"

// generateOptions holds generate's flags; its run method is the command's body.
type generateOptions struct {
	a                                                         *app
	backend, runID, stream, policyVersion, artifactDir, input string
	anchorFraction                                            float64
	inlineMax                                                 int
	oa                                                        producers.OpenAIConfig
	promptsFile                                               string
	maxAhead, policyLag                                       int64
	trainerGroups                                             []string
	metricsAddr                                               string
	endRun, skipInvalid                                       bool
	redisPrefix                                               string
}

func newGenerateCmd(a *app) *cobra.Command {
	o := &generateOptions{a: a}
	cmd := &cobra.Command{
		Use: "generate",
		Example: `  wmrl generate --run r1 --base-url http://vllm:8000/v1 --model policy --prompts prompts.jsonl --anchor-fraction 0.25
  my-sampler | wmrl generate --backend jsonl --input - --run r1
  wmrl generate --backend jsonl --input rollouts.jsonl --run r1 --max-steps-ahead 2 --trainer-group trainer-r1
  wmrl generate --backend jsonl --input part1.jsonl --run r1 --end-run=false`,
		Short: "Publish rollouts and step manifests from a policy (openai, jsonl)",
		Long: `Publish one training step at a time: every rollout to the rollouts topic, then, once all are
acknowledged, the step's manifest. Anchor groups are chosen deterministically:
a group is an anchor iff AnchorHash(run_id, group_id) < --anchor-fraction, where AnchorHash is the
first 8 bytes of SHA-256(run_id + "\x00" + group_id) as a big-endian uint64, shifted right by 11
and divided by 2^53. Artifacts above --inline-max bytes go by reference into --artifact-dir
(file:// URI + SHA-256), which must be shared with the worldmodel and sandbox stages.

Backends:
  openai  an OpenAI-compatible policy server (vLLM, SGLang): --base-url, --model, --prompts FILE
          (JSONL lines {"prompt": "...", "stream": "..."}); n=--group-size completions per prompt,
          --groups-per-step prompts per step, --steps steps. Key from --policy-api-key-file,
          WMRL_POLICY_API_KEY or OPENAI_API_KEY.
  jsonl   rollouts from --input FILE (or - for stdin), one JSON object per line (see docs/stages.md):
          {"step": 0, "group_id": "q1", "prompt": "...", "artifact": "..."} or a full rollout record.
          A line that does not parse or validate stops generate (exit 2, naming the line and the
          field) before anything of its step is published; the steps before it are published and
          the run is not ended, so the fixed file's remaining steps can follow
          (--end-run=false for all but the last part). With --skip-invalid the bad line goes to
          the dead-letter topic (reason bad-input) and the whole group it names is left out of its
          step (never published short of a rollout); the run is then not ended at the input's end.
The built-in task's policy is not a backend here: it learns from the advantages, so only
'wmrl demo', which closes that loop, runs it.

Staleness bound: --max-steps-ahead K holds step v back while v − t ≥ K, where t is the next step
the slowest --trainer-group has not acknowledged (read from the group's committed offsets on the
advantages topic; trainers commit only past acknowledged steps). K=1 is on-policy lock-step; 0
turns the bound off. A pause and a resume are logged, and --metrics-addr serves
wmrl_generate_paused, wmrl_generate_steps_ahead, wmrl_generate_pauses_total and
wmrl_generate_paused_seconds_total.

A run that 'wmrl correct' has ended (its end recorded in Redis under --redis-prefix) is refused
before anything is published: correct would dead-letter every record of it (run_ended).

End of run: when the input ends (not on a signal or an error), generate publishes the run's
end-of-run request on the run-control topic (<prefix>runs.v1) naming the last step it published;
'wmrl correct' relays it onto the steps topic, retires the run once that step is sealed and
dead-letters records of later steps (reason run_ended). This needs Write on the run-control
topic, which a generator's principal does not have where ACLs apply (docs/security.md: only
trainers and operators may end runs): there pass --end-run=false and end the run with 'wmrl runs
end'. Pass --end-run=false also when another generate invocation continues the same run.`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	f := cmd.Flags()
	f.StringVar(&o.backend, "backend", "openai", "rollout source: openai or jsonl")
	f.StringVar(&o.runID, "run", "", "run id (required): the key of every record, and half of the anchor hash")
	// --run-id was generate's name for what every other command calls --run.
	f.StringVar(&o.runID, "run-id", "", "deprecated alias of --run")
	_ = f.MarkDeprecated("run-id", "use --run")
	f.StringVar(&o.stream, "stream", "main", "default stream (task distribution) for groups that do not name one")
	f.StringVar(&o.policyVersion, "policy-version", "", "policy_version label for steps whose backend does not set one")
	f.Int64Var(&o.policyLag, "policy-lag", 0, "stamp policy_step = max(0, step - K) on steps whose input has none: the policy server runs K steps behind the trainer (unset: policy_step unknown)")
	f.Float64Var(&o.anchorFraction, "anchor-fraction", 0.25, "share of groups executed in the sandbox (reference: 2 of 8 groups)")
	f.StringVar(&o.artifactDir, "artifact-dir", "", "claim-check directory for artifacts above --inline-max (shared with the consumers)")
	f.IntVar(&o.inlineMax, "inline-max", producers.DefaultInlineLimit, "largest artifact in bytes sent inline")
	f.StringVar(&o.input, "input", "", "jsonl: input file, - for stdin")
	f.Int64Var(&o.maxAhead, "max-steps-ahead", 0, "hold a step back while it is this many steps ahead of the slowest trainer (0: no bound)")
	f.StringSliceVar(&o.trainerGroups, "trainer-group", nil, "consumer group of a trainer of this run (repeatable; needed with --max-steps-ahead)")
	f.BoolVar(&o.endRun, "end-run", true, "when the input ends, publish the run's end-of-run record naming the last step published (--end-run=false when more generate invocations continue the run)")
	f.BoolVar(&o.skipInvalid, "skip-invalid", false, "jsonl: dead-letter a line that does not parse or validate and leave out the whole group it names, instead of stopping; the run is then not ended")
	f.StringVar(&o.redisPrefix, "redis-prefix", statestore.DefaultPrefix, "key prefix of the correction state in Redis (as 'wmrl correct --redis-prefix'; under a --topic-prefix other than wmrl.: <prefix>"+statestore.DefaultPrefix+"): a run ended there is refused")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "with --max-steps-ahead: serve Prometheus /metrics here, e.g. 127.0.0.1:9469 (empty: off)")
	o.openAIFlags(f)
	return cmd
}

// openAIFlags adds the flags of the openai backend (a policy server) to f.
func (o *generateOptions) openAIFlags(f *pflag.FlagSet) {
	f.String("policy-api-key-file", "", "openai: file holding the policy server's API key, instead of WMRL_POLICY_API_KEY (trailing line breaks removed)")
	f.StringVar(&o.promptsFile, "prompts", "", "openai: prompts JSONL file")
	f.StringVar(&o.oa.BaseURL, "base-url", "http://127.0.0.1:8000/v1", "openai: API root including /v1")
	f.StringVar(&o.oa.Model, "model", "", "openai: served model name")
	f.StringVar(&o.oa.API, "api", producers.APIChat, "openai: chat (/chat/completions) or completions (/completions)")
	f.StringVar(&o.oa.SystemPrompt, "system-prompt", "", "openai: system message for the chat API")
	f.IntVar(&o.oa.GroupSize, "group-size", 8, "openai: G, completions per prompt (sent as n)")
	f.IntVar(&o.oa.GroupsPerStep, "groups-per-step", 8, "openai: prompts (groups) per step")
	f.Int64Var(&o.oa.Steps, "steps", 1, "openai: steps to generate")
	f.Int64Var(&o.oa.FirstStep, "first-step", 0, "openai: first step number")
	f.Float64Var(&o.oa.Temperature, "temperature", 1.0, "openai: sampling temperature")
	f.Float64Var(&o.oa.TopP, "top-p", 0, "openai: nucleus sampling (0: server default)")
	f.IntVar(&o.oa.MaxTokens, "max-tokens", 0, "openai: completion length cap (0: server default)")
	f.DurationVar(&o.oa.Timeout, "request-timeout", 10*time.Minute, "openai: per-request timeout")
	f.IntVar(&o.oa.MaxAttempts, "max-attempts", 4, "openai: tries per request (429, 5xx, timeouts are retried)")
}

func (o *generateOptions) run(cmd *cobra.Command, _ []string) error {
	a := o.a
	if o.runID == "" {
		return errors.New("--run is required: the run id every record is keyed by")
	}
	o.redisPrefix = a.identity(cmd, "redis-prefix", o.redisPrefix, statestore.DefaultPrefix)
	if o.input != "" && o.backend != "jsonl" {
		return fmt.Errorf("--input is read by --backend jsonl only; add --backend jsonl (the backend is %s, which reads --prompts)", o.backend)
	}
	ctx, cancel := signalContext()
	defer cancel()
	var store *artifact.Store
	if o.artifactDir != "" {
		var err error
		if store, err = artifact.NewStore(o.artifactDir, 0); err != nil {
			return err
		}
	}
	var g *producers.Generator
	var onBadLine func(int, []byte, error) error
	if o.skipInvalid {
		onBadLine = func(line int, raw []byte, lerr error) error {
			source := "jsonl:" + o.input
			if o.input == "" || o.input == "-" {
				source = "jsonl:stdin"
			}
			return g.DeadLetterInput(ctx, source, int64(line), raw, lerr)
		}
	}
	b, closeInput, err := o.newBackend(ctx, onBadLine)
	if err != nil {
		return err
	}
	defer closeInput()
	if err := o.refuseEnded(ctx); err != nil {
		return err
	}
	kopts, err := a.kafkaOpts()
	if err != nil {
		return err
	}
	// As the stages do: a missing topic fails at start with the create command, not at the
	// first produce with the broker's UNKNOWN_TOPIC_OR_PARTITION.
	if err := a.requireTopics(kopts, a.conn.Names().Rollouts(), a.conn.Names().Steps()); err != nil {
		return err
	}
	if err := a.useRegistry(); err != nil {
		return err
	}
	pacer, stop, err := o.newPacer(ctx, kopts)
	if err != nil {
		return err
	}
	defer stop()
	gcfg := producers.Config{
		RunID: o.runID, Stream: o.stream, PolicyVersion: o.policyVersion, AnchorFraction: o.anchorFraction,
		Names: a.conn.Names(), KafkaOpts: kopts, InlineLimit: o.inlineMax, Artifacts: store, Logger: a.log,
		Pacer: pacer,
	}
	if cmd.Flags().Changed("policy-lag") {
		gcfg.PolicyLag = &o.policyLag
	}
	g, err = producers.New(b, gcfg)
	if err != nil {
		return err
	}
	defer g.Close()
	st, err := g.Run(ctx)
	return o.finish(ctx, g, b, st, err)
}

// finish reports what the generator published and, when its input ended without error or
// left-out group, publishes the run's end (--end-run). A stop by signal is no failure: the
// steps published so far are complete.
func (o *generateOptions) finish(ctx context.Context, g *producers.Generator, b producers.Backend, st producers.Stats, err error) error {
	a := o.a
	fmt.Fprintf(a.stdout, "published %d steps, %d groups (%d anchor), %d rollouts (%d by reference)\n",
		st.Steps, st.Groups, st.AnchorGroups, st.Rollouts, st.ByReference)
	var dropped []string
	if j, ok := b.(*producers.JSONL); ok {
		dropped = j.DroppedGroups()
	}
	if len(dropped) > 0 {
		a.log.Warn("groups left out for invalid lines (--skip-invalid; the lines are on the dead-letter topic, reason bad-input); the run is not ended",
			"run", o.runID, "groups", len(dropped), "dropped", dropped)
	}
	if err == nil && o.endRun && len(dropped) == 0 {
		switch last, eerr := g.EndRun(ctx); {
		case errors.Is(eerr, producers.ErrNoSteps):
			a.log.Warn("no step published: no end-of-run record")
		case eerr != nil:
			return fmt.Errorf("%w%s", eerr, endDeniedHint(eerr))
		default:
			fmt.Fprintf(a.stdout, "run %s ended after step %d\n", o.runID, last)
		}
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// A requested stop (SIGINT/SIGTERM): the steps published so far are complete.
		a.log.Info("generate stopped by signal")
		return nil
	}
	return err
}

// refuseEnded fails when 'wmrl correct' has recorded the run's end in Redis: every record
// published into it would be dead-lettered (run_ended) or dropped as a re-read of a sealed step.
// Redis is a cache of correct's state, so an unreachable Redis is a warning, not a refusal.
func (o *generateOptions) refuseEnded(ctx context.Context) error {
	rdb, err := o.a.redis()
	if err != nil {
		o.a.log.Warn("cannot check whether the run has ended (Redis)", "run", o.runID, "err", err)
		return nil
	}
	defer rdb.Close()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	end, err := statestore.New(rdb, o.redisPrefix, 0).ReadEnd(rctx, o.runID)
	switch {
	case err != nil:
		o.a.log.Warn("cannot check whether the run has ended (Redis)", "run", o.runID, "redis_prefix", o.redisPrefix, "err", err)
		return nil
	case end != nil:
		return fmt.Errorf("run %s ended after step %d (%s, %s): wmrl correct would dead-letter every record of it (run_ended); publish under a new run id",
			o.runID, end.LastStep, end.Reason, end.EndedAt.Format(time.RFC3339))
	}
	return nil
}

// newBackend builds the rollout source named by --backend; closeInput closes the --input file.
// With onBadLine (--skip-invalid) a JSONL line that does not parse or validate goes to the
// dead-letter topic and its group is left out; without it the line stops generate. Stdin is read
// only until ctx ends.
func (o *generateOptions) newBackend(ctx context.Context, onBadLine func(int, []byte, error) error) (b producers.Backend, closeInput func(), err error) {
	closeInput = func() {}
	switch o.backend {
	case "openai":
		f, err := os.Open(o.promptsFile)
		if err != nil {
			return nil, closeInput, fmt.Errorf("--prompts: %w", err)
		}
		oa := o.oa
		oa.Prompts, err = producers.LoadPrompts(f)
		f.Close()
		if err != nil {
			return nil, closeInput, fmt.Errorf("--prompts %s: %w", o.promptsFile, err)
		}
		oa.APIKey = o.a.keys.pol()
		oa.Logger = o.a.log
		b, err = producers.NewOpenAI(oa)
		return b, closeInput, err
	case "jsonl":
		if o.input == "" {
			return nil, closeInput, errors.New("--backend jsonl needs --input FILE (or - for stdin)")
		}
		var r io.Reader
		if o.input == "-" {
			r = stdinUntil(ctx)
		} else {
			f, err := os.Open(o.input)
			if err != nil {
				return nil, closeInput, fmt.Errorf("--input: %w", err)
			}
			closeInput = func() { f.Close() }
			r = f
		}
		b, err = producers.NewJSONL(r, producers.JSONLConfig{RunID: o.runID, AnchorFraction: o.anchorFraction, OnBadLine: onBadLine})
		return b, closeInput, err
	case "builtin":
		return nil, closeInput, errors.New("--backend builtin is the demo's task policy: run it with `wmrl demo`, which wires it into the generator")
	default:
		return nil, closeInput, fmt.Errorf("--backend %q: want openai or jsonl", o.backend)
	}
}

// newPacer starts the staleness bound of --max-steps-ahead (nil without it) and its metrics
// endpoint; stop releases both.
func (o *generateOptions) newPacer(ctx context.Context, kopts []kgo.Opt) (producers.Pacer, func(), error) {
	a := o.a
	if o.maxAhead <= 0 {
		if len(o.trainerGroups) > 0 {
			return nil, nil, errors.New("--trainer-group is only used with --max-steps-ahead K (K >= 1)")
		}
		return nil, func() {}, nil
	}
	reg := prometheus.NewRegistry()
	pace, err := pacing.New(pacing.Config{KafkaOpts: append(kopts[:len(kopts):len(kopts)], kgo.MaxDecompressBatchBytes(a.conn.BatchLimit(topics.MaxAdvantageBytes))), Names: a.conn.Names(), RunID: o.runID,
		Groups: o.trainerGroups, MaxAhead: o.maxAhead, Logger: a.log, Registerer: reg})
	if err != nil {
		return nil, nil, fmt.Errorf("--max-steps-ahead: %w", err)
	}
	pace.Start(ctx)
	if o.metricsAddr == "" {
		return pace, pace.Close, nil
	}
	srv, err := health.Serve(o.metricsAddr, reg, nil, nil, a.log)
	if err != nil {
		pace.Close()
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	return pace, func() { srv.Stop(); pace.Close() }, nil
}

// stdinUntil reads stdin until ctx ends: a read blocked waiting for the next input line then
// fails with ctx's error at once, so a signal stops `generate --input -` without waiting for a
// line that may never come. The goroutine copying stdin ends with the process.
func stdinUntil(ctx context.Context) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, os.Stdin)
		pw.CloseWithError(err)
	}()
	context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) })
	return ctxReader{ctx: ctx, r: pr}
}

// ctxReader reports ctx's error instead of io.ErrClosedPipe once ctx has closed the pipe.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && c.ctx.Err() != nil {
		return n, c.ctx.Err()
	}
	return n, err
}
