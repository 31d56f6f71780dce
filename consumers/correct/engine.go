package correct

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// Record outcomes counted in wmrl_correct_records_total{result}.
const (
	resultBuffered  = "buffered"
	resultDuplicate = "duplicate"        // identical to a buffered record of the same rollout
	resultSealed    = "sealed_duplicate" // for a step the run has already sealed (re-read after a restart)
	resultDLQ       = "dead_letter"
	resultForeign   = "foreign_topic"
	// resultUndeliverable: bad, but its dead letter was refused for good twice; skipped (see
	// markUndeliverable).
	resultUndeliverable = "dead_letter_undeliverable"
	// resultIdleIgnored: an idle end-of-run record for a run that went on or ended otherwise.
	resultIdleIgnored = "idle_end_ignored"
	// resultBatchTooLarge: a record batch refused as over MaxBatchBytes, skipped unread (skip.go);
	// counted once per batch, not per record.
	resultBatchTooLarge = "batch_too_large"
)

// tp is a topic partition.
type tp struct {
	topic string
	part  int32
}

// offEpoch is a commit position: the offset of the oldest record still needed and its leader epoch.
type offEpoch struct {
	off   int64
	epoch int32
}

// reward is one buffered reward record, reduced to what correction uses (plus the source record,
// so that a reward found inconsistent only once the manifest arrives can still be dead-lettered).
type reward struct {
	stream   string
	score    float64 // the record's score; 0 when it has none (hasScore)
	hasScore bool
	ok       bool
	status   topics.Status
	imputed  bool
	rec      *kgo.Record
}

// sameContent reports whether two records of one rollout agree on everything correction reads;
// timestamps, latencies and reasons may differ between an original and its redelivery.
func (r *reward) sameContent(o *reward) bool {
	return r.stream == o.stream && r.status == o.status && r.imputed == o.imputed &&
		r.hasScore == o.hasScore && r.score == o.score
}

type groupRewards struct {
	order []string // rollout ids in arrival order
	byID  map[string]*reward
}

func (g *groupRewards) remove(id string) {
	delete(g.byID, id)
	if i := slices.Index(g.order, id); i >= 0 {
		g.order = slices.Delete(g.order, i, i+1)
	}
}

// stepBuf buffers the inputs of one (run, step) until the step is complete.
type stepBuf struct {
	step     int64
	manifest *topics.StepManifest
	manRec   *kgo.Record // the manifest's record (dead-lettered if an idle end drops the step)
	groups   map[string]topics.GroupManifest
	pred     map[string]*groupRewards
	exec     map[string]*groupRewards
	// minOff is, per input kind, the oldest buffered record of this step: the consumer must not
	// commit past it until the step is sealed.
	minOff    [numKinds]offEpoch
	hasOff    [numKinds]bool
	lastInput time.Time
	// rewards counts the rewards buffered while no manifest is (Limits.StepRows).
	rewards int
}

func (b *stepBuf) note(k kind, rec *kgo.Record, now time.Time) {
	if !b.hasOff[k] || rec.Offset < b.minOff[k].off {
		b.minOff[k], b.hasOff[k] = offEpoch{rec.Offset, rec.LeaderEpoch}, true
	}
	b.lastInput = now
}

// runBuf is one run: the states sealed so far (one per stream, all at sealed) and buffered steps.
type runBuf struct {
	id     string
	part   int32
	sealed int64
	states map[string]*correction.State
	steps  map[int64]*stepBuf
	// rewrite names the streams whose next snapshot must carry every window chunk: their
	// changelog holds no chunks yet (calibration restarted for a config change).
	rewrite map[string]bool
	// end is the run's buffered end-of-run record, nil until it arrives (runend.go).
	end *runEnd
	// lastInput is when the run's last input record arrived (or its states were installed);
	// idleSent says an idle end-of-run record was queued since (idle.go).
	lastInput time.Time
	idleSent  bool
}

// sealed is one step's output, ready to be produced.
type sealed struct {
	run       string
	part      int32
	step      int64
	rows      []topics.AdvantageRow
	snaps     []topics.CalibrationSnapshot // one per stream, sorted by stream
	chunks    [][]statestore.Chunk         // per snapshot: the window chunks its step changed
	states    []*correction.State          // per snapshot: the sealed state (read-only)
	newStream []string                     // streams first seen in this step
	lastInput time.Time
	staleRows int // rows masked as stale (MaxStaleness)
}

