package producers

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wmrl/wmrl/internal/chatapi"
	"github.com/wmrl/wmrl/internal/retry"
	"github.com/wmrl/wmrl/topics"
)

// The two OpenAI-compatible generation APIs.
const (
	APICompletions = "completions"
	APIChat        = "chat"
)

// Prompt is one task prompt; prompts files hold one JSON object per line:
//
//	{"prompt": "Train a classifier on …", "stream": "mle-dojo"}
//
// stream is optional (default: the generator's --stream).
type Prompt struct {
	Prompt string `json:"prompt"`
	Stream string `json:"stream,omitempty"`
}

// LoadPrompts reads a prompts JSONL file strictly: unknown or duplicate fields, an empty prompt
// or an invalid stream fail with the line number.
func LoadPrompts(r io.Reader) ([]Prompt, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), DefaultMaxLineBytes)
	var out []Prompt
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		keys, err := topLevelKeys(b)
		if err != nil {
			return nil, lineErr(line, "%v", err)
		}
		for k := range keys {
			if k != "prompt" && k != "stream" {
				return nil, lineErr(line, "unknown field %q (want prompt, stream)", k)
			}
		}
		var p Prompt
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, lineErr(line, "%v", err)
		}
		if strings.TrimSpace(p.Prompt) == "" {
			return nil, lineErr(line, "prompt is required")
		}
		if p.Stream != "" && !topics.ValidID(p.Stream) {
			return nil, lineErr(line, "stream %q is not a valid id", p.Stream)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("producers: read prompts after line %d: %w", line, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: prompts file has no prompts", ErrConfig)
	}
	return out, nil
}

// OpenAIConfig configures the OpenAI-compatible backend. BaseURL, Model and Prompts are required.
type OpenAIConfig struct {
	// BaseURL is the API root including the version, e.g. http://vllm:8000/v1.
	BaseURL string
	Model   string
	APIKey  string
	// API is APICompletions (POST /completions with the raw prompt) or APIChat (POST
	// /chat/completions with the prompt as the user message, after SystemPrompt). Default chat.
	API          string
	SystemPrompt string
	Prompts      []Prompt
	// GroupSize is G, the completions per prompt (sent as n). Default 8.
	GroupSize int
	// GroupsPerStep is the prompts per step. Default 8. Group j of step s uses prompt
	// (s·GroupsPerStep + j) mod len(Prompts), so a restart at any step samples the same prompts.
	GroupsPerStep int
	// FirstStep and Steps select the steps to generate; Steps must be >= 1.
	FirstStep, Steps int64
	// Temperature and TopP are sent as is (TopP 0 is omitted); MaxTokens 0 is omitted.
	Temperature float64
	TopP        float64
	MaxTokens   int
	// Timeout bounds each request (default 10 min: G long completions take a while); MaxAttempts
	// is the total tries per request (default 4), with the world model's jittered backoff on
	// 429, 5xx, timeouts and connection errors.
	Timeout                 time.Duration
	MaxAttempts             int
	BaseBackoff, MaxBackoff time.Duration
	HTTPClient              *http.Client
	Logger                  *slog.Logger
	// Sleep waits between attempts (default chatapi.Sleep); tests inject a recorder.
	Sleep chatapi.SleepFunc
}

// OpenAI is the Backend over an OpenAI-compatible policy server: each step sends GroupsPerStep
// concurrent requests with n = GroupSize and turns the choices into groups.
type OpenAI struct {
	cfg   OpenAIConfig
	path  string
	api   chatapi.Client
	retry chatapi.Policy
	next  int64
}

// NewOpenAI validates cfg and applies defaults.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.Model == "" {
		return nil, fmt.Errorf("%w: model is required", ErrConfig)
	}
	if len(cfg.Prompts) == 0 {
		return nil, fmt.Errorf("%w: no prompts", ErrConfig)
	}
	cfg.API = cmp.Or(cfg.API, APIChat)
	path := map[string]string{APIChat: "/chat/completions", APICompletions: "/completions"}[cfg.API]
	if path == "" {
		return nil, fmt.Errorf("%w: api %q: want %s or %s", ErrConfig, cfg.API, APIChat, APICompletions)
	}
	cfg.GroupSize = cmp.Or(cfg.GroupSize, 8)
	cfg.GroupsPerStep = cmp.Or(cfg.GroupsPerStep, 8)
	if cfg.GroupSize < 1 || cfg.GroupSize > topics.MaxGroupSize || cfg.GroupsPerStep < 1 || cfg.GroupsPerStep > topics.MaxGroupsPerStep {
		return nil, fmt.Errorf("%w: group size %d / groups per step %d out of range", ErrConfig, cfg.GroupSize, cfg.GroupsPerStep)
	}
	if cfg.Steps < 1 || cfg.FirstStep < 0 {
		return nil, fmt.Errorf("%w: steps %d must be >= 1 and first step %d >= 0", ErrConfig, cfg.Steps, cfg.FirstStep)
	}
	if cfg.Timeout < 0 || cfg.MaxAttempts < 0 || cfg.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: negative timeout, attempts or max tokens", ErrConfig)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Minute)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 4)
	cfg.BaseBackoff = cmp.Or(cfg.BaseBackoff, time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, time.Minute)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	api := chatapi.Client{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, HTTP: cfg.HTTPClient, Timeout: cfg.Timeout, Limit: 256 << 20, Now: time.Now}
	if err := api.Init(cfg.GroupsPerStep); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &OpenAI{
		cfg:  cfg,
		path: path,
		api:  api,
		retry: chatapi.Policy{
			MaxAttempts: cfg.MaxAttempts,
			Backoff:     retry.Backoff{Base: cfg.BaseBackoff, Max: cfg.MaxBackoff},
			Sleep:       cfg.Sleep,
		},
		next: cfg.FirstStep,
	}, nil
}

