package worldmodel

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"text/template"
	"time"

	"github.com/wmrl/wmrl/internal/chatapi"
	"github.com/wmrl/wmrl/internal/retry"
)

// DefaultPromptTemplate asks for a JSON score in the configured range. It is a text/template
// over Input with the helper functions documented on OpenAIConfig.PromptTemplate.
const DefaultPromptTemplate = `You are a world model for automated research agents. You predict the score that actually executing a candidate solution would achieve, without executing it.

Task:
{{.Prompt}}

Candidate solution:
{{if .Artifact}}{{text .Artifact | truncate 32768}}{{else if .ArtifactURI}}(stored at {{.ArtifactURI}}; not inlined){{else}}(empty){{end}}

Predict the execution score as a number between {{scoreMin}} (worst) and {{scoreMax}} (best).
Reply with JSON only, in exactly this form: {"score": <number>}`

// Defaults applied by NewOpenAIScorer to zero-valued fields.
const (
	DefaultTimeout             = 60 * time.Second
	DefaultMaxAttempts         = 4
	DefaultBaseBackoff         = 500 * time.Millisecond
	DefaultMaxBackoff          = 30 * time.Second
	DefaultMaxIdleConnsPerHost = 64
	DefaultMaxResponseBytes    = 4 << 20
	// DefaultStallAfter is the stage's default --stall-after: scoring requests in flight with no
	// answer for this long make it warn and fail /healthz/scoring. A request's own timeout
	// (DefaultTimeout, per attempt, times DefaultMaxAttempts with backoff) is far longer, so a
	// judge that accepts requests and never answers would otherwise stay silent for minutes.
	DefaultStallAfter = 10 * time.Second
)

// OpenAIConfig configures an OpenAIScorer. Zero-valued fields take the defaults above.
type OpenAIConfig struct {
	// BaseURL is the API root including the version, e.g. http://host:8000/v1; requests go to
	// BaseURL + "/chat/completions".
	BaseURL string
	// Model is the served model name sent in every request.
	Model string
	// APIKey, when set, is sent as a Bearer token. The CLI fills it from WMRL_WM_API_KEY or
	// OPENAI_API_KEY; keeping it a field lets tests and embedders avoid the environment.
	APIKey string
	// SystemPrompt, when set, is sent as a system message before the user message.
	SystemPrompt string
	// PromptTemplate renders the user message from an Input (text/template syntax, missing Meta
	// keys render empty). Besides the built-ins it may call: text (bytes → valid UTF-8 string),
	// truncate N (keep the first N bytes, marking the cut), json (JSON-quote a value), scoreMin
	// and scoreMax. Empty selects DefaultPromptTemplate.
	PromptTemplate string
	// Temperature is always sent; the default 0 makes scoring as repeatable as the server allows.
	Temperature float64
	// MaxTokens caps the reply length; 0 omits the field and leaves it to the server.
	MaxTokens int
	// Timeout bounds each request, from connecting to reading the last byte of the body.
	Timeout time.Duration
	// MaxAttempts is the total number of requests per input, first try included.
	MaxAttempts int
	// BaseBackoff and MaxBackoff shape the jittered exponential backoff (see retry.Backoff). MaxBackoff
	// also caps a server's Retry-After.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	// ScoreMin and ScoreMax bound valid scores; both zero means [0, 1].
	ScoreMin, ScoreMax float64
	// HTTPClient, when set, is used as is; its transport must allow at least as many idle
	// connections per host as there are concurrent Score calls, or reuse will cap throughput.
	HTTPClient *http.Client
	// MaxIdleConnsPerHost sizes the default client's connection pool; set it ≥ the concurrency.
	MaxIdleConnsPerHost int
	// MaxResponseBytes bounds a reply body; larger replies are errors.
	MaxResponseBytes int64
	// Sleep waits between attempts. Default: chatapi.Sleep.
	Sleep chatapi.SleepFunc
	// Now is the clock used to interpret Retry-After dates. Default: time.Now.
	Now func() time.Time
	// Logger receives a debug line per retry. Default: slog.Default().
	Logger *slog.Logger
}

// OpenAIScorer scores inputs by asking an OpenAI-compatible chat-completions endpoint. It is safe
// for concurrent use. It is a prometheus.Collector of its request metrics (wmrl_worldmodel_retries_total,
// wmrl_worldmodel_request_duration_seconds, wmrl_worldmodel_score_parse_failures_total), which
// NewStage registers with the stage's registry.
type OpenAIScorer struct {
	cfg     OpenAIConfig
	tmpl    *template.Template
	api     chatapi.Client
	retry   chatapi.Policy
	metrics *scorerMetrics
}

