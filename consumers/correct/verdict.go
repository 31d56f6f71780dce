package correct

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// Verdicts on end-of-run records. Every end-of-run record correct judges — a request on the
// run-control topic refused before relaying, a relayed request read back on the steps topic, an
// idle end — yields a verdict: accepted (buffered until the last step is sealed, or the run
// already ended there) or refused (dead-lettered, or for a step before an ended run's last
// step dropped as a sealed re-read) with the dead-letter reason. The consumer logs each (a
// refusal at warn) and records those of requests in Redis (statestore.EndVerdict) right away,
// where `wmrl runs end` waits for its own: the verdict depends on the steps partition's order
// alone, so recording it before the dead letter or the end commits cannot contradict a redo.
// Runs ending (retired) are logged after the commit that records their end (txn.go).

// endVerdict is one judged end-of-run record.
type endVerdict struct {
	run  string
	idle bool
	statestore.EndVerdict
}

// judgedEnd notes the verdict on the end-of-run record rec of the steps topic (err nil: accepted).
func (e *engine) judgedEnd(rec *kgo.Record, m topics.StepManifest, err error) {
	req, _ := topics.HeaderValue(rec.Headers, topics.HeaderEndRequest)
	e.verdicts = append(e.verdicts, newVerdict(m.RunID, req, m.Step, endReason(rec) == topics.EndReasonIdle, err))
}

// judgedRequest notes the refusal of a request of the run-control topic before it was relayed;
// the run is the record's key (a request keyed by another run than it names is refused too).
func (e *engine) judgedRequest(rec *kgo.Record, last int64, err error) {
	run := string(rec.Key)
	if !topics.ValidID(run) {
		return // no run to file it under; the dead letter says why
	}
	e.verdicts = append(e.verdicts, newVerdict(run, topics.EndRequestID(rec.Topic, rec.Partition, rec.Offset), last, false, err))
}

func newVerdict(run, req string, last int64, idle bool, err error) endVerdict {
	v := endVerdict{run: run, idle: idle, EndVerdict: statestore.EndVerdict{Request: req, LastStep: last, Accepted: err == nil}}
	if err != nil {
		v.Reason, v.Detail = topics.Reason(err), err.Error()
	}
	return v
}

// refuseEnd dead-letters the end-of-run record rec and notes the refusal.
func (e *engine) refuseEnd(rec *kgo.Record, m topics.StepManifest, err error) {
	e.deadLetter(rec, kindStep, err)
	e.judgedEnd(rec, m, err)
}

// judgeEndOfEnded notes the verdict on an end-of-run record of a retired run (endedRecord
// handles the record): its own last step is accepted again; a later one is dead-lettered
// run_ended; an earlier one is dropped as a sealed re-read and ends nothing.
func (e *engine) judgeEndOfEnded(rec *kgo.Record, m topics.StepManifest) {
	er, ok := e.ended[m.RunID]
	if !ok {
		return
	}
	switch last := er.end.LastStep; {
	case m.Step == last:
		e.judgedEnd(rec, m, nil)
	case m.Step > last:
		e.judgedEnd(rec, m, &runEndedError{run: m.RunID, step: m.Step, last: last})
	default:
		e.judgedEnd(rec, m, conflict("run %s already ended with step %d; this end-of-run record names step %d", m.RunID, last, m.Step))
	}
}

// takeVerdicts returns the verdicts noted since the last call.
func (e *engine) takeVerdicts() []endVerdict {
	out := e.verdicts
	e.verdicts = nil
	return out
}

// reportVerdicts logs each verdict and records those of requests in Redis on the Redis writer's
// goroutine (after the write in flight).
func (c *Consumer) reportVerdicts(vs []endVerdict) {
	if len(vs) == 0 {
		return
	}
	byRun := map[string][]statestore.EndVerdict{}
	var runs []string
	for _, v := range vs {
		reason := topics.EndReasonMarker
		if v.idle {
			reason = topics.EndReasonIdle
		}
		args := []any{"run", v.run, "last_step", v.LastStep, "end_reason", reason}
		if v.Request != "" {
			args = append(args, "request", v.Request)
		}
		if v.Accepted {
			c.log.Info("end-of-run record accepted: the run ends once its last step is sealed", args...)
		} else {
			c.log.Warn("end-of-run record refused", append(args, "reason", v.Reason, "err", v.Detail)...)
		}
		if v.Request == "" {
			continue
		}
		if byRun[v.run] == nil {
			runs = append(runs, v.run)
		}
		byRun[v.run] = append(byRun[v.run], v.EndVerdict)
	}
	if len(runs) == 0 {
		return
	}
	c.waitRedis()
	ch := make(chan struct{})
	c.redisDone = ch
	go func() {
		defer close(ch)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, run := range runs {
			if err := c.store.RecordEndVerdicts(ctx, run, byRun[run]); err != nil {
				c.m.redisErrors.Inc()
				c.log.Warn("redis: recording end-of-run verdicts failed ('wmrl runs end' waits in vain; the dead-letter topic has refusals)", "run", run, "err", err)
			}
		}
	}()
}

// logEnds logs the runs whose end a committed transaction recorded.
func (c *Consumer) logEnds(ends []topics.CalibrationEnd) {
	for _, end := range ends {
		c.log.Info("run ended", "run", end.RunID, "last_step", end.LastStep, "end_reason", end.Reason, "ended_at", end.EndedAt)
	}
}
