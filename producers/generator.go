// Package producers is the generator stage: it turns a policy's samples into rollout records and
// one step manifest per training step on Kafka (README.md's data flow; docs/stages.md).
//
// A Backend yields one training step at a time (StepBatch); the Generator assigns ids, decides
// anchor groups with topics.IsAnchor, moves large artifacts to a claim-check store, publishes
// every rollout of the step and, only after all of them are acknowledged, the step manifest, so a
// consumer that sees a manifest knows every rollout it lists is already on the rollouts topic.
//
// Backends: OpenAI (an OpenAI-compatible policy server such as vLLM or SGLang, n = G completions
// per prompt), JSONL (a file or stdin, for any external generator) and Builtin (an in-process
// BuiltinPolicy, the demo's task policy).
package producers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/internal/artifact"
	"github.com/wmrl/wmrl/topics"
)

// DefaultInlineLimit is the largest artifact sent inline. It leaves half of the broker's default
// 1 MiB message limit for the prompt and the other fields.
const DefaultInlineLimit = 256 << 10

// StepBatch is one training step's groups, as yielded by a Backend.
type StepBatch struct {
	Step int64
	// PolicyVersion labels the checkpoint that sampled the step; empty takes
	// Config.PolicyVersion.
	PolicyVersion string
	// PolicyStep is the training step of the checkpoint that sampled the step, written to the
	// manifest's policy_step (the correction consumer's staleness); nil takes Config.PolicyLag.
	PolicyStep *int64
	Groups     []GroupSpec
}

// GroupSpec is one group: G rollouts sampled for one prompt.
type GroupSpec struct {
	// GroupID is used verbatim when set; empty means "<step>-<j>" for the j-th group of the step.
	// It must be unique within the run, because the anchor hash and the correction consumer's
	// dedupe key on it.
	GroupID string
	// Stream is the task distribution; empty takes Config.Stream.
	Stream   string
	Prompt   string
	Rollouts []RolloutSpec
}

// RolloutSpec is one sampled rollout of a group.
type RolloutSpec struct {
	// RolloutID is used verbatim when set; empty means "<group_id>-<i>".
	RolloutID string
	// Artifact is the rollout's output (completion, code, solution config). It goes inline up to
	// Config.InlineLimit bytes, by reference beyond.
	Artifact []byte
	// ArtifactURI and ArtifactSHA256 pass through an artifact the backend already stored by
	// reference (exclusive with Artifact).
	ArtifactURI    string
	ArtifactSHA256 string
	ArtifactSize   int64
	Meta           map[string]string
}

// Backend yields training steps in increasing step order. Next returns io.EOF (possibly wrapped)
// when there are no more steps; any other error stops the generator.
type Backend interface {
	Next(ctx context.Context) (StepBatch, error)
}

// Pacer holds a step back until it may be published.
type Pacer interface {
	Wait(ctx context.Context, step int64) error
}

// Config configures a Generator. RunID and KafkaOpts are required.
type Config struct {
	RunID string
	// Pacer, when set, is asked before each step is published and may hold it back (the
	// staleness bound: package producers/pacing).
	Pacer Pacer
	// Stream is the default stream for groups that do not name one (default "main").
	Stream string
	// PolicyVersion is the default policy_version for batches that do not carry one.
	PolicyVersion string
	// PolicyLag, when set, stamps batches without a PolicyStep with policy_step = max(0, step −
	// *PolicyLag): the policy server runs that many steps behind the trainer (0: on-policy). Nil
	// leaves policy_step out unless the backend sets it, and the manifests are as before.
	PolicyLag *int64
	// AnchorFraction is the share of groups executed in the sandbox: a group is an anchor iff
	// topics.AnchorHash(run_id, group_id) < AnchorFraction. In [0,1].
	AnchorFraction float64
	Names          topics.Names
	// KafkaOpts carries connection options; the generator adds its producer options.
	KafkaOpts []kgo.Opt
	// InlineLimit is the largest artifact sent inline (default DefaultInlineLimit, at most
	// topics.MaxInlineArtifact). Larger artifacts, and artifacts that are not valid UTF-8 (JSON
	// cannot carry them byte-exactly), go to Artifacts by reference.
	InlineLimit int
	// Artifacts is the claim-check store; nil makes an over-limit artifact an error.
	Artifacts *artifact.Store
	Logger    *slog.Logger
	// Now stamps CreatedAt (default time.Now).
	Now func() time.Time
}