// NewOpenAIScorer validates cfg, applies defaults and parses the prompt template.
func NewOpenAIScorer(cfg OpenAIConfig) (*OpenAIScorer, error) {
	var err error
	if cfg.Model == "" {
		return nil, fmt.Errorf("%w: model is required", ErrInvalidConfig)
	}
	if cfg.ScoreMin, cfg.ScoreMax, err = scoreRange(cfg.ScoreMin, cfg.ScoreMax); err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 || cfg.MaxAttempts < 0 || cfg.BaseBackoff < 0 || cfg.MaxBackoff < 0 ||
		cfg.MaxTokens < 0 || cfg.MaxIdleConnsPerHost < 0 || cfg.MaxResponseBytes < 0 {
		return nil, fmt.Errorf("%w: negative timeout, attempts, backoff, tokens or limits", ErrInvalidConfig)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.BaseBackoff = cmp.Or(cfg.BaseBackoff, DefaultBaseBackoff)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, DefaultMaxBackoff)
	if cfg.BaseBackoff > cfg.MaxBackoff {
		return nil, fmt.Errorf("%w: base backoff %v exceeds max backoff %v", ErrInvalidConfig, cfg.BaseBackoff, cfg.MaxBackoff)
	}
	cfg.MaxIdleConnsPerHost = cmp.Or(cfg.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost)
	cfg.MaxResponseBytes = cmp.Or(cfg.MaxResponseBytes, DefaultMaxResponseBytes)
	cfg.PromptTemplate = cmp.Or(cfg.PromptTemplate, DefaultPromptTemplate)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())

	lo, hi := cfg.ScoreMin, cfg.ScoreMax
	tmpl, err := template.New("prompt").Option("missingkey=zero").Funcs(template.FuncMap{
		"text":     func(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") },
		"truncate": truncate,
		"json":     jsonQuote,
		"scoreMin": func() float64 { return lo },
		"scoreMax": func() float64 { return hi },
	}).Parse(cfg.PromptTemplate)
	if err != nil {
		return nil, fmt.Errorf("%w: prompt template: %w", ErrInvalidConfig, err)
	}
	// A dry run catches templates that fail on every input (a wrong index type, a bad call)
	// at start-up instead of as one error record per rollout.
	if err := tmpl.Execute(io.Discard, sampleInput); err != nil {
		return nil, fmt.Errorf("%w: prompt template fails on a sample input: %w", ErrInvalidConfig, err)
	}

	api := chatapi.Client{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, HTTP: cfg.HTTPClient, Timeout: cfg.Timeout, Limit: cfg.MaxResponseBytes, Now: cfg.Now}
	if err := api.Init(cfg.MaxIdleConnsPerHost); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	m := newScorerMetrics()
	return &OpenAIScorer{
		cfg:  cfg,
		tmpl: tmpl,
		api:  api,
		retry: chatapi.Policy{
			MaxAttempts: cfg.MaxAttempts,
			Backoff:     retry.Backoff{Base: cfg.BaseBackoff, Max: cfg.MaxBackoff},
			Sleep:       cfg.Sleep,
			Observe:     func(reason string, _ time.Duration) { m.retries.WithLabelValues(reason).Inc() },
		},
		metrics: m,
	}, nil
}

// sampleInput has every field set so the template dry run walks the common branches.
var sampleInput = Input{
	RunID: "run", GroupID: "group", RolloutID: "rollout", Stream: "main", Step: 1,
	Prompt: "task", Artifact: []byte("artifact"), ArtifactURI: "file:///artifact",
	Meta: map[string]string{"key": "value"},
}

// API key environment variables, in order of precedence.
const (
	EnvAPIKey       = "WMRL_WM_API_KEY"
	EnvOpenAIAPIKey = "OPENAI_API_KEY"
)

// APIKeyFromEnv returns the world-model API key from WMRL_WM_API_KEY, falling back to
// OPENAI_API_KEY, using getenv (os.Getenv in the CLI). A wmrl-specific variable comes first so a
// shell that also talks to OpenAI does not leak that key to a self-hosted server.
func APIKeyFromEnv(getenv func(string) string) string {
	if k := getenv(EnvAPIKey); k != "" {
		return k
	}
	return getenv(EnvOpenAIAPIKey)
}

