package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
)

// EnvRegistry names a Confluent-compatible schema registry's base URL, e.g.
// http://127.0.0.1:8481/apis/ccompat/v7 (deploy/local/registry.sh, started by `make test`).
const EnvRegistry = "WMRL_TEST_REGISTRY"

var registryReach reachability

// Registry returns the schema registry URL from WMRL_TEST_REGISTRY after checking, once per
// process, that it lists its subjects. Unset and unreachable behave as in Kafka: unset skips the
// test unless Required, unreachable fails it.
func Registry(t testing.TB) string {
	t.Helper()
	url := strings.TrimRight(strings.TrimSpace(os.Getenv(EnvRegistry)), "/")
	if url == "" {
		unavailable(t, EnvRegistry+" is not set")
		return ""
	}
	if err := registryReach.check(url, func(ctx context.Context) error { return pingRegistry(ctx, url) }); err != nil {
		t.Fatalf("testenv: schema registry at %s=%s is unreachable: %v (deploy/local/registry.sh start; the URL is the Confluent API's base, for Apicurio …/apis/ccompat/v7)", EnvRegistry, url, err)
	}
	return url
}

func pingRegistry(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/subjects", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/subjects: %s", url, resp.Status)
	}
	return nil
}