// engine is the deterministic heart of the consumer, free of I/O: it buffers the input records
// of runs per step, dedupes them by rollout id, decides completeness and seals complete steps in
// order. The live consumer and replay share it, which is what makes their digests equal.
type engine struct {
	corr  *correction.Corrector
	names topics.Names
	kinds map[string]kind
	dlqw  *topics.DeadLetterWriter
	m     *metrics
	hash  string
	// settings is the DigestConfig text written with every snapshot (settings.go).
	settings string
	// maxStaleness masks the rows of steps whose policy lags by more steps (0: off); see staleness.go.
	maxStaleness int64
	// limits bound the buffered steps (limits.go); nSteps and nGroups count the buffered steps
	// and their manifests' groups, dlqBytes the dead letters held.
	limits          Limits
	nSteps, nGroups int
	dlqBytes        int

	runs map[string]*runBuf
	dlq  map[tp][]deadLetter
	// overflow folds, per partition, the dead letters judged while Limits.HeldDeadLetters waited;
	// runsRefused and aggregated count the records refused too-many-runs and folded (flood.go).
	overflow                map[tp]*overflow
	runsRefused, aggregated int
	// undeliverable counts, per input record, the refusals of its dead letter; kept by reset.
	undeliverable map[tp]map[int64]int
	// deadLettered counts records judged bad since the engine was made, skippedBatches the
	// record batches among them skipped unread (skip.go).
	deadLettered, skippedBatches int
	// ended maps each run retired since the last reset (or found ended in the changelog) to its
	// end, retired lists the runs retired since the consumer last took them, and pendEnds,
	// pendTombs and pendIdle queue what the next transaction writes: end records and tombstones
	// for the changelog, idle end-of-run records for the steps topic (runend.go, retention.go,
	// idle.go).
	ended     map[string]*endedRun
	retired   []string
	pendEnds  []*endedRun
	pendTombs []*endedRun
	pendIdle  []*kgo.Record // idle end-of-run records for the steps topic (idle.go)
	pendRelay []*kgo.Record // end requests relayed onto the steps topic (runend.go)
	verdicts  []endVerdict  // end-of-run records judged since the last take (verdict.go)
	// relayed tells an end-of-run record on the steps topic that this consumer wrote (an idle end
	// or a relayed request) from one anybody who may write steps wrote: see runend.go. It is
	// fromTransaction, a field only so that engine tests can feed hand-built records.
	relayed func(*kgo.Record) bool
	// scratch holds one sealScratch per sealing goroutine.
	scratch []*sealScratch
}

// newEngine takes everything the engine's output depends on besides its input records: the
// corrector, the topic names, the staleness bound and the buffering limits (as filled by
// withDefaults). None has a default here, so a replay cannot forget one and silently diverge from
// the live consumer it must reproduce.
func newEngine(corr *correction.Corrector, names topics.Names, maxStaleness int64, limits Limits, m *metrics) *engine {
	h := corr.Hash()
	kinds := make(map[string]kind, numKinds)
	for k := range numKinds {
		kinds[k.topic(names)] = k
	}
	return &engine{
		corr:  corr,
		names: names,
		kinds: kinds,
		dlqw:  topics.NewDeadLetterWriter(names, "correct"),
		m:     m,
		hash:  hex.EncodeToString(h[:]),
		settings: DigestConfig{Correction: corr.Config(), MaxStaleness: maxStaleness, Limits: limits,
			SchemaIDsChecked: names.Registry != nil}.Text(),
		maxStaleness: maxStaleness,
		limits:       limits,
		runs:         map[string]*runBuf{},
		dlq:          map[tp][]deadLetter{},
		overflow:     map[tp]*overflow{},
		ended:        map[string]*endedRun{},
		relayed:      fromTransaction,

		undeliverable: map[tp]map[int64]int{},
	}
}

