package dashboard

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// State is the whole dashboard at one moment: the body of GET /api/state and of every
// server-sent "state" event. Field meanings are documented in docs/dashboard.md.
type State struct {
	// Version increases with every change the followers applied.
	Version uint64    `json:"version"`
	Updated time.Time `json:"updated"`
	// TopicPrefix is the prefix whose topic sets are followed.
	TopicPrefix string        `json:"topic_prefix"`
	Runs        []Run         `json:"runs"`
	Groups      []GroupLag    `json:"groups"`
	Topics      []TopicRate   `json:"topics"`
	DeadLetters []DeadLetters `json:"dead_letters"`
	// Wiring names topic sets whose rollouts no correction consumer reads (scoring.go).
	Wiring []string `json:"wiring"`
	// Headline is a finished demo's result (`wmrl demo --dashboard`); absent otherwise.
	Headline *Headline `json:"headline,omitempty"`
	// Scoring counts the world model's and the sandbox's failure records per topic set.
	Scoring []ScoringHealth `json:"scoring"`
	// Errors are the most recent problems the followers met (undecodable records, Redis or lag
	// polls failing); the page shows them instead of silently missing data.
	Errors []string `json:"errors"`
	// SkippedBatches counts the record batches the follower skipped unread because they
	// decompress past Config.MaxBatchBytes (each also listed in Errors).
	SkippedBatches int64 `json:"skipped_batches"`
}

// Run is one (topic set, run id, stream): the unit that has its own calibration state.
type Run struct {
	// ID is "<topic prefix><run id>/<stream>", unique across topic sets.
	ID     string `json:"id"`
	Prefix string `json:"prefix"`
	Run    string `json:"run"`
	Stream string `json:"stream"`
	// Steps are the sealed steps (a calibration snapshot was committed) in step order.
	Steps []Step `json:"steps"`
	// Maps are at most MapsInState fitted maps spread over the run, the latest always included;
	// GET /api/maps?id=… has all of them.
	Maps []Map `json:"maps"`
	// Pairs are the most recent anchor pairs (at most Config.MaxPairs): [step, world-model score,
	// executed score].
	Pairs [][3]float64 `json:"pairs"`
	// Redis is the correction consumer's head record for the run, if a Redis client was given.
	Redis *RedisHead `json:"redis,omitempty"`
	// Ended is the run's end as the calibration changelog records it (null: not ended).
	Ended *RunEnd `json:"ended"`
	// LastActivity is the newest record timestamp of the run (rewards, advantages, snapshots,
	// manifests, its end): runs are listed newest first by it.
	LastActivity time.Time `json:"last_activity"`
	// Groups and AnchorGroups count the groups (and those marked anchor) of the run's step
	// manifests on the steps topic, sealed or not: the data `wmrl generate` reports from.
	Groups       int `json:"groups"`
	AnchorGroups int `json:"anchor_groups"`
	// GatedSince is the first step of the closed trust gate's current streak when the newest
	// sealed step's gate is closed (the world model is gated off since that step); null otherwise.
	GatedSince *int64 `json:"gated_since"`
}

// gatedSince is Run.GatedSince of steps (in step order).
func gatedSince(steps []Step) *int64 {
	var since *int64
	for i := len(steps) - 1; i >= 0 && steps[i].Gate != nil && steps[i].Gate.Closed; i-- {
		v := steps[i].Step
		since = &v
	}
	return since
}

