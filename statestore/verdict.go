package statestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// EndVerdict is `wmrl correct`'s judgement of one end-of-run request, recorded in Redis as soon
// as correct judges it so that `wmrl runs end` can tell its user whether the end took effect.
// The judgement is a function of the steps partition's order alone, so a crash before the
// dead letter or the end commits re-judges it the same way.
type EndVerdict struct {
	// Request names the request on the run-control topic, as topics.EndRequestID.
	Request  string `json:"request"`
	LastStep int64  `json:"last_step"`
	// Accepted: the end is buffered (the run retires once its last step is sealed) or the run
	// already ended there. Otherwise the record was dead-lettered with Reason, and Detail says why.
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// VerdictTTL is how long a run's verdicts stay in Redis after the last one was recorded.
const VerdictTTL = 24 * time.Hour

// verdictsName is the run-level key of the verdicts hash; outside runKeysPattern, so a request
// for a run correct never saw does not make `wmrl runs list` show it.
const verdictsName = "verdicts"

// VerdictsKey is the hash of run's end verdicts, one field per request.
func (s *Store) VerdictsKey(run string) string { return s.runKey(run, verdictsName) }

// RecordEndVerdicts records vs for run (one HSET, then PEXPIRE VerdictTTL).
func (s *Store) RecordEndVerdicts(ctx context.Context, run string, vs []EndVerdict) error {
	fields := make([]any, 0, 2*len(vs))
	for _, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("redis end verdict of run %s: %w", run, err)
		}
		fields = append(fields, v.Request, b)
	}
	p := s.rdb.TxPipeline()
	p.HSet(ctx, s.VerdictsKey(run), fields...)
	p.PExpire(ctx, s.VerdictsKey(run), VerdictTTL)
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("redis end verdicts of run %s: %w", run, s.failed(ctx, err))
	}
	return nil
}

// ReadEndVerdict returns correct's verdict on request for run, or nil while there is none.
func (s *Store) ReadEndVerdict(ctx context.Context, run, request string) (*EndVerdict, error) {
	b, err := s.rdb.HGet(ctx, s.VerdictsKey(run), request).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redis end verdict of run %s: %w", run, s.failed(ctx, err))
	}
	var v EndVerdict
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("redis end verdict of run %s request %s: %w", run, request, err)
	}
	return &v, nil
}