// reset forgets everything: the consumer calls it before rebuilding state from the changelog.
func (e *engine) reset() {
	e.runs = map[string]*runBuf{}
	e.dlq = map[tp][]deadLetter{}
	e.overflow = map[tp]*overflow{}
	// A reset precedes a rebuild from the changelog, which brings back the ends it recorded; one
	// it lacks (an aborted transaction) the re-read input ends again.
	e.ended, e.retired, e.pendEnds, e.pendTombs, e.pendIdle, e.pendRelay = map[string]*endedRun{}, nil, nil, nil, nil, nil
	e.verdicts = nil
	e.nSteps, e.nGroups, e.dlqBytes = 0, 0, 0
}

// install sets a run's sealed states (all at the same step), as loaded from the changelog.
func (e *engine) install(run string, part int32, states []*correction.State) error {
	if len(states) == 0 {
		return nil
	}
	rb := &runBuf{id: run, part: part, sealed: states[0].SealedStep(), states: map[string]*correction.State{}, steps: map[int64]*stepBuf{},
		lastInput: time.Now()}
	for _, st := range states {
		if st.SealedStep() != rb.sealed {
			return fmt.Errorf("%w: run %s: stream %s sealed at step %d, stream %s at %d (streams of a run advance together)",
				ErrChangelog, run, states[0].Stream(), rb.sealed, st.Stream(), st.SealedStep())
		}
		rb.states[st.Stream()] = st
	}
	e.runs[run] = rb
	return nil
}

// runFor returns the run's buffer, creating it on first sight, or an error when the run was seen
// on another partition number (a producer that does not key by run_id).
func (e *engine) runFor(id string, part int32) (*runBuf, error) {
	rb := e.runs[id]
	if rb == nil {
		if err := e.admitRun(id); err != nil {
			return nil, err
		}
		rb = &runBuf{id: id, part: part, sealed: -1, states: map[string]*correction.State{}, steps: map[int64]*stepBuf{}}
		e.runs[id] = rb
		return rb, nil
	}
	if rb.part != part {
		return nil, conflict("run %s is on partition %d of the input topics, this record arrived on partition %d (records must be keyed by run_id)", id, rb.part, part)
	}
	return rb, nil
}

// buf returns the buffer of step v of run rb, opening one if the limits admit it.
func (e *engine) buf(rb *runBuf, v int64) (*stepBuf, error) {
	b := rb.steps[v]
	if b == nil {
		if err := e.admitStep(rb, v); err != nil {
			return nil, err
		}
		b = &stepBuf{step: v, pred: map[string]*groupRewards{}, exec: map[string]*groupRewards{}}
		rb.steps[v] = b
		e.nSteps++
	}
	return b, nil
}

// decoded is one input record after decoding (pure, so records may be decoded in parallel).
type decoded struct {
	rec  *kgo.Record
	kind kind
	ok   bool // topic is an input topic
	err  error
	man  topics.StepManifest
	run  string // the record's run id, of every kind
	step int64
	gid  string
	id   string
	rw   *reward
}

// decode is pure but for a framed record's first schema id, which the registry is asked about
// (retried while it is away, until ctx ends: the caller then drops the poll, never applies it).
func (e *engine) decode(ctx context.Context, rec *kgo.Record) decoded {
	d := decoded{rec: rec}
	d.kind, d.ok = e.kinds[rec.Topic]
	if !d.ok {
		return d
	}
	switch d.kind {
	case kindStep:
		d.man, d.err = e.names.DecodeStepRecord(ctx, rec)
		d.run = d.man.RunID
	case kindPredicted:
		p, err := e.names.DecodePredictedRecord(ctx, rec)
		if err != nil {
			d.err = err
			return d
		}
		rw := &reward{stream: p.Stream, status: p.Status, rec: rec}
		if p.Score != nil {
			rw.hasScore, rw.score = true, *p.Score
		}
		rw.ok = p.Status == topics.StatusOK && rw.hasScore
		d.run, d.step, d.gid, d.id, d.rw = p.RunID, p.Step, p.GroupID, p.RolloutID, rw
	case kindExecuted:
		x, err := e.names.DecodeExecutedRecord(ctx, rec)
		if err != nil {
			d.err = err
			return d
		}
		rw := &reward{stream: x.Stream, status: x.Status, imputed: x.Imputed, rec: rec}
		if x.Score != nil {
			rw.hasScore, rw.score = true, *x.Score
		}
		// OK iff a real score, or a policy score imputed for a failure (--on-timeout=zero).
		rw.ok = rw.hasScore && (x.Status == topics.StatusOK || x.Imputed)
		d.run, d.step, d.gid, d.id, d.rw = x.RunID, x.Step, x.GroupID, x.RolloutID, rw
	}
	if d.err == nil {
		// Records are partitioned by their key; one keyed otherwise may sit on a partition another
		// instance owns, and a replay (which selects a run by key) would not see it.
		if string(rec.Key) != d.run {
			d.err = &topics.FieldError{Record: "record", Field: "key", Value: string(rec.Key),
				Reason: fmt.Sprintf("must equal run_id %q: records are partitioned by run", d.run), Err: topics.ErrInvalid}
		}
	}
	return d
}

