package producers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// policyServer is an OpenAI-compatible mock: it answers n completions "<prompt>#<i>", in reverse
// index order so the backend must sort by index. fail[k] makes the k-th request (1-based) return
// that status.
type policyServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []map[string]any
	paths    []string
	calls    atomic.Int64
	fail     map[int64]int
}

func newPolicyServer(t *testing.T, fail map[int64]int) *policyServer {
	ps := &policyServer{fail: fail}
	ps.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := ps.calls.Add(1)
		var req map[string]any
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		ps.mu.Lock()
		ps.requests = append(ps.requests, req)
		ps.paths = append(ps.paths, r.URL.Path+" "+r.Header.Get("Authorization"))
		ps.mu.Unlock()
		if code := ps.fail[k]; code != 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error": "nope"}`, code)
			return
		}
		prompt, _ := req["prompt"].(string)
		if msgs, ok := req["messages"].([]any); ok {
			prompt = msgs[len(msgs)-1].(map[string]any)["content"].(string)
		}
		n := int(req["n"].(float64))
		var choices []string
		for i := n - 1; i >= 0; i-- {
			text := fmt.Sprintf("%s#%d", prompt, i)
			if strings.HasSuffix(r.URL.Path, "/chat/completions") {
				choices = append(choices, fmt.Sprintf(`{"index": %d, "message": {"role": "assistant", "content": %q}, "finish_reason": "stop"}`, i, text))
			} else {
				choices = append(choices, fmt.Sprintf(`{"index": %d, "text": %q, "finish_reason": "length"}`, i, text))
			}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices": [%s]}`, strings.Join(choices, ","))
	}))
	t.Cleanup(ps.Close)
	return ps
}

func noSleep(context.Context, time.Duration) error { return nil }

func TestOpenAIBackend(t *testing.T) {
	for _, api := range []string{APIChat, APICompletions} {
		t.Run(api, func(t *testing.T) {
			ps := newPolicyServer(t, nil)
			b, err := NewOpenAI(OpenAIConfig{
				BaseURL: ps.URL + "/v1", Model: "policy", APIKey: "k", API: api, SystemPrompt: "be brief",
				Prompts:   []Prompt{{Prompt: "p0"}, {Prompt: "p1", Stream: "s1"}, {Prompt: "p2"}},
				GroupSize: 3, GroupsPerStep: 2, FirstStep: 4, Steps: 2, Temperature: 0.7, MaxTokens: 64, Sleep: noSleep,
			})
			if err != nil {
				t.Fatal(err)
			}
			steps, err := drain(t, b)
			if err != nil {
				t.Fatal(err)
			}
			if len(steps) != 2 || steps[0].Step != 4 || steps[1].Step != 5 {
				t.Fatalf("steps %+v", steps)
			}
			// Step s, group j uses prompt (s·2 + j) mod 3: step 4 → p2, p0; step 5 → p1, p2.
			want := [][]string{{"p2", "p0"}, {"p1", "p2"}}
			for si, sb := range steps {
				for j, g := range sb.Groups {
					if g.Prompt != want[si][j] || len(g.Rollouts) != 3 || g.GroupID != "" {
						t.Fatalf("step %d group %d: %+v", sb.Step, j, g)
					}
					if g.Prompt == "p1" && g.Stream != "s1" {
						t.Errorf("stream of p1 = %q", g.Stream)
					}
					for i, r := range g.Rollouts {
						if string(r.Artifact) != fmt.Sprintf("%s#%d", g.Prompt, i) || r.Meta["prompt_index"] != g.Prompt[1:] || r.Meta["finish_reason"] == "" {
							t.Errorf("rollout %d: %q %v", i, r.Artifact, r.Meta)
						}
					}
				}
			}
			path := "/v1/chat/completions"
			if api == APICompletions {
				path = "/v1/completions"
			}
			for i, req := range ps.requests {
				if ps.paths[i] != path+" Bearer k" || req["model"] != "policy" || req["n"] != 3.0 || req["temperature"] != 0.7 || req["max_tokens"] != 64.0 || req["stream"] != false {
					t.Errorf("request %d to %s: %v", i, ps.paths[i], req)
				}
				if api == APIChat && len(req["messages"].([]any)) != 2 {
					t.Errorf("chat request without system message: %v", req)
				}
			}
		})
	}
}

