package worldmodel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// ProbeTimeout bounds Probe (a caller's earlier deadline wins).
const ProbeTimeout = 10 * time.Second

// Probe checks at start-up that --base-url reaches an OpenAI-compatible server, without scoring
// anything: GET <base-url>/models, and when that path is unknown (404; not every server lists
// models) a POST of an empty body to <base-url>/chat/completions, which a server validates and
// rejects (400/422) but a wrong path answers 404. Without it a stage pointed at a dead or wrong
// URL starts, looks ready and records every rollout as a failure. The error is one line naming
// the option to fix.
func (s *OpenAIScorer) Probe(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > ProbeTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ProbeTimeout)
		defer cancel()
	}
	base := strings.TrimRight(s.cfg.BaseURL, "/")
	code, err := s.probeRequest(ctx, http.MethodGet, "/models", nil)
	if err == nil && code == http.StatusNotFound {
		code, err = s.probeRequest(ctx, http.MethodPost, "/chat/completions", strings.NewReader("{}"))
		if err == nil && code == http.StatusNotFound {
			return fmt.Errorf("%w: --base-url %s: neither %s/models nor %s/chat/completions exists (404): does the URL end in the API version, e.g. /v1?",
				ErrUnreachable, s.cfg.BaseURL, base, base)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: --base-url %s: %s: %w", ErrUnreachable, s.cfg.BaseURL, transportHint(err), err)
	}
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		return fmt.Errorf("%w: --base-url %s answers %d: the server rejects the API key (set %s or %s)",
			ErrUnreachable, s.cfg.BaseURL, code, EnvAPIKey, EnvOpenAIAPIKey)
	}
	return nil
}

// probeRequest sends one request and returns its status code.
func (s *OpenAIScorer) probeRequest(ctx context.Context, method, path string, body io.Reader) (int, error) {
	resp, err := s.api.Do(ctx, method, path, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, nil
}

// transportHint says in operator terms what a failed probe request most likely means.
func transportHint(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: check the host and port and that the server runs"
	case errors.As(err, &dns):
		return "the host name does not resolve: check it for typos"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time: check the host, the port and any firewall"
	}
	return "the server cannot be reached"
}