// add takes one input record. Bad records become pending dead letters; nothing here fails. ctx
// bounds the wait for a schema registry that cannot be reached (the caller checks ctx after).
func (e *engine) add(ctx context.Context, rec *kgo.Record, now time.Time) {
	e.apply(e.decode(ctx, rec), now)
}

// apply folds a decoded record into the buffers; records must be applied in input order.
func (e *engine) apply(d decoded, now time.Time) {
	_, known := e.runs[d.run]
	switch {
	case !d.ok && d.rec.Topic == e.names.Runs():
		e.relayEnd(d.rec)
	case !d.ok:
		e.m.records.WithLabelValues(d.rec.Topic, resultForeign).Inc()
	case d.err != nil:
		e.deadLetter(d.rec, d.kind, d.err)
	case d.kind == kindStep:
		e.addManifest(d.rec, d.man, now)
	default:
		e.addReward(d.rec, d.kind, d.run, d.step, d.gid, d.id, d.rw, now)
	}
	if d.ok && d.err == nil {
		e.touch(d, now)
		if !known {
			e.dropIfEmpty(d.run)
		}
	}
}

func (e *engine) addManifest(rec *kgo.Record, m topics.StepManifest, now time.Time) {
	if m.EndOfRun {
		e.judgeEndOfEnded(rec, m)
	}
	if e.endedRecord(rec, kindStep, m.RunID, m.Step) {
		return
	}
	if m.EndOfRun {
		e.addEnd(rec, m)
		return
	}
	rb, err := e.runFor(m.RunID, rec.Partition)
	if err != nil {
		e.deadLetter(rec, kindStep, err)
		return
	}
	if m.Step <= rb.sealed {
		e.m.record(kindStep, resultSealed)
		return
	}
	if rb.end != nil && m.Step > rb.end.last {
		e.deadLetter(rec, kindStep, &runEndedError{run: rb.id, step: m.Step, last: rb.end.last})
		return
	}
	if b := rb.steps[m.Step]; b != nil && b.manifest != nil {
		if manifestsEqual(b.manifest, &m) {
			e.m.record(kindStep, resultDuplicate)
			return
		}
		e.deadLetter(rec, kindStep, conflict("step manifest run=%s step=%d differs from the one already buffered", m.RunID, m.Step))
		return
	}
	if err := e.admitManifest(&m); err != nil {
		e.deadLetter(rec, kindStep, err)
		return
	}
	b, err := e.buf(rb, m.Step)
	if err != nil {
		e.deadLetter(rec, kindStep, err)
		return
	}
	e.nGroups += len(m.Groups)
	b.manifest, b.manRec = &m, rec
	b.groups = make(map[string]topics.GroupManifest, len(m.Groups))
	for _, g := range m.Groups {
		b.groups[g.GroupID] = g
	}
	b.note(kindStep, rec, now)
	e.m.record(kindStep, resultBuffered)
	// Rewards that arrived before the manifest are checked against it now.
	for _, k := range []kind{kindPredicted, kindExecuted} {
		rewards := b.pred
		if k == kindExecuted {
			rewards = b.exec
		}
		for _, gid := range slices.Sorted(maps.Keys(rewards)) {
			gr := rewards[gid]
			for _, id := range slices.Clone(gr.order) {
				rw := gr.byID[id]
				if err := b.check(k, gid, id, rw, gr, true); err != nil {
					gr.remove(id)
					e.deadLetter(rw.rec, k, err)
				}
			}
			if len(gr.order) == 0 {
				delete(rewards, gid)
			}
		}
	}
}