// Stats counts what a Run published.
type Stats struct {
	Steps, Groups, Rollouts, AnchorGroups, ByReference int
}

// Generator publishes a Backend's steps.
type Generator struct {
	cfg     Config
	backend Backend
	cl      *kgo.Client
	log     *slog.Logger
	// seen maps backend-supplied group ids to their step, to refuse an id reused in a later step
	// (its anchor choice would repeat every step). Generated ids embed the step, so they cannot
	// repeat and are not remembered: memory grows only with explicitly named groups.
	seen    map[string]int64
	last    int64
	started bool
}

// New validates cfg and connects an idempotent producer: franz-go's default idempotent writes
// with acks=all, so a retried produce never duplicates or reorders a rollout within a partition.
func New(b Backend, cfg Config) (*Generator, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrConfig)
	}
	if !topics.ValidID(cfg.RunID) {
		return nil, fmt.Errorf("%w: run id %q is not a valid id", ErrConfig, cfg.RunID)
	}
	cfg.Stream = cmp.Or(cfg.Stream, "main")
	if !topics.ValidID(cfg.Stream) {
		return nil, fmt.Errorf("%w: stream %q is not a valid id", ErrConfig, cfg.Stream)
	}
	if !(cfg.AnchorFraction >= 0 && cfg.AnchorFraction <= 1) {
		return nil, fmt.Errorf("%w: anchor fraction %v outside [0,1]", ErrConfig, cfg.AnchorFraction)
	}
	if cfg.PolicyLag != nil && *cfg.PolicyLag < 0 {
		return nil, fmt.Errorf("%w: policy lag %d must be >= 0", ErrConfig, *cfg.PolicyLag)
	}
	cfg.InlineLimit = cmp.Or(cfg.InlineLimit, DefaultInlineLimit)
	if cfg.InlineLimit < 0 || cfg.InlineLimit > topics.MaxInlineArtifact {
		return nil, fmt.Errorf("%w: inline limit %d outside [0,%d]", ErrConfig, cfg.InlineLimit, topics.MaxInlineArtifact)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	opts := append([]kgo.Opt{}, cfg.KafkaOpts...)
	opts = append(opts,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordDeliveryTimeout(2*time.Minute),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("producers: kafka client: %w", err)
	}
	return &Generator{cfg: cfg, backend: b, cl: cl, log: cfg.Logger.With("stage", "generate", "run", cfg.RunID), seen: map[string]int64{}}, nil
}

// Close releases the Kafka client.
func (g *Generator) Close() { g.cl.Close() }

type badInput struct{ err error }

func (e badInput) Error() string     { return e.err.Error() }
func (e badInput) Unwrap() []error   { return []error{ErrBadInput, e.err} }
func (e badInput) DLQReason() string { return "bad-input" }

// DeadLetterInput writes one skipped input item (e.g. a JSONL line, with JSONLConfig.OnBadLine)
// to the dead-letter topic: source topic source (e.g. "jsonl:/path/in.jsonl"), the item's number
// as offset, raw as value (replaced by its size and SHA-256 above the DLQ bound, like every dead
// letter), reason "bad-input", and waits for the broker's acknowledgement.
func (g *Generator) DeadLetterInput(ctx context.Context, source string, n int64, raw []byte, err error) error {
	src := &kgo.Record{Topic: source, Offset: n, Key: []byte(g.cfg.RunID), Value: raw, Timestamp: g.cfg.Now()}
	g.log.Warn("bad input to dead-letter topic", "source", source, "item", n, "err", err)
	dl := topics.NewDeadLetterWriter(g.cfg.Names, "generate").Record(src, badInput{err})
	if perr := g.cl.ProduceSync(ctx, dl).FirstErr(); perr != nil {
		return fmt.Errorf("producers: dead letter for %s item %d: %w", source, n, perr)
	}
	return nil
}

