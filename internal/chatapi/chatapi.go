// Package chatapi is the OpenAI-compatible API as wmrl's two clients speak it (the world-model
// scorer and the policy-server generator): the request and reply they exchange, one try of a
// POST with its failure classified, and the retry loop around it.
package chatapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Request is a completions (Prompt) or chat-completions (Messages) request, never streamed.
// Temperature is always sent; TopP and MaxTokens 0 are omitted.
type Request struct {
	Model       string    `json:"model"`
	Prompt      string    `json:"prompt,omitempty"`
	Messages    []Message `json:"messages,omitempty"`
	Temperature float64   `json:"temperature"`
	TopP        float64   `json:"top_p,omitempty"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	N           int       `json:"n"`
	Stream      bool      `json:"stream"`
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Chat is the messages of a chat request: system (when not empty), then user.
func Chat(system, user string) []Message {
	if system == "" {
		return []Message{{"user", user}}
	}
	return []Message{{"system", system}, {"user", user}}
}

// Reply is the part of a (chat-)completions reply the clients read. Pointers tell an absent field
// from an empty one.
type Reply struct {
	Choices []struct {
		Index   *int    `json:"index"`
		Text    *string `json:"text"`
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Client reaches one API root (BaseURL includes the version, e.g. http://vllm:8000/v1). Init it
// before use.
type Client struct {
	BaseURL, APIKey string
	HTTP            *http.Client
	// Timeout bounds one try, from connecting to the reply's last byte; Limit bounds a reply's
	// body; Now reads Retry-After dates.
	Timeout time.Duration
	Limit   int64
	Now     func() time.Time
}

// Init checks BaseURL and, when HTTP is nil, makes a client whose pool keeps conns idle
// connections to the server: fewer would cap the throughput of conns concurrent requests.
func (c *Client) Init(conns int) error {
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("base URL %q must be http(s)://host[:port]/path", c.BaseURL)
	}
	if c.HTTP == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = conns
		tr.MaxIdleConns = max(tr.MaxIdleConns, conns)
		c.HTTP = &http.Client{Transport: tr}
	}
	return nil
}

// Do sends one request to BaseURL + path with the API key as a Bearer token; body nil sends none.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	return c.HTTP.Do(req)
}

// Failure is a failed try: what went wrong and what Policy.Do should do about it.
type Failure struct {
	Msg string
	Attempt
}

func (f *Failure) Error() string { return f.Msg }

// Post makes one try of req and returns the body of a 2xx reply. A failure is classified: a
// retryable status (with its Retry-After), a timeout or a transport error is worth another
// try; any other status, or a body over Limit, is not.
func (c *Client) Post(ctx context.Context, path string, req Request) ([]byte, *Failure) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // prompts are not HTML; keep them readable in server logs
	if err := enc.Encode(req); err != nil {
		return nil, &Failure{Msg: fmt.Sprintf("encode request: %v", err)}
	}
	actx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	resp, err := c.Do(actx, http.MethodPost, path, &body)
	if err == nil {
		defer resp.Body.Close()
		var data []byte
		data, err = io.ReadAll(io.LimitReader(resp.Body, c.Limit+1))
		switch {
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			reason := StatusReason(resp.StatusCode)
			f := &Failure{Msg: fmt.Sprintf("http %d: %s", resp.StatusCode, data[:min(len(data), 300)]), Attempt: Attempt{Retry: reason != "", Reason: reason}}
			if f.Retry {
				f.RetryAfter, f.HasRetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), c.Now())
			}
			return nil, f
		case err == nil && int64(len(data)) > c.Limit:
			return nil, &Failure{Msg: fmt.Sprintf("response body exceeds %d bytes", c.Limit)}
		case err == nil:
			return data, nil
		}
	}
	var ne net.Error
	if errors.Is(actx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return nil, &Failure{Msg: fmt.Sprintf("request timed out after %v", c.Timeout), Attempt: Attempt{Retry: true, Reason: ReasonTimeout}}
	}
	return nil, &Failure{Msg: fmt.Sprintf("transport: %v", err), Attempt: Attempt{Retry: true, Reason: ReasonTransport}}
}