func manifestsEqual(a, b *topics.StepManifest) bool {
	return a.RunID == b.RunID && a.Step == b.Step && a.PolicyVersion == b.PolicyVersion &&
		policyStepEqual(a.PolicyStep, b.PolicyStep) && slices.Equal(a.Groups, b.Groups)
}

// check tests a reward against the step's manifest (if known). buffered says rw is already in gr
// (it then counts towards the group size only when among the first Size rollouts).
func (b *stepBuf) check(k kind, gid, id string, rw *reward, gr *groupRewards, buffered bool) error {
	if b.manifest == nil {
		return nil
	}
	g, ok := b.groups[gid]
	switch {
	case !ok:
		return conflict("group %s is not in the manifest of step %d", gid, b.step)
	case rw.stream != g.Stream:
		return conflict("reward stream %q differs from the manifest's %q for group %s", rw.stream, g.Stream, gid)
	case k == kindExecuted && !g.Anchor:
		return conflict("executed reward for group %s, which the manifest does not mark as an anchor group", gid)
	}
	n := len(gr.order)
	if buffered {
		n = slices.Index(gr.order, id)
	}
	if k == kindExecuted {
		// An executed reward belongs to a rollout the world model scored. Once the group's
		// predicted rewards are all in, an id outside them is refused at once; before that,
		// executed rewards wait (at most 2×Size of them) so that a bogus one can never push a
		// genuine one out and stall the step.
		if p := b.pred[gid]; p != nil && len(p.order) >= g.Size {
			if _, known := p.byID[id]; !known {
				return conflict("executed reward for rollout %s, which has no predicted reward in full group %s", id, gid)
			}
			return nil
		}
		if n >= 2*g.Size {
			return conflict("group %s already buffers %d executed rewards for %d rollouts; rollout %s is one too many", gid, n, g.Size, id)
		}
		return nil
	}
	if n >= g.Size {
		return conflict("group %s already has its %d rollouts; rollout %s is one too many", gid, g.Size, id)
	}
	return nil
}

func (e *engine) addReward(rec *kgo.Record, k kind, run string, step int64, gid, id string, rw *reward, now time.Time) {
	if e.endedRecord(rec, k, run, step) {
		return
	}
	rb, err := e.runFor(run, rec.Partition)
	if err != nil {
		e.deadLetter(rec, k, err)
		return
	}
	if step <= rb.sealed {
		e.m.record(k, resultSealed)
		return
	}
	if rb.end != nil && step > rb.end.last {
		e.deadLetter(rec, k, &runEndedError{run: run, step: step, last: rb.end.last})
		return
	}
	b, err := e.buf(rb, step)
	if err != nil {
		e.deadLetter(rec, k, err)
		return
	}
	rewards := b.pred
	if k == kindExecuted {
		rewards = b.exec
	}
	gr := rewards[gid]
	if gr != nil {
		if prev := gr.byID[id]; prev != nil {
			if prev.sameContent(rw) {
				e.m.record(k, resultDuplicate)
				return
			}
			e.deadLetter(rec, k, conflict("rollout %s of group %s step %d: %s reward differs from the one already buffered (offset %d)",
				id, gid, step, k, prev.rec.Offset))
			return
		}
	} else {
		gr = &groupRewards{byID: map[string]*reward{}}
	}
	if err := b.check(k, gid, id, rw, gr, false); err != nil {
		e.deadLetter(rec, k, err)
		return
	}
	if err := e.admitReward(b, run); err != nil {
		e.deadLetter(rec, k, err)
		return
	}
	if b.manifest == nil {
		b.rewards++
	}
	rewards[gid] = gr
	gr.order = append(gr.order, id)
	gr.byID[id] = rw
	b.note(k, rec, now)
	e.m.record(k, resultBuffered)
}

// bufferedSteps counts the unsealed steps held in memory.
func (e *engine) bufferedSteps() int {
	n := 0
	for _, rb := range e.runs {
		n += len(rb.steps)
	}
	return n
}

// stalled lists runs whose next step is not buffered complete while later steps are buffered.
func (e *engine) stalled() []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(e.runs)) {
		rb := e.runs[id]
		if len(rb.steps) > 0 {
			out = append(out, fmt.Sprintf("%s@%d(%d buffered)", id, rb.sealed+1, len(rb.steps)))
		}
	}
	return out
}
