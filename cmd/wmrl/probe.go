package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func init() { register(newProbeCmd) }

// probeOptions holds probe's flags; its run method is the command's body.
type probeOptions struct {
	a       *app
	timeout time.Duration
}

// newProbeCmd is the container healthcheck: the images have no shell or curl, so
// docker-compose.yml asks the binary itself whether a stage's /healthz or /readyz answers.
func newProbeCmd(a *app) *cobra.Command {
	o := &probeOptions{a: a}
	cmd := &cobra.Command{
		Use: "probe URL",
		Example: `  wmrl probe http://127.0.0.1:9464/healthz/scoring
  wmrl probe --timeout 1s http://127.0.0.1:9466/readyz`,
		Short: "Exit 0 if URL answers 2xx within --timeout (a container healthcheck, e.g. http://127.0.0.1:9466/readyz)",
		Args:  cobra.ExactArgs(1),
		RunE:  o.run,
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

func (o *probeOptions) run(cmd *cobra.Command, args []string) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	code, err := probe(ctx, args[0])
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintf(o.a.stdout, "%s: %d\n", args[0], code)
	return nil
}

// probe GETs url and returns the status code, or an error naming it when it is not 2xx.
func probe(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("probe %s: %s: %s", url, resp.Status, body)
	}
	return resp.StatusCode, nil
}
