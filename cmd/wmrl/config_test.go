package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wmrl/wmrl/topics"
)

func TestApplyConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "wmrl.yaml")
	if err := os.WriteFile(file, []byte("brokers: [f1:9092, f2:9092]\nclient-id: from-file\nlog-level: debug\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WMRL_CLIENT_ID": "from-env"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	brokers := fs.StringSlice("brokers", []string{"default:9092"}, "")
	clientID := fs.String("client-id", "default", "")
	level := fs.String("log-level", "info", "")
	topicPrefix := fs.String("topic-prefix", "wmrl.", "")
	if err := fs.Parse([]string{"--log-level=warn"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, file, lookup); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(*brokers, ","); got != "f1:9092,f2:9092" {
		t.Errorf("brokers from file: %q", got)
	}
	if *clientID != "from-env" {
		t.Errorf("env must beat file: client-id %q", *clientID)
	}
	if *level != "warn" {
		t.Errorf("flag must beat file: log-level %q", *level)
	}
	if *topicPrefix != "wmrl." {
		t.Errorf("default must survive: topic-prefix %q", *topicPrefix)
	}
}

// tempFiles gives a fresh directory and a function that writes a file of it (mode 0600, as
// secrets want) and returns its path.
func tempFiles(t *testing.T) (dir string, write func(name, body string) string) {
	dir = t.TempDir()
	return dir, func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestApplyConfigErrors(t *testing.T) {
	dir, write := tempFiles(t)
	tests := []struct {
		name string
		file string
		env  map[string]string
		want string
	}{
		{"unknown key", write("u.yaml", "no-such-option: 1\n"), nil, `unknown option "no-such-option"`},
		{"nested", write("n.yaml", "kafka:\n  brokers: x\n"), nil, "nested mappings"},
		{"bad yaml", write("b.yaml", "brokers: [\n"), nil, "b.yaml"},
		{"bad env value", "", map[string]string{"WMRL_TLS": "maybe"}, "env WMRL_TLS"},
		{"missing file", filepath.Join(dir, "absent.yaml"), nil, "absent.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			fs.StringSlice("brokers", nil, "")
			fs.Bool("tls", false, "")
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			err := applyConfig(fs, tt.file, lookup)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want containing %q", err, tt.want)
			}
		})
	}
}

func TestTopicsCommandInProcess(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := "--brokers=" + strings.Join(c.ListenAddrs(), ",")
	runCLI := func(args ...string) (int, string) {
		code, out, errOut := runCLIOut(args...)
		return code, out + errOut
	}
	if code, out := runCLI("topics", "check", brokers, "--topic-prefix=cli."); code != 1 || !strings.Contains(out, "missing") {
		t.Fatalf("check before create: code %d\n%s", code, out)
	}
	if code, out := runCLI("topics", "create", brokers, "--topic-prefix=cli."); code != 0 || strings.Count(out, "created") != len(topics.NewNames("cli.").All()) {
		t.Fatalf("create: code %d\n%s", code, out)
	}
	if code, out := runCLI("topics", "check", brokers, "--topic-prefix=cli."); code != 0 || !strings.Contains(out, "topics ok") {
		t.Fatalf("check after create: code %d\n%s", code, out)
	}
	if code, out := runCLI("topics", "check", brokers, "--topic-prefix=cli.", "--partitions=5"); code != 1 || !strings.Contains(out, "partitions is 3, want 5") {
		t.Fatalf("check with other plan: code %d\n%s", code, out)
	}
	if code, out := runCLI("topics", "describe", brokers, "--topic-prefix=cli."); code != 0 || !strings.Contains(out, "compact") {
		t.Fatalf("describe: code %d\n%s", code, out)
	}
}