// Next implements Backend: all groups of the step are requested concurrently, and the step
// fails as a whole if any request fails for good.
func (o *OpenAI) Next(ctx context.Context) (StepBatch, error) {
	if o.next >= o.cfg.FirstStep+o.cfg.Steps {
		return StepBatch{}, io.EOF
	}
	step := o.next
	k := o.cfg.GroupsPerStep
	groups := make([]GroupSpec, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for j := range k {
		wg.Go(func() {
			idx := int((step*int64(k) + int64(j)) % int64(len(o.cfg.Prompts)))
			p := o.cfg.Prompts[idx]
			texts, finish, err := o.sample(ctx, p.Prompt)
			if err != nil {
				errs[j] = fmt.Errorf("step %d group %d (prompt %d): %w", step, j, idx, err)
				return
			}
			g := GroupSpec{Stream: p.Stream, Prompt: p.Prompt}
			for i, t := range texts {
				meta := map[string]string{"prompt_index": strconv.Itoa(idx)}
				if finish[i] != "" {
					meta["finish_reason"] = finish[i]
				}
				g.Rollouts = append(g.Rollouts, RolloutSpec{Artifact: []byte(t), Meta: meta})
			}
			groups[j] = g
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return StepBatch{}, err
	}
	o.next++
	return StepBatch{Step: step, Groups: groups}, nil
}

// sample asks for n = G completions of one prompt, retrying transient failures.
func (o *OpenAI) sample(ctx context.Context, prompt string) ([]string, []string, error) {
	req := chatapi.Request{Model: o.cfg.Model, N: o.cfg.GroupSize, Temperature: o.cfg.Temperature, TopP: o.cfg.TopP, MaxTokens: o.cfg.MaxTokens}
	if o.cfg.API == APICompletions {
		req.Prompt = prompt
	} else {
		req.Messages = chatapi.Chat(o.cfg.SystemPrompt, prompt)
	}
	var texts, finish []string
	var lastErr error
	n, err := o.retry.Do(ctx, func(int) chatapi.Attempt {
		data, f := o.api.Post(ctx, o.path, req)
		if f != nil {
			lastErr = f
			return f.Attempt
		}
		texts, finish, lastErr = o.choices(data)
		return chatapi.Attempt{}
	}, func(n int, delay time.Duration) {
		o.cfg.Logger.Warn("policy server request failed; retrying", "attempt", n, "delay", delay, "err", lastErr)
	})
	if err != nil {
		return nil, nil, err
	}
	if lastErr != nil {
		return nil, nil, fmt.Errorf("%w after %d attempt(s): %w", ErrPolicyServer, n, lastErr)
	}
	return texts, finish, nil
}

// choices extracts exactly G completions ordered by their index.
func (o *OpenAI) choices(data []byte) ([]string, []string, error) {
	var r chatapi.Reply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, nil, fmt.Errorf("reply is not a completions response: %w", err)
	}
	g := o.cfg.GroupSize
	if len(r.Choices) != g {
		return nil, nil, fmt.Errorf("reply has %d choices, want n=%d (does the server support n?)", len(r.Choices), g)
	}
	texts, finish := make([]string, g), make([]string, g)
	seen := make([]bool, g)
	for pos, c := range r.Choices {
		i := pos
		if c.Index != nil {
			i = *c.Index
		}
		if i < 0 || i >= g || seen[i] {
			return nil, nil, fmt.Errorf("choice index %d duplicated or outside 0..%d", i, g-1)
		}
		seen[i] = true
		switch {
		case o.cfg.API == APICompletions && c.Text != nil:
			texts[i] = *c.Text
		case o.cfg.API == APIChat && c.Message != nil:
			if c.Message.Content != nil {
				texts[i] = *c.Message.Content
			}
		default:
			return nil, nil, fmt.Errorf("choice %d has no %s", i, map[string]string{APIChat: "message", APICompletions: "text"}[o.cfg.API])
		}
		finish[i] = c.FinishReason
	}
	return texts, finish, nil
}