// Step is one sealed training step as the topics show it.
type Step struct {
	Step       int64  `json:"step"`
	FitVersion uint64 `json:"fit_version"`
	// AnchorWeight is the IVD weight of anchor rows in force for this step (from the previous
	// step's snapshot; 1 for step 0); NextAnchorWeight the one sealed after it.
	AnchorWeight     float64 `json:"anchor_weight"`
	NextAnchorWeight float64 `json:"next_anchor_weight"`
	// Pairs is the number of anchor pairs in the window after the step; StepPairs this step's.
	Pairs     int `json:"pairs"`
	StepPairs int `json:"step_pairs"`
	// RawMAE is mean |world-model score − executed| over the step's anchor rollouts; CalibratedMAE
	// the same after the map in force for the step (out of sample). Null without anchor rollouts.
	RawMAE        *float64 `json:"raw_mae"`
	CalibratedMAE *float64 `json:"calibrated_mae"`
	// BiasBefore and BiasAfter are the snapshot's mean signed errors (predicted − executed).
	BiasBefore float64 `json:"bias_before"`
	BiasAfter  float64 `json:"bias_after"`
	// DebiasShift is the snapshot's mean |A(f(r̂)) − A(r̂)| over the step's world-model rows and
	// DebiasReordered the share of world-model groups whose order or ties the map changed
	// (correction.DebiasEffect); null in snapshots written before they existed.
	DebiasShift     *float64 `json:"debias_shift"`
	DebiasReordered *float64 `json:"debias_reordered_share"`
	// Rows and AnchorRows count the step's advantage rows and those using an executed reward.
	Rows       int `json:"rows"`
	AnchorRows int `json:"anchor_rows"`
	// Groups and AnchorGroups count the step manifest's groups and its anchor groups.
	Groups       int `json:"groups"`
	AnchorGroups int `json:"anchor_groups"`
	// MaskedRows counts the step's rows with mask false (no usable reward, stale, or the trust
	// gate closed).
	MaskedRows int `json:"masked_rows"`
	// Gate is the snapshot's trust gate (`wmrl correct --trust-gate`): whether it masked the
	// step's world-model rows, and the window's correlation that decided it; null without the gate.
	Gate *topics.TrustGate `json:"gate"`
	// LatencyMS is from the last reward record of the step (predicted or executed topic) to the
	// last advantages chunk, by record timestamps; null when either side was not seen, or when
	// a reward record is newer than the advantages (a stage redid the step after it sealed, e.g.
	// after a restart): the step's latency is then unknown, never negative.
	LatencyMS *float64  `json:"latency_ms"`
	SealedAt  time.Time `json:"sealed_at"`
}

// Map is the fitted calibration map sealed after Step: breakpoints X → Y, linear between them,
// constant beyond the ends (empty: identity).
type Map struct {
	Step       int64     `json:"step"`
	FitVersion uint64    `json:"fit_version"`
	X          []float64 `json:"x"`
	Y          []float64 `json:"y"`
	// Space is MapSpaceScore (world-model score → executed score) or MapSpaceZ (`--map zspace`:
	// within-group standardised world-model advantage → corrected one), drawn on its own axes.
	Space string `json:"space"`
}

// The spaces a Map acts in.
const (
	MapSpaceScore = "score"
	MapSpaceZ     = "z"
)

// GroupLag is one consumer group's lag on one followed topic.
type GroupLag struct {
	Group   string `json:"group"`
	Topic   string `json:"topic"`
	State   string `json:"state"`
	Members int    `json:"members"`
	// Lag is the sum over partitions of end offset − committed offset (transaction markers
	// included, so an idle transactional topic can show a lag of a few).
	Lag   int64  `json:"lag"`
	Error string `json:"error,omitempty"`
}

// TopicRate is the committed traffic on one followed topic as the dashboard read it.
type TopicRate struct {
	Topic string `json:"topic"`
	// Stage is the stage that writes the topic.
	Stage   string `json:"stage"`
	Records int64  `json:"records"`
	// PerSecond is records per second over the last RateWindow.
	PerSecond float64 `json:"per_second"`
}

