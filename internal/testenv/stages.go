package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Helpers for tests that run wmrl stages as processes (cmd/wmrl's end-to-end tests, the chaos
// harness, the soak).

// BuildWMRL builds the wmrl command, with the go build flags given, into dir and returns the
// binary's path.
func BuildWMRL(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "wmrl")
	args := append(append([]string{"build", "-o", bin}, flags...), "./cmd/wmrl")
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot(t)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return bin
}

// Proc is a process a test started. Done is closed once it has exited; Err is then what Wait
// returned.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Done chan struct{}
	Err  error
}

// StartProc starts cmd, failing the test when it cannot.
func StartProc(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Done: make(chan struct{})}
	go func() { p.Err = cmd.Wait(); close(p.Done) }()
	return p
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.Done:
		return true
	default:
		return false
	}
}

// Terminate stops the process unless it has exited: SIGTERM, and after limit an error and
// SIGKILL.
func (p *Proc) Terminate(t testing.TB, limit time.Duration) {
	t.Helper()
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(limit):
		t.Errorf("%s did not stop %v after SIGTERM", p.Name, limit)
		_ = p.Cmd.Process.Kill()
		<-p.Done
	}
}

// SyncBuffer collects a subprocess's output while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StageEnv is the parent's environment without WMRL_* and API-key variables, so only the flags a
// test passes configure the commands it starts.
func StageEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "WMRL_") || strings.HasPrefix(kv, "OPENAI_API_KEY=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// WorldModel is an OpenAI-compatible chat endpoint whose score is the artifact's "wm" value,
// found in the rendered prompt; requests, when not nil, counts the calls.
func WorldModel(requests *atomic.Int64) http.Handler {
	wmRE := regexp.MustCompile(`"wm":\s*([0-9][0-9.]*)`)
	mux := http.NewServeMux()
	// The model list answers worldmodel's start-up probe (not counted in requests).
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if requests != nil {
			requests.Add(1)
		}
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		reply := "I cannot tell."
		if m := wmRE.FindStringSubmatch(req.Messages[len(req.Messages)-1].Content); m != nil {
			reply = fmt.Sprintf(`{"score": %s}`, m[1])
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "e2e", "object": "chat.completion",
			"choices": []any{map[string]any{
				"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": reply},
			}},
		})
	})
	return mux
}
