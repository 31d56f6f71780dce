package worldmodel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/wmrl/wmrl/consumers/worldmodel"
)

// A stand-in for a vLLM or SGLang server: it answers every chat completion with a fenced score.
func fakeServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"`+
			"```json\\n{\\\"score\\\": 0.82}\\n```"+`"},"finish_reason":"stop"}]}`)
	}))
}

func ExampleOpenAIScorer() {
	srv := fakeServer()
	defer srv.Close()

	s, err := worldmodel.NewOpenAIScorer(worldmodel.OpenAIConfig{
		BaseURL:     srv.URL + "/v1",
		Model:       "Qwen/Qwen3-4B",
		Timeout:     10 * time.Second,
		MaxAttempts: 3,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := s.Score(context.Background(), worldmodel.Input{
		RunID: "run-1", GroupID: "g-0", RolloutID: "r-0",
		Prompt:   "Train a classifier; metric: validation accuracy.",
		Artifact: []byte(`{"model": "logreg", "l2": 0.1}`),
	})
	if err != nil {
		fmt.Println("shutting down:", err)
		return
	}
	fmt.Println(res.Status, res.Score, res.Attempts)
	// Output: ok 0.82 1
}

func ExampleParseScore() {
	for _, reply := range []string{
		`{"score": 0.7}`,
		"Looks solid.\n```json\n{\"score\": 0.9, \"why\": \"clean\"}\n```",
		"<think>maybe 0.2?</think> Final answer: 0.35",
		"no idea",
	} {
		v, err := worldmodel.ParseScore(reply)
		fmt.Println(v, err)
	}
	// Output:
	// 0.7 <nil>
	// 0.9 <nil>
	// 0.35 <nil>
	// 0 worldmodel: no usable score in reply: no number in reply
}

func ExampleNewBuiltinScorer() {
	// The demo's proxy world model plugs in as a PredictFunc; the adapter enforces the range.
	proxy := func(_ context.Context, in worldmodel.Input) (float64, error) {
		return float64(len(in.Artifact)) / 10, nil
	}
	s, err := worldmodel.NewBuiltinScorer(proxy, 0, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, art := range []string{"abcde", "abcdefghijkl"} {
		res, _ := s.Score(context.Background(), worldmodel.Input{Artifact: []byte(art)})
		fmt.Printf("%s %g %q\n", res.Status, res.Score, res.Reason)
	}
	// Output:
	// ok 0.5 ""
	// invalid 0 "score 1.2 outside [0, 1]"
}
