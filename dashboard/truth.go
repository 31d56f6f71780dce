package dashboard

import (
	"fmt"
	"time"

	"github.com/wmrl/wmrl/topics"
)

// RunEnd is a run's end as the calibration changelog records it (topics.CalibrationEnd).
type RunEnd struct {
	LastStep int64     `json:"last_step"`
	At       time.Time `json:"at"`
	// Reason is "marker" (an end request: runs end, generate, close_run) or "idle" (correct's
	// --run-idle-timeout).
	Reason string `json:"reason"`
}

// RedisHead is the correction consumer's head hash for a run, read from Redis.
type RedisHead struct {
	Prefix       string  `json:"prefix"`
	SealedStep   int64   `json:"sealed_step"`
	FitVersion   uint64  `json:"fit_version"`
	AnchorWeight float64 `json:"anchor_weight"`
	Pairs        int     `json:"pairs"`
	Digest       string  `json:"digest"`
	// State is HeadOK, HeadPending, HeadLost, HeadGone or HeadError; Error says it in words
	// when it is not HeadOK.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// The states of RedisHead.State.
const (
	// HeadOK: the head was read.
	HeadOK = "ok"
	// HeadPending: Redis holds no head and the topics show no step sealed long enough ago for
	// one to be due (the head is written right after the commit).
	HeadPending = "pending"
	// HeadLost: Redis holds no head although the run has sealed steps (or Redis held one at an
	// earlier poll): Redis lost it (a restart without persistence, a flush). A running
	// `wmrl correct` rewrites the whole state at the run's next sealed step.
	HeadLost = "lost"
	// HeadGone: the run ended and Redis holds no head: its keys expired after correct's
	// --ended-run-retention (or Redis lost them; nothing rewrites an ended run's state).
	HeadGone = "gone"
	// HeadError: reading Redis failed; Error says how.
	HeadError = "error"
)

// headGrace is how long after a step's snapshot a missing head is still "being written".
const headGrace = 5 * time.Second

func (r *runModel) seen(ts time.Time) {
	if ts.After(r.last) {
		r.last = ts
	}
}

// End records a calibration changelog end record: every stream of the run in that topic set is
// ended, including streams seen later.
func (m *Model) End(topic, prefix string, e topics.CalibrationEnd) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	end := RunEnd{LastStep: e.LastStep, At: e.EndedAt, Reason: e.Reason}
	m.ends[[2]string{prefix, e.RunID}] = end
	for k, r := range m.runs {
		if k.prefix == prefix && k.run == e.RunID {
			r.end = &end
			r.seen(e.EndedAt)
		}
	}
	m.bump()
}

// Manifest counts a step manifest's groups and anchor groups per stream: the same manifests
// `wmrl generate` counts in its report, so a step whose anchor rollouts were never scored by
// the world model still shows that its anchor groups ran.
func (m *Model) Manifest(topic, prefix string, man topics.StepManifest, ts time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countTopic(topic, m.now())
	if man.EndOfRun {
		m.bump()
		return
	}
	for _, g := range man.Groups {
		r := m.run(runKey{prefix, man.RunID, g.Stream})
		r.seen(ts)
		a := r.acc(man.Step)
		a.groups++
		if g.Anchor {
			a.anchorGroups++
		}
	}
	m.bump()
}

// SetRedis sets a run's Redis head.
func (m *Model) SetRedis(k runKey, h *RedisHead) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[k]
	if ok && h.State == HeadOK {
		r.headSeen = true
	}
	if !ok || (r.redis != nil && *r.redis == *h) {
		return
	}
	r.redis = h
	m.bump()
}

// RedisMissing sets the head of a run Redis holds nothing of, telling apart a head not written
// yet, one Redis lost and an ended run's expired keys.
func (m *Model) RedisMissing(k runKey, redisPrefix string) {
	m.mu.Lock()
	r, ok := m.runs[k]
	if !ok {
		m.mu.Unlock()
		return
	}
	h := &RedisHead{Prefix: redisPrefix, SealedStep: -1}
	due := false
	for _, si := range r.snaps {
		if m.now().Sub(si.at) > headGrace {
			due = true
			break
		}
	}
	switch {
	case r.end != nil:
		h.State, h.Error = HeadGone, fmt.Sprintf("run ended (%s, after step %d): Redis no longer holds its head (expired after correct's --ended-run-retention, or lost)", r.end.Reason, r.end.LastStep)
	case r.headSeen || due:
		h.State, h.Error = HeadLost, fmt.Sprintf("Redis lost this run's head; rebuilding (wmrl correct rewrites it at the run's next sealed step; if every run says this, check that --redis-prefix %s is correct's)", redisPrefix)
	default:
		h.State, h.Error = HeadPending, "no head record yet"
	}
	m.mu.Unlock()
	m.SetRedis(k, h)
}

// unscoredState must be called with mu held. It names each topic set whose rollouts nothing has
// scored: no reward record on its predicted and executed topics, and (once the groups were
// polled) no consumer group with live members reads its rollouts topic: no `wmrl worldmodel` and
// no `wmrl sandbox` of that prefix runs, so no step can seal. A set whose scorers ran and stopped
// (a finished demo) has reward records and is only named under Wiring.
func (m *Model) unscoredState() (prefixes []string, rollouts map[string]int64) {
	rollouts = map[string]int64{}
	if !m.groupsPolled {
		return nil, rollouts
	}
	read := map[string]bool{}
	for _, g := range m.groups {
		if g.Members > 0 && g.Error == "" {
			read[g.Topic] = true
		}
	}
	for name, c := range m.topicsSeen {
		prefix, suffix, ok := splitTopic(name)
		if !ok || suffix != topics.SuffixRollouts || c.records == 0 || read[name] {
			continue
		}
		if p, e := m.topicsSeen[prefix+topics.SuffixPredicted], m.topicsSeen[prefix+topics.SuffixExecuted]; (p != nil && p.records > 0) || (e != nil && e.records > 0) {
			continue
		}
		prefixes = append(prefixes, prefix)
		rollouts[prefix] = c.records
	}
	return prefixes, rollouts
}