// Score implements Scorer: render the prompt, POST it, parse and validate the reply, retrying
// transient failures (429, 5xx, per-request timeouts, connection errors). When attempts run out
// the status follows the last failure: StatusTimeout if it timed out, else StatusError.
func (s *OpenAIScorer) Score(ctx context.Context, in Input) (Result, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("worldmodel: score rollout %q: %w", in.RolloutID, context.Cause(ctx))
	}
	req, err := s.request(in)
	if err != nil {
		return Result{Status: StatusError, Reason: limitReason(err.Error()), Latency: time.Since(start)}, nil
	}
	var o outcome
	n, err := s.retry.Do(ctx, func(int) chatapi.Attempt {
		o = s.attempt(ctx, req)
		return o.Attempt
	}, func(n int, delay time.Duration) {
		s.cfg.Logger.DebugContext(ctx, "worldmodel: retrying", "rollout", in.RolloutID,
			"attempt", n, "delay", delay, "reason", o.reason)
	})
	if err != nil {
		return Result{Attempts: n, Latency: time.Since(start)},
			fmt.Errorf("worldmodel: score rollout %q: %w", in.RolloutID, err)
	}
	res := Result{Score: o.score, Status: o.status, Reason: o.reason, Attempts: n, Latency: time.Since(start)}
	if o.Retry {
		res.Reason = fmt.Sprintf("gave up after %d attempts: %s", n, o.reason)
	}
	res.Reason = limitReason(res.Reason)
	return res, nil
}

// request renders the prompt once per input; retries resend the same request.
func (s *OpenAIScorer) request(in Input) (chatapi.Request, error) {
	var prompt strings.Builder
	if err := s.tmpl.Execute(&prompt, in); err != nil {
		return chatapi.Request{}, fmt.Errorf("render prompt: %w", err)
	}
	return chatapi.Request{Model: s.cfg.Model, Messages: chatapi.Chat(s.cfg.SystemPrompt, prompt.String()),
		Temperature: s.cfg.Temperature, MaxTokens: s.cfg.MaxTokens, N: 1}, nil
}

// outcome is the classified result of one HTTP attempt; Attempt is what the retry loop hears.
type outcome struct {
	score  float64
	status Status
	reason string
	chatapi.Attempt
}

func (s *OpenAIScorer) attempt(ctx context.Context, req chatapi.Request) outcome {
	start := time.Now()
	defer func() { s.metrics.duration.Observe(time.Since(start).Seconds()) }()
	data, f := s.api.Post(ctx, "/chat/completions", req)
	if f != nil {
		o := outcome{status: StatusError, reason: f.Msg, Attempt: f.Attempt}
		if f.Reason == chatapi.ReasonTimeout {
			o.status = StatusTimeout
		}
		return o
	}
	content, finish, err := replyContent(data)
	if err != nil {
		return outcome{status: StatusError, reason: err.Error()}
	}
	v, err := ParseScore(content)
	if err != nil {
		s.metrics.parseFailures.Inc()
		reason := fmt.Sprintf("%v; reply: %q", err, excerpt(content, 200))
		if finish != "" && finish != "stop" {
			reason += fmt.Sprintf(" (finish_reason %q)", finish)
		}
		return outcome{status: StatusInvalid, reason: reason}
	}
	score, status, reason := checkRange(v, s.cfg.ScoreMin, s.cfg.ScoreMax)
	return outcome{score: score, status: status, reason: reason}
}

// replyContent extracts the first choice's message content and finish reason from a
// chat-completions body. Null or empty content is not an error here: the model answered with
// nothing, which the parser reports as an invalid reply.
func replyContent(data []byte) (content, finishReason string, err error) {
	var r chatapi.Reply
	if err := json.Unmarshal(data, &r); err != nil {
		return "", "", fmt.Errorf("decode response: %w; body: %s", err, excerpt(string(data), 200))
	}
	if r.Error != nil {
		return "", "", fmt.Errorf("server error in response: %s", excerpt(r.Error.Message, 300))
	}
	if len(r.Choices) == 0 {
		return "", "", fmt.Errorf("response has no choices; body: %s", excerpt(string(data), 200))
	}
	c := r.Choices[0]
	if c.Message != nil && c.Message.Content != nil {
		content = *c.Message.Content
	}
	return content, c.FinishReason, nil
}

// truncate keeps the first n bytes of s on a rune boundary and says how much was cut, so the
// model knows it is looking at a prefix.
func truncate(n int, s string) string {
	if n < 0 || len(s) <= n {
		return s
	}
	p := runePrefix(s, n)
	return fmt.Sprintf("%s\n[… %d more bytes truncated]", p, len(s)-len(p))
}

func jsonQuote(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
