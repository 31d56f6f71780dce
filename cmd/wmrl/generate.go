package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/internal/health"
	"github.com/wmrl/wmrl/producers"
	"github.com/wmrl/wmrl/producers/pacing"
)

func init() { register(newGenerateCmd) }

// Environment variables holding the policy server's API key, in order of precedence; a
// wmrl-specific one first so a shell's OpenAI key does not leak to a self-hosted server.
const (
	envPolicyAPIKey = "WMRL_POLICY_API_KEY"
	envOpenAIAPIKey = "OPENAI_API_KEY"
)

func newGenerateCmd(a *app) *cobra.Command {
	var (
		backend, runID, stream, policyVersion, artifactDir, input string
		anchorFraction                                            float64
		inlineMax                                                 int
		oa                                                        producers.OpenAIConfig
		promptsFile                                               string
		maxAhead, policyLag                                       int64
		trainerGroups                                             []string
		metricsAddr                                               string
	)
	cmd := &cobra.Command{
		Use:   "generate",
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
          --groups-per-step prompts per step, --steps steps. Key from WMRL_POLICY_API_KEY or
          OPENAI_API_KEY.
  jsonl   rollouts from --input FILE (or - for stdin), one JSON object per line (see docs/stages.md):
          {"step": 0, "group_id": "q1", "prompt": "...", "artifact": "..."} or a full rollout record.
The built-in task's policy is not a backend here: it learns from the advantages, so only
'wmrl demo', which closes that loop, runs it.

Staleness bound: --max-steps-ahead K holds step v back while v − t ≥ K, where t is the next step
the slowest --trainer-group has not acknowledged (read from the group's committed offsets on the
advantages topic; trainers commit only past acknowledged steps). K=1 is on-policy lock-step; 0
turns the bound off. A pause and a resume are logged, and --metrics-addr serves
wmrl_generate_paused, wmrl_generate_steps_ahead, wmrl_generate_pauses_total and
wmrl_generate_paused_seconds_total.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			var store *artifact.Store
			if artifactDir != "" {
				var err error
				if store, err = artifact.NewStore(artifactDir, 0); err != nil {
					return err
				}
			}
			var b producers.Backend
			switch backend {
			case "openai":
				f, err := os.Open(promptsFile)
				if err != nil {
					return fmt.Errorf("--prompts: %w", err)
				}
				oa.Prompts, err = producers.LoadPrompts(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("--prompts %s: %w", promptsFile, err)
				}
				oa.APIKey = os.Getenv(envPolicyAPIKey)
				if oa.APIKey == "" {
					oa.APIKey = os.Getenv(envOpenAIAPIKey)
				}
				oa.Logger = a.log
				if b, err = producers.NewOpenAI(oa); err != nil {
					return err
				}
			case "jsonl":
				var r io.Reader = os.Stdin
				if input == "" {
					return errors.New("--backend jsonl needs --input FILE (or - for stdin)")
				}
				if input != "-" {
					f, err := os.Open(input)
					if err != nil {
						return fmt.Errorf("--input: %w", err)
					}
					defer f.Close()
					r = f
				}
				var err error
				if b, err = producers.NewJSONL(r, producers.JSONLConfig{RunID: runID, AnchorFraction: anchorFraction}); err != nil {
					return err
				}
			case "builtin":
				return errors.New("--backend builtin is the demo's task policy: run it with `wmrl demo`, which wires it into the generator")
			default:
				return fmt.Errorf("--backend %q: want openai or jsonl", backend)
			}
			kopts, err := a.kafkaOpts()
			if err != nil {
				return err
			}
			var pacer producers.Pacer
			if maxAhead > 0 {
				reg := prometheus.NewRegistry()
				pace, err := pacing.New(pacing.Config{KafkaOpts: kopts, Names: a.conn.Names(), RunID: runID,
					Groups: trainerGroups, MaxAhead: maxAhead, Logger: a.log, Registerer: reg})
				if err != nil {
					return fmt.Errorf("--max-steps-ahead: %w", err)
				}
				defer pace.Close()
				pace.Start(ctx)
				if metricsAddr != "" {
					srv, err := health.Serve(metricsAddr, reg, nil, nil, a.log)
					if err != nil {
						return fmt.Errorf("--metrics-addr: %w", err)
					}
					defer srv.Stop()
				}
				pacer = pace
			} else if len(trainerGroups) > 0 {
				return errors.New("--trainer-group is only used with --max-steps-ahead K (K >= 1)")
			}
			gcfg := producers.Config{
				RunID: runID, Stream: stream, PolicyVersion: policyVersion, AnchorFraction: anchorFraction,
				Names: a.conn.Names(), KafkaOpts: kopts, InlineLimit: inlineMax, Artifacts: store, Logger: a.log,
				Pacer: pacer,
			}
			if cmd.Flags().Changed("policy-lag") {
				gcfg.PolicyLag = &policyLag
			}
			g, err := producers.New(b, gcfg)
			if err != nil {
				return err
			}
			defer g.Close()
			st, err := g.Run(ctx)
			fmt.Fprintf(a.stdout, "published %d steps, %d groups (%d anchor), %d rollouts (%d by reference)\n",
				st.Steps, st.Groups, st.AnchorGroups, st.Rollouts, st.ByReference)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&backend, "backend", "openai", "rollout source: openai or jsonl")
	f.StringVar(&runID, "run-id", "", "run id (required): the key of every record, and half of the anchor hash")
	f.StringVar(&stream, "stream", "main", "default stream (task distribution) for groups that do not name one")
	f.StringVar(&policyVersion, "policy-version", "", "policy_version label for steps whose backend does not set one")
	f.Int64Var(&policyLag, "policy-lag", 0, "stamp policy_step = max(0, step - K) on steps whose input has none: the policy server runs K steps behind the trainer (unset: policy_step unknown)")
	f.Float64Var(&anchorFraction, "anchor-fraction", 0.25, "share of groups executed in the sandbox (reference: 2 of 8 groups)")
	f.StringVar(&artifactDir, "artifact-dir", "", "claim-check directory for artifacts above --inline-max (shared with the consumers)")
	f.IntVar(&inlineMax, "inline-max", producers.DefaultInlineLimit, "largest artifact in bytes sent inline")
	f.StringVar(&input, "input", "", "jsonl: input file, - for stdin")
	f.Int64Var(&maxAhead, "max-steps-ahead", 0, "hold a step back while it is this many steps ahead of the slowest trainer (0: no bound)")
	f.StringSliceVar(&trainerGroups, "trainer-group", nil, "consumer group of a trainer of this run (repeatable; needed with --max-steps-ahead)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "with --max-steps-ahead: serve Prometheus /metrics here (empty: off)")
	f.StringVar(&promptsFile, "prompts", "", "openai: prompts JSONL file")
	f.StringVar(&oa.BaseURL, "base-url", "http://127.0.0.1:8000/v1", "openai: API root including /v1")
	f.StringVar(&oa.Model, "model", "", "openai: served model name")
	f.StringVar(&oa.API, "api", producers.APIChat, "openai: chat (/chat/completions) or completions (/completions)")
	f.StringVar(&oa.SystemPrompt, "system-prompt", "", "openai: system message for the chat API")
	f.IntVar(&oa.GroupSize, "group-size", 8, "openai: G, completions per prompt (sent as n)")
	f.IntVar(&oa.GroupsPerStep, "groups-per-step", 8, "openai: prompts (groups) per step")
	f.Int64Var(&oa.Steps, "steps", 1, "openai: steps to generate")
	f.Int64Var(&oa.FirstStep, "first-step", 0, "openai: first step number")
	f.Float64Var(&oa.Temperature, "temperature", 1.0, "openai: sampling temperature")
	f.Float64Var(&oa.TopP, "top-p", 0, "openai: nucleus sampling (0: server default)")
	f.IntVar(&oa.MaxTokens, "max-tokens", 0, "openai: completion length cap (0: server default)")
	f.DurationVar(&oa.Timeout, "request-timeout", 10*time.Minute, "openai: per-request timeout")
	f.IntVar(&oa.MaxAttempts, "max-attempts", 4, "openai: tries per request (429, 5xx, timeouts are retried)")
	_ = cmd.MarkFlagRequired("run-id")
	return cmd
}