func TestOpenAIBackendRetries(t *testing.T) {
	tests := []struct {
		name    string
		fail    map[int64]int
		wantErr bool
		calls   int64
	}{
		{"429 then ok", map[int64]int{1: 429}, false, 2},
		{"503 twice then ok", map[int64]int{1: 503, 2: 503}, false, 3},
		{"400 is final", map[int64]int{1: 400}, true, 1},
		{"retries exhausted", map[int64]int{1: 500, 2: 500, 3: 500}, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := newPolicyServer(t, tt.fail)
			b, err := NewOpenAI(OpenAIConfig{BaseURL: ps.URL + "/v1", Model: "m", Prompts: []Prompt{{Prompt: "p"}},
				GroupSize: 2, GroupsPerStep: 1, Steps: 1, MaxAttempts: 3, Sleep: noSleep})
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.Next(context.Background())
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrPolicyServer)) {
				t.Fatalf("Next err = %v, want error %v", err, tt.wantErr)
			}
			if got := ps.calls.Load(); got != tt.calls {
				t.Errorf("%d requests, want %d", got, tt.calls)
			}
		})
	}
}

func TestOpenAIChoices(t *testing.T) {
	b, err := NewOpenAI(OpenAIConfig{BaseURL: "http://x/v1", Model: "m", Prompts: []Prompt{{Prompt: "p"}}, GroupSize: 2, Steps: 1, API: APICompletions})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, body, want string }{
		{"too few", `{"choices": [{"index": 0, "text": "a"}]}`, "1 choices, want n=2"},
		{"duplicate index", `{"choices": [{"index": 0, "text": "a"}, {"index": 0, "text": "b"}]}`, "duplicated"},
		{"index out of range", `{"choices": [{"index": 0, "text": "a"}, {"index": 5, "text": "b"}]}`, "outside"},
		{"no text", `{"choices": [{"index": 0, "text": "a"}, {"index": 1}]}`, "no text"},
		{"not json", `<html>`, "not a completions response"},
	}
	for _, tt := range tests {
		if _, _, err := b.choices([]byte(tt.body)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	texts, _, err := b.choices([]byte(`{"choices": [{"text": "first"}, {"text": "second"}]}`))
	if err != nil || texts[0] != "first" || texts[1] != "second" {
		t.Errorf("choices without index: %q, %v", texts, err)
	}
}

func TestNewOpenAIConfig(t *testing.T) {
	good := OpenAIConfig{BaseURL: "http://x/v1", Model: "m", Prompts: []Prompt{{Prompt: "p"}}, Steps: 1}
	mod := func(f func(*OpenAIConfig)) OpenAIConfig { c := good; f(&c); return c }
	tests := map[string]OpenAIConfig{
		"bad url":      mod(func(c *OpenAIConfig) { c.BaseURL = "x" }),
		"no model":     mod(func(c *OpenAIConfig) { c.Model = "" }),
		"no prompts":   mod(func(c *OpenAIConfig) { c.Prompts = nil }),
		"bad api":      mod(func(c *OpenAIConfig) { c.API = "responses" }),
		"no steps":     mod(func(c *OpenAIConfig) { c.Steps = 0 }),
		"huge group":   mod(func(c *OpenAIConfig) { c.GroupSize = 5000 }),
		"negative tok": mod(func(c *OpenAIConfig) { c.MaxTokens = -1 }),
	}
	for name, cfg := range tests {
		if _, err := NewOpenAI(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v, want ErrConfig", name, err)
		}
	}
	if _, err := NewOpenAI(good); err != nil {
		t.Errorf("good config: %v", err)
	}
}

func TestLoadPrompts(t *testing.T) {
	ps, err := LoadPrompts(strings.NewReader("{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\", \"stream\": \"s\"}\n"))
	if err != nil || len(ps) != 2 || ps[1] != (Prompt{Prompt: "b", Stream: "s"}) {
		t.Fatalf("LoadPrompts = %+v, %v", ps, err)
	}
	for in, want := range map[string]string{
		`{"prompt": "a", "id": 1}`:                `line 1: unknown field "id"`,
		"{\"prompt\": \"a\"}\n{\"prompt\": \"\"}": "line 2: prompt is required",
		`{"prompt": "a", "stream": "x y"}`:        "line 1: stream",
		`nope`:                                    "line 1: not JSON",
		"":                                        "no prompts",
	} {
		if _, err := LoadPrompts(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadPrompts(%q) = %v, want %q", in, err, want)
		}
	}
}

// FuzzLoadPrompts: the prompts decoder never panics and returns only non-empty prompts.
func FuzzLoadPrompts(f *testing.F) {
	f.Add(`{"prompt": "a", "stream": "s"}`)
	f.Add(`{"prompt": "a", "prompt": "b"}`)
	f.Fuzz(func(t *testing.T, in string) {
		ps, err := LoadPrompts(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, p := range ps {
			if strings.TrimSpace(p.Prompt) == "" {
				t.Fatalf("empty prompt accepted from %q", in)
			}
		}
	})
}