// DeadLetters counts dead letters of one topic set by stage and reason.
type DeadLetters struct {
	Prefix string `json:"prefix"`
	Stage  string `json:"stage"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
	// LastError is the error text of the newest one.
	LastError string `json:"last_error"`
}

// MapsInState bounds the maps each run carries in State.
const MapsInState = 6

// RateWindow is the window of TopicRate.PerSecond.
const RateWindow = 5 * time.Second

const maxErrors = 20

// stageOf names the stage that writes a topic suffix.
var stageOf = map[string]string{
	topics.SuffixRollouts:    "generator",
	topics.SuffixSteps:       "generator",
	topics.SuffixPredicted:   "world model",
	topics.SuffixExecuted:    "sandbox",
	topics.SuffixAdvantages:  "correction",
	topics.SuffixCalibration: "correction",
	topics.SuffixDLQ:         "any stage",
}

// splitTopic splits a followed topic name into its prefix and suffix.
func splitTopic(topic string) (prefix, suffix string, ok bool) {
	for s := range stageOf {
		if p, found := strings.CutSuffix(topic, s); found {
			return p, s, true
		}
	}
	return "", "", false
}

type runKey struct{ prefix, run, stream string }

func (k runKey) id() string { return k.prefix + k.run + "/" + k.stream }

// stepAcc collects what arrives for a step before and after its snapshot.
type stepAcc struct {
	lastReward, lastAdvantage time.Time
	rows, anchorRows, masked  int
	groups, anchorGroups      int
	pairs                     int
	rawErr, calErr            float64
}

// runModel keeps what arrived per step. Records of one step arrive on several topics, and a
// reader gets no order across topics (the snapshot can come before the step's advantages), so
// steps are joined when the state is read, not when the snapshot arrives.
type runModel struct {
	key   runKey
	snaps map[int64]snapInfo
	accs  map[int64]*stepAcc
	pairs [][3]float64
	redis *RedisHead
	// headSeen: Redis held a head for the run at some poll (redis.go: a later miss is a loss).
	headSeen bool
	end      *RunEnd
	last     time.Time
	// redisMaps are maps read from the consumer's Redis state, by fit version (redismap.go).
	redisMaps map[uint64]Map
}

type snapInfo struct {
	s  topics.CalibrationSnapshot
	at time.Time
}

type topicCounter struct {
	records int64
	times   []time.Time // arrival times within RateWindow
}

type dlqKey struct{ prefix, stage, reason string }

// Model is the dashboard's in-memory view, fed by the followers. It is safe for concurrent use.
type Model struct {
	prefix   string
	maxPairs int
	now      func() time.Time

	mu         sync.Mutex
	version    uint64
	runs       map[runKey]*runModel
	topicsSeen map[string]*topicCounter
	dlq        map[dlqKey]*DeadLetters
	scoring    map[scoringKey]*scoringAcc
	headline   *Headline
	// groupsPolled is set by the first SetGroups: before it, no group is not yet "no reader".
	groupsPolled bool
	groups       []GroupLag
	errs         []string
	skipped      int64
	// ends are the calibration changelog's end records by (prefix, run): a stream first seen
	// after its run's end record still shows it.
	ends    map[[2]string]RunEnd
	changed chan struct{}
}

// NewModel returns an empty model for the topic sets under prefix.
func NewModel(prefix string, maxPairs int) *Model {
	return &Model{prefix: prefix, maxPairs: maxPairs, now: time.Now, runs: map[runKey]*runModel{},
		topicsSeen: map[string]*topicCounter{}, dlq: map[dlqKey]*DeadLetters{}, scoring: map[scoringKey]*scoringAcc{}, ends: map[[2]string]RunEnd{}, changed: make(chan struct{})}
}

// Changed returns a channel that is closed at the next change.
func (m *Model) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// bump must be called with mu held after a change.
func (m *Model) bump() {
	m.version++
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Model) run(k runKey) *runModel {
	r, ok := m.runs[k]
	if !ok {
		r = &runModel{key: k, snaps: map[int64]snapInfo{}, accs: map[int64]*stepAcc{}}
		if e, ok := m.ends[[2]string{k.prefix, k.run}]; ok {
			r.end = &e
		}
		m.runs[k] = r
	}
	return r
}

func (r *runModel) acc(step int64) *stepAcc {
	a, ok := r.accs[step]
	if !ok {
		a = &stepAcc{}
		r.accs[step] = a
	}
	return a
}

// view joins the snapshots with what arrived for their steps.
func (r *runModel) view() (steps []Step, fitted []Map) {
	steps, fitted = []Step{}, []Map{}
	prevWeight := 1.0
	for _, v := range slices.Sorted(maps.Keys(r.snaps)) {
		si := r.snaps[v]
		s := si.s
		st := Step{Step: v, FitVersion: s.FitVersion, AnchorWeight: prevWeight, NextAnchorWeight: s.AnchorWeight,
			Pairs: s.Pairs, StepPairs: s.StepPairs, BiasBefore: s.BiasBefore, BiasAfter: s.BiasAfter, SealedAt: si.at}
		prevWeight = s.AnchorWeight
		if d := s.Debias; d != nil {
			shift, share := d.MeanShift, 0.0
			if d.Groups > 0 {
				share = float64(d.Reordered) / float64(d.Groups)
			}
			st.DebiasShift, st.DebiasReordered = &shift, &share
		}
		if g := s.Gate; g != nil {
			gate := *g
			st.Gate = &gate
		}
		if a, ok := r.accs[v]; ok {
			st.Rows, st.AnchorRows, st.MaskedRows = a.rows, a.anchorRows, a.masked
			st.Groups, st.AnchorGroups = a.groups, a.anchorGroups
			if a.pairs > 0 {
				raw, cal := a.rawErr/float64(a.pairs), a.calErr/float64(a.pairs)
				st.RawMAE, st.CalibratedMAE = &raw, &cal
			}
			if !a.lastReward.IsZero() && !a.lastAdvantage.IsZero() && !a.lastReward.After(a.lastAdvantage) {
				ms := float64(a.lastAdvantage.Sub(a.lastReward).Microseconds()) / 1000
				st.LatencyMS = &ms
			}
		}
		steps = append(steps, st)
		// Snapshots carry the breakpoints only every few steps (a fitted map without them is
		// not shown rather than shown as the identity; the follower reads it from Redis).
		if n := len(fitted); (n == 0 || fitted[n-1].FitVersion != s.FitVersion) && (s.FitVersion == 0 || len(s.BreakX) > 0) {
			fitted = append(fitted, Map{Step: v, FitVersion: s.FitVersion, X: orEmpty(s.BreakX), Y: orEmpty(s.BreakY), Space: MapSpaceScore})
		}
	}
	return steps, r.withRedisMaps(fitted)
}

// countTopic must be called with mu held.
func (m *Model) countTopic(topic string, at time.Time) {
	c, ok := m.topicsSeen[topic]
	if !ok {
		c = &topicCounter{}
		m.topicsSeen[topic] = c
	}
	c.records++
	c.times = append(c.times, at)
	cut := 0
	for cut < len(c.times) && at.Sub(c.times[cut]) > RateWindow {
		cut++
	}
	c.times = c.times[cut:]
}

// Count records that a record of topic was read (for throughput) without other content.
func (m *Model) Count(topic string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	m.bump()
}

// Reward records a reward record's timestamp for the step's latency, and whether it is a failure
// record (failure is "<status>: <reason>", "" for a score).
func (m *Model) Reward(topic, prefix, run, stream string, step int64, ts time.Time, failure string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	_, suffix, _ := splitTopic(topic)
	sk := scoringKey{prefix, stageOf[suffix]}
	if m.scoring[sk] == nil {
		m.scoring[sk] = &scoringAcc{}
	}
	m.scoring[sk].add(failure)
	r := m.run(runKey{prefix, run, stream})
	r.seen(ts)
	a := r.acc(step)
	if ts.After(a.lastReward) {
		a.lastReward = ts
	}
	m.bump()
}

// Advantages records one decoded advantages chunk.
func (m *Model) Advantages(topic, prefix string, rows []topics.AdvantageRow, ts time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	for i := range rows {
		row := &rows[i]
		r := m.run(runKey{prefix, row.RunID, row.Stream})
		r.seen(ts)
		a := r.acc(row.Step)
		if ts.After(a.lastAdvantage) {
			a.lastAdvantage = ts
		}
		a.rows++
		if row.Source == topics.SourceAnchor {
			a.anchorRows++
		}
		if !row.Mask {
			a.masked++
		}
		if row.PredictedOK && row.ExecutedOK {
			a.pairs++
			a.rawErr += math.Abs(row.Predicted - row.Executed)
			a.calErr += math.Abs(row.Calibrated - row.Executed)
			r.pairs = append(r.pairs, [3]float64{float64(row.Step), row.Predicted, row.Executed})
		}
	}
	for _, r := range m.runs {
		if over := len(r.pairs) - m.maxPairs; m.maxPairs > 0 && over > 0 {
			r.pairs = slices.Delete(r.pairs, 0, over)
		}
	}
	m.bump()
}

// Snapshot records a committed calibration snapshot: the step is sealed.
func (m *Model) Snapshot(topic, prefix string, s topics.CalibrationSnapshot, ts time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	r := m.run(runKey{prefix, s.RunID, s.Stream})
	r.seen(ts)
	if _, ok := r.snaps[s.Step]; !ok {
		// A repeated snapshot (the changelog re-read after compaction, a repair) keeps the first.
		r.snaps[s.Step] = snapInfo{s: s, at: ts}
	}
	m.bump()
}

// orEmpty is xs, or an empty slice for nil: State's lists are [] in JSON, never null.
func orEmpty[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// DeadLetter counts one dead letter.
func (m *Model) DeadLetter(topic, prefix, stage, reason, errText string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	k := dlqKey{prefix, stage, reason}
	d, ok := m.dlq[k]
	if !ok {
		d = &DeadLetters{Prefix: prefix, Stage: stage, Reason: reason}
		m.dlq[k] = d
	}
	d.Count++
	d.LastError = errText
	m.bump()
}

// Error records a problem to show on the page.
func (m *Model) Error(msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs = append(m.errs, m.now().UTC().Format(time.TimeOnly)+" "+msg)
	if over := len(m.errs) - maxErrors; over > 0 {
		m.errs = m.errs[over:]
	}
	m.bump()
}

// SkippedBatch counts a record batch the follower skipped unread and lists it in Errors.
func (m *Model) SkippedBatch(ref topics.BatchRef) {
	m.Error((&topics.BatchTooLargeError{Ref: ref}).Error() + ": skipped unread")
	m.mu.Lock()
	defer m.mu.Unlock()
	m.skipped++
}

// SetGroups replaces the consumer-group lag table.
func (m *Model) SetGroups(g []GroupLag) {
	m.mu.Lock()
	defer m.mu.Unlock()
	first := !m.groupsPolled
	m.groupsPolled = true
	if !first && slices.Equal(g, m.groups) {
		return
	}
	m.groups = g
	m.bump()
}

// Tick bumps the version while some topic had traffic within RateWindow, so that rates shown as
// records/s fall back to 0 on the page when traffic stops.
func (m *Model) Tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for _, c := range m.topicsSeen {
		if n := len(c.times); n > 0 && now.Sub(c.times[n-1]) <= RateWindow+time.Second {
			m.bump()
			return
		}
	}
}

// RunKeys lists the runs known so far.
func (m *Model) RunKeys() []runKey {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.runs))
}

// State returns a copy of the current state.
func (m *Model) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	st := State{Version: m.version, Updated: now, TopicPrefix: m.prefix,
		Runs: []Run{}, Groups: orEmpty(slices.Clone(m.groups)), Topics: []TopicRate{}, DeadLetters: []DeadLetters{}, Errors: orEmpty(slices.Clone(m.errs)),
		SkippedBatches: m.skipped}
	for _, r := range m.runs {
		steps, maps := r.view()
		run := Run{ID: r.key.id(), Prefix: r.key.prefix, Run: r.key.run, Stream: r.key.stream,
			Steps: steps, Maps: spread(maps, MapsInState), Pairs: orEmpty(slices.Clone(r.pairs)), Redis: r.redis,
			Ended: r.end, LastActivity: r.last, GatedSince: gatedSince(steps)}
		for _, a := range r.accs {
			run.Groups += a.groups
			run.AnchorGroups += a.anchorGroups
		}
		st.Runs = append(st.Runs, run)
	}
	// Newest first: the run an operator just started is on top, not the alphabetically first.
	slices.SortFunc(st.Runs, func(a, b Run) int {
		return cmp.Or(b.LastActivity.Compare(a.LastActivity), cmp.Compare(a.ID, b.ID))
	})
	for name, c := range m.topicsSeen {
		n := 0
		for _, t := range c.times {
			if now.Sub(t) <= RateWindow {
				n++
			}
		}
		_, suffix, _ := splitTopic(name)
		st.Topics = append(st.Topics, TopicRate{Topic: name, Stage: stageOf[suffix], Records: c.records,
			PerSecond: float64(n) / RateWindow.Seconds()})
	}
	sort.Slice(st.Topics, func(i, j int) bool { return st.Topics[i].Topic < st.Topics[j].Topic })
	st.Scoring = m.scoringState()
	st.Headline = m.headline
	st.Wiring = m.wiringState()
	for _, d := range m.dlq {
		st.DeadLetters = append(st.DeadLetters, *d)
	}
	slices.SortFunc(st.DeadLetters, func(a, b DeadLetters) int {
		return cmp.Or(cmp.Compare(a.Prefix, b.Prefix), cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Reason, b.Reason))
	})
	return st
}

// Maps returns every fitted map of the run with the given id, or false.
func (m *Model) Maps(id string) ([]Map, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.runs {
		if r.key.id() == id {
			_, maps := r.view()
			return maps, true
		}
	}
	return nil, false
}

// spread picks at most n maps evenly spread over ms, always the first and the last.
func spread(ms []Map, n int) []Map {
	if len(ms) <= n {
		return orEmpty(slices.Clone(ms))
	}
	out := make([]Map, 0, n)
	for i := range n {
		out = append(out, ms[i*(len(ms)-1)/(n-1)])
	}
	return out
}