// Run publishes steps until the backend returns io.EOF (nil error) or fails, or ctx ends. A step
// is published whole or its manifest is not published at all; consumers then see rollouts of a
// step without a manifest, which the correction consumer never treats as complete.
func (g *Generator) Run(ctx context.Context) (Stats, error) {
	var st Stats
	for {
		b, err := g.backend.Next(ctx)
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("producers: backend: %w", err)
		}
		if g.cfg.Pacer != nil {
			if err := g.cfg.Pacer.Wait(ctx, b.Step); err != nil {
				return st, fmt.Errorf("producers: step %d: %w", b.Step, err)
			}
		}
		s, err := g.Publish(ctx, b)
		if err != nil {
			return st, err
		}
		st.Steps++
		st.Groups += s.Groups
		st.Rollouts += s.Rollouts
		st.AnchorGroups += s.AnchorGroups
		st.ByReference += s.ByReference
	}
}

// Publish publishes one step: its rollouts, then (after they are acknowledged) its manifest.
func (g *Generator) Publish(ctx context.Context, b StepBatch) (Stats, error) {
	recs, manifest, st, err := g.build(b)
	if err != nil {
		return st, err
	}
	if err := g.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return st, fmt.Errorf("producers: step %d: produce rollouts: %w", b.Step, err)
	}
	mrec, err := g.cfg.Names.StepRecord(manifest)
	if err != nil {
		return st, fmt.Errorf("producers: step %d: manifest: %w", b.Step, err)
	}
	if err := g.cl.ProduceSync(ctx, mrec).FirstErr(); err != nil {
		return st, fmt.Errorf("producers: step %d: produce manifest: %w", b.Step, err)
	}
	for _, gs := range b.Groups {
		if gs.GroupID != "" {
			g.seen[gs.GroupID] = b.Step
		}
	}
	g.last, g.started = b.Step, true
	g.log.Info("step published", "step", b.Step, "groups", st.Groups, "rollouts", st.Rollouts, "anchor_groups", st.AnchorGroups, "by_reference", st.ByReference)
	return st, nil
}

// EndRun publishes the run's end-of-run request (topics.Names.EndRequestRecord, on the run-control
// topic) naming the last step this generator published, after that step's manifest was
// acknowledged, and waits for the broker's acknowledgement. The correction consumer relays it
// onto the steps topic, retires the run once that step is sealed and dead-letters later steps
// (reason run_ended). The principal needs Write on the run-control topic, which the chart's
// generator does not have (docs/security.md). It fails with ErrNoSteps when nothing was
// published: the end of a run without steps names no last step.
func (g *Generator) EndRun(ctx context.Context) (int64, error) {
	if !g.started {
		return 0, ErrNoSteps
	}
	rec, err := g.cfg.Names.EndRequestRecord(g.cfg.RunID, g.last, g.cfg.Now())
	if err != nil {
		return 0, fmt.Errorf("producers: end of run: %w", err)
	}
	if err := g.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return 0, fmt.Errorf("producers: produce end of run after step %d: %w", g.last, err)
	}
	g.log.Info("end of run published", "last_step", g.last)
	return g.last, nil
}

