package worldmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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
//
// When the model list answers, --model must be on it: a misspelt model name otherwise turns
// every rollout into a failure record (the server answers 404 "model not found" per request).
// A list that does not parse, or is empty, cannot settle it and is only warned about.
func (s *OpenAIScorer) Probe(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > ProbeTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ProbeTimeout)
		defer cancel()
	}
	base := strings.TrimRight(s.cfg.BaseURL, "/")
	code, body, err := s.probeRequest(ctx, http.MethodGet, "/models", nil)
	if err == nil && code == http.StatusOK {
		return s.checkModel(body)
	}
	if err == nil && code == http.StatusNotFound {
		code, _, err = s.probeRequest(ctx, http.MethodPost, "/chat/completions", strings.NewReader("{}"))
		if err == nil && code == http.StatusNotFound {
			return fmt.Errorf("%w: --base-url %s: neither %s/models nor %s/chat/completions exists (404): does the URL end in the API version, e.g. /v1?",
				ErrUnreachable, s.cfg.BaseURL, base, base)
		}
		if err == nil && code != http.StatusUnauthorized && code != http.StatusForbidden {
			s.cfg.Logger.Warn("the world model server lists no models (GET /models: 404): --model is not checked", "base_url", s.cfg.BaseURL, "model", s.cfg.Model)
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

// maxModelList bounds the model list Probe reads.
const maxModelList = 1 << 20

// probeRequest sends one request and returns its status code and the start of its body.
func (s *OpenAIScorer) probeRequest(ctx context.Context, method, path string, body io.Reader) (int, []byte, error) {
	resp, err := s.api.Do(ctx, method, path, body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxModelList))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// checkModel requires --model on the server's model list (OpenAI's {"data":[{"id":…}]}).
func (s *OpenAIScorer) checkModel(body []byte) error {
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Data) == 0 {
		why := "an empty list"
		if err != nil {
			why = "not an OpenAI model list: " + err.Error()
		}
		s.cfg.Logger.Warn("cannot check --model against the world model server's model list", "base_url", s.cfg.BaseURL, "model", s.cfg.Model, "models", why)
		return nil
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID == s.cfg.Model {
			return nil
		}
		ids = append(ids, strconv.Quote(m.ID))
	}
	const shown = 20
	more := ""
	if len(ids) > shown {
		more = fmt.Sprintf(" and %d more", len(ids)-shown)
		ids = ids[:shown]
	}
	return fmt.Errorf("%w: --model %q is not served by --base-url %s: it serves %s%s", ErrUnreachable, s.cfg.Model, s.cfg.BaseURL, strings.Join(ids, ", "), more)
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
