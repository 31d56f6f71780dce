package httpretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3/option"
)

// Options configures an openai-go service for Do's loop: its own retries off, no settings from
// the OPENAI_* environment (the service constructors do not read it), "stream": false sent, and
// reply bodies cut after limit bytes, which Call then reports.
func Options(baseURL, apiKey string, client *http.Client, limit int64) []option.RequestOption {
	return []option.RequestOption{
		option.WithBaseURL(baseURL), option.WithAPIKey(apiKey), option.WithHTTPClient(client),
		option.WithMaxRetries(0), option.WithJSONSet("stream", false),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			if resp != nil {
				resp.Body = struct {
					io.Reader
					io.Closer
				}{io.LimitReader(resp.Body, limit+1), resp.Body}
			}
			return resp, err
		}),
	}
}

// Failure is a failed try: what went wrong and what Do should do about it.
type Failure struct {
	Msg string
	Attempt
}

func (f *Failure) Error() string { return f.Msg }

// Call makes one try of a request on a service built with Options: post gets the try's context
// (ctx bounded by timeout) and the options that capture the reply, whose raw body Call returns. A
// failure is classified: a retryable status (with its Retry-After, read with now), a timeout or
// a transport error is worth another try; any other status or a body over limit is not. The
// status is read from the response itself, not from openai-go's error, which is not an
// *openai.Error when the body's "error" is not an OpenAI error object (e.g. a string).
func Call(ctx context.Context, timeout time.Duration, limit int64, now func() time.Time, post func(context.Context, ...option.RequestOption) error) ([]byte, *Failure) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var data []byte
	var resp *http.Response
	err := post(actx, option.WithResponseBodyInto(&data), option.WithResponseInto(&resp))
	var ne net.Error
	switch {
	case resp != nil && resp.StatusCode >= 400:
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		f := &Failure{Msg: fmt.Sprintf("http %d: %s", resp.StatusCode, head),
			Attempt: Attempt{Retry: RetryableStatus(resp.StatusCode), Reason: StatusReason(resp.StatusCode)}}
		if f.Retry {
			f.RetryAfter, f.HasRetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), now())
		}
		return nil, f
	case errors.Is(actx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return nil, &Failure{Msg: fmt.Sprintf("request timed out after %v", timeout), Attempt: Attempt{Retry: true, Reason: ReasonTimeout}}
	case err != nil:
		return nil, &Failure{Msg: fmt.Sprintf("transport: %v", err), Attempt: Attempt{Retry: true, Reason: ReasonTransport}}
	case int64(len(data)) > limit:
		return nil, &Failure{Msg: fmt.Sprintf("response body exceeds %d bytes", limit)}
	}
	return data, nil
}