// build turns a batch into rollout records and the manifest, checking ids before anything is
// produced so a bad batch publishes nothing.
func (g *Generator) build(b StepBatch) ([]*kgo.Record, topics.StepManifest, Stats, error) {
	var st Stats
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: step %d: %s", ErrBadBatch, b.Step, fmt.Sprintf(format, args...))
	}
	if b.Step < 0 {
		return nil, topics.StepManifest{}, st, bad("negative step")
	}
	if g.started && b.Step <= g.last {
		return nil, topics.StepManifest{}, st, bad("not after the last published step %d", g.last)
	}
	if len(b.Groups) == 0 {
		return nil, topics.StepManifest{}, st, bad("no groups")
	}
	pv := cmp.Or(b.PolicyVersion, g.cfg.PolicyVersion)
	now := g.cfg.Now().UTC()
	m := topics.StepManifest{RunID: g.cfg.RunID, Step: b.Step, PolicyVersion: pv, PolicyStep: policyStep(b, g.cfg.PolicyLag), CreatedAt: now}
	groupIDs := map[string]bool{}
	rolloutIDs := map[string]bool{}
	var recs []*kgo.Record
	for j, gs := range b.Groups {
		gid := cmp.Or(gs.GroupID, topics.GroupID(b.Step, j))
		if groupIDs[gid] {
			return nil, m, st, bad("group id %q twice", gid)
		}
		if prev, ok := g.seen[gid]; ok {
			return nil, m, st, bad("group id %q already published in step %d", gid, prev)
		}
		groupIDs[gid] = true
		if len(gs.Rollouts) == 0 {
			return nil, m, st, bad("group %q has no rollouts", gid)
		}
		stream := cmp.Or(gs.Stream, g.cfg.Stream)
		anchor := topics.IsAnchor(g.cfg.RunID, gid, g.cfg.AnchorFraction)
		m.Groups = append(m.Groups, topics.GroupManifest{GroupID: gid, Stream: stream, Size: len(gs.Rollouts), Anchor: anchor})
		if anchor {
			st.AnchorGroups++
		}
		for i, rs := range gs.Rollouts {
			rid := cmp.Or(rs.RolloutID, topics.RolloutID(gid, i))
			if rolloutIDs[rid] {
				return nil, m, st, bad("rollout id %q twice", rid)
			}
			rolloutIDs[rid] = true
			r := topics.Rollout{
				RolloutRef: topics.RolloutRef{RunID: g.cfg.RunID, Step: b.Step, GroupID: gid, RolloutID: rid, Stream: stream, PolicyVersion: pv},
				Anchor:     anchor, Index: i, Prompt: gs.Prompt, Meta: rs.Meta, CreatedAt: now,
			}
			byRef, err := g.placeArtifact(&r, rs)
			if err != nil {
				return nil, m, st, fmt.Errorf("producers: step %d rollout %s: %w", b.Step, rid, err)
			}
			if byRef {
				st.ByReference++
			}
			rec, err := g.cfg.Names.RolloutRecord(r)
			if err != nil {
				return nil, m, st, fmt.Errorf("producers: step %d: %w", b.Step, err)
			}
			recs = append(recs, rec)
			st.Rollouts++
		}
		st.Groups++
	}
	return recs, m, st, nil
}

// placeArtifact puts the artifact inline or in the claim-check store, reporting whether it went
// by reference.
func (g *Generator) placeArtifact(r *topics.Rollout, rs RolloutSpec) (bool, error) {
	if rs.ArtifactURI != "" {
		if len(rs.Artifact) > 0 {
			return false, fmt.Errorf("%w: artifact and artifact URI are exclusive", ErrBadBatch)
		}
		r.ArtifactURI, r.ArtifactSHA256, r.ArtifactSize = rs.ArtifactURI, rs.ArtifactSHA256, rs.ArtifactSize
		return true, nil
	}
	if len(rs.Artifact) == 0 {
		return false, nil
	}
	if len(rs.Artifact) <= g.cfg.InlineLimit && utf8.Valid(rs.Artifact) {
		r.Artifact = string(rs.Artifact)
		r.ArtifactSHA256 = artifact.Digest(rs.Artifact)
		r.ArtifactSize = int64(len(rs.Artifact))
		return false, nil
	}
	if g.cfg.Artifacts == nil {
		return false, fmt.Errorf("%w: %d-byte artifact (inline limit %d, or not UTF-8) needs a claim-check directory (--artifact-dir)", ErrConfig, len(rs.Artifact), g.cfg.InlineLimit)
	}
	ref, err := g.cfg.Artifacts.Put(rs.Artifact)
	if err != nil {
		return false, err
	}
	r.ArtifactURI, r.ArtifactSHA256, r.ArtifactSize = ref.URI, ref.SHA256, ref.Size
	return true, nil
}

// policyStep is the manifest's policy_step for b: the backend's, else derived from lag, else nil.
func policyStep(b StepBatch, lag *int64) *int64 {
	if b.PolicyStep != nil {
		ps := *b.PolicyStep
		return &ps
	}
	if lag == nil {
		return nil
	}
	ps := max(0, b.Step-*lag)
	return &ps
}
