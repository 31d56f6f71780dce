package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const chartDir = "../wmrl"

var valueSets = map[string][]string{
	"default":      nil,
	"production":   {"../wmrl/ci/production-values.yaml"},
	"runtimeclass": {"../wmrl/ci/runtimeclass-values.yaml"},
	"private-proc": {"../wmrl/ci/private-proc-values.yaml"},
}

func render(t *testing.T, values []string) []Manifest {
	t.Helper()
	ms, err := Render(chartDir, values, Release{Name: "wmrl", Namespace: "wmrl"})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func validator(t *testing.T) *Validator {
	t.Helper()
	v, err := NewValidator("testdata/crds")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestChartValid renders every value set and expects every manifest valid, with the kinds each
// set is meant to produce actually present (so a template that silently renders nothing fails).
func TestChartValid(t *testing.T) {
	want := map[string]map[string]int{
		"default": {
			"apps/v1 Deployment": 2, "apps/v1 StatefulSet": 2, "kafka.strimzi.io/v1 KafkaTopic": 8,
			"kafka.strimzi.io/v1 KafkaUser": 7, "policy/v1 PodDisruptionBudget": 4, "v1 Service": 4,
		},
		"production": {
			"apps/v1 Deployment": 3, "apps/v1 StatefulSet": 2, "batch/v1 Job": 1, "kafka.strimzi.io/v1 KafkaTopic": 8,
			"kafka.strimzi.io/v1 KafkaUser": 8, "keda.sh/v1alpha1 ScaledObject": 2, "keda.sh/v1alpha1 TriggerAuthentication": 1,
			"monitoring.coreos.com/v1 ServiceMonitor": 1, "networking.k8s.io/v1 NetworkPolicy": 1,
			"security-profiles-operator.x-k8s.io/v1beta1 SeccompProfile": 1,
		},
		"runtimeclass": {"apps/v1 Deployment": 2, "apps/v1 StatefulSet": 2},
		"private-proc": {"apps/v1 Deployment": 2, "apps/v1 StatefulSet": 2},
	}
	v := validator(t)
	for name, files := range valueSets {
		t.Run(name, func(t *testing.T) {
			r := v.Validate(render(t, files))
			for _, e := range r.Errors {
				t.Error(e)
			}
			for kind, n := range want[name] {
				if r.Kinds[kind] != n {
					t.Errorf("%s: %d valid, want %d (all: %v)", kind, r.Kinds[kind], n, r.Kinds)
				}
			}
		})
	}
}

// TestBrokenManifests breaks one rendered object at a time and expects the validator to name the
// problem: each case is a mistake that `helm template` accepts and a cluster (or its operator)
// would refuse or silently ignore.
func TestBrokenManifests(t *testing.T) {
	cases := []struct {
		name, kind, object string
		values             string
		mutate             func(o map[string]any)
		want               string
	}{
		{"unknown field in a Deployment", "Deployment", "wmrl-worldmodel", "default", func(o map[string]any) {
			container(o)["imagePullPolicyy"] = "Always"
		}, `unknown field "spec.template.spec.containers[0].imagePullPolicyy"`},
		{"wrong type in a StatefulSet", "StatefulSet", "wmrl-correct", "default", func(o map[string]any) {
			spec(o)["replicas"] = "three"
		}, "replicas"},
		{"bad resource quantity", "Deployment", "wmrl-sandbox", "default", func(o map[string]any) {
			container(o)["resources"] = map[string]any{"limits": map[string]any{"memory": "8 gigabytes"}}
		}, "quantities must match"},
		{"invalid object name", "Service", "wmrl-correct", "default", func(o map[string]any) {
			o["metadata"].(map[string]any)["name"] = "wmrl.Correct"
		}, "metadata.name"},
		{"misspelled ACL operation", "KafkaUser", "wmrl-worldmodel", "default", func(o map[string]any) {
			acl(o, 0)["operations"] = []any{"Reads"}
		}, "operations/0"},
		{"ACL operation invalid on its resource type", "KafkaUser", "wmrl-worldmodel", "default", func(o map[string]any) {
			acl(o, 3)["operations"] = []any{"Write"} // the consumer group
		}, "operation Write is not valid on a group resource"},
		{"ACL All is not least privilege", "KafkaUser", "wmrl-correct", "default", func(o map[string]any) {
			acl(o, 0)["operations"] = []any{"All"}
		}, "operation All"},
		{"unknown field in a KafkaUser", "KafkaUser", "wmrl-sandbox", "default", func(o map[string]any) {
			spec(o)["authorisation"] = spec(o)["authorization"]
		}, "authorisation"},
		{"KafkaTopic without partitions", "KafkaTopic", "wmrl.rollouts.v1", "default", func(o map[string]any) {
			spec(o)["partitions"] = 0
		}, "minimum"},
		{"co-partitioning broken", "KafkaTopic", "wmrl.rewards.executed.v1", "default", func(o map[string]any) {
			spec(o)["partitions"] = 6
		}, "one partition count"},
		{"calibration not compacted", "KafkaTopic", "wmrl.calibration.v1", "default", func(o map[string]any) {
			spec(o)["config"] = map[string]any{"cleanup.policy": "delete"}
		}, "want compact"},
		{"password in the arguments", "StatefulSet", "wmrl-correct", "default", func(o map[string]any) {
			c := container(o)
			c["args"] = append(c["args"].([]any), "--sasl-password=hunter2")
		}, "--sasl-password in the arguments"},
		{"redis password in the arguments", "StatefulSet", "wmrl-correct", "default", func(o map[string]any) {
			c := container(o)
			c["args"] = append(c["args"].([]any), "--redis=redis://:hunter2@redis:6379/0")
		}, "--redis in the arguments holds a password"},
		{"password as an environment variable", "StatefulSet", "wmrl-correct", "production", func(o map[string]any) {
			c := container(o)
			c["env"] = append(c["env"].([]any), map[string]any{"name": "WMRL_SASL_PASSWORD", "valueFrom": map[string]any{
				"secretKeyRef": map[string]any{"name": "wmrl-correct", "key": "password"}}})
		}, "credential in env WMRL_SASL_PASSWORD"},
		{"secret volume readable by everyone", "StatefulSet", "wmrl-correct", "production", func(o map[string]any) {
			for _, v := range spec(o)["template"].(map[string]any)["spec"].(map[string]any)["volumes"].([]any) {
				if sec, ok := v.(map[string]any)["secret"].(map[string]any); ok {
					delete(sec, "defaultMode")
				}
			}
		}, "defaultMode 0644 is readable by every user"},
		{"probe on an unnamed port", "Deployment", "wmrl-worldmodel", "default", func(o map[string]any) {
			container(o)["ports"].([]any)[0].(map[string]any)["name"] = "http"
		}, `readinessProbe port "metrics"`},
		{"selector misses the pods", "Deployment", "wmrl-sandbox", "default", func(o map[string]any) {
			spec(o)["selector"] = map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/component": "sandbx"}}
		}, "does not match the pod template"},
		{"ScaledObject without triggers", "ScaledObject", "wmrl-worldmodel", "production", func(o map[string]any) {
			delete(spec(o), "triggers")
		}, "triggers"},
		{"ScaledObject on a missing Deployment", "ScaledObject", "wmrl-sandbox", "production", func(o map[string]any) {
			spec(o)["scaleTargetRef"].(map[string]any)["name"] = "wmrl-sandbox-old"
		}, "scaleTargetRef"},
		{"ServiceMonitor unknown field", "ServiceMonitor", "wmrl", "production", func(o map[string]any) {
			spec(o)["endpoints"].([]any)[0].(map[string]any)["scrapeInterval"] = "5s"
		}, "scrapeInterval"},
		{"ServiceMonitor on a missing port", "ServiceMonitor", "wmrl", "production", func(o map[string]any) {
			spec(o)["endpoints"].([]any)[0].(map[string]any)["port"] = "http-metrics"
		}, `port "http-metrics"`},
		{"unknown kind", "ConfigMap", "wmrl-config", "default", func(o map[string]any) {
			o["apiVersion"] = "kafka.strimzi.io/v1beta2"
			o["kind"] = "KafkaTopic"
		}, "no schema for kafka.strimzi.io/v1beta2 KafkaTopic"},
	}
	v := validator(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ms := render(t, valueSets[c.values])
			found := false
			for i, m := range ms {
				if m.Obj["kind"] != c.kind || name(m) != c.object {
					continue
				}
				found = true
				c.mutate(m.Obj)
				b, err := json.Marshal(m.Obj)
				if err != nil {
					t.Fatal(err)
				}
				ms[i].JSON = b
			}
			if !found {
				t.Fatalf("no %s %s in the rendering", c.kind, c.object)
			}
			r := v.Validate(ms)
			if len(r.Errors) == 0 {
				t.Fatalf("broken manifest passed, want an error containing %q", c.want)
			}
			joined := strings.Join(r.Errors, "\n")
			if !strings.Contains(joined, c.want) {
				t.Errorf("errors do not mention %q:\n%s", c.want, joined)
			}
		})
	}
}

func spec(o map[string]any) map[string]any { return o["spec"].(map[string]any) }

func container(o map[string]any) map[string]any {
	pod := spec(o)["template"].(map[string]any)["spec"].(map[string]any)
	return pod["containers"].([]any)[0].(map[string]any)
}

func acl(o map[string]any, i int) map[string]any {
	return spec(o)["authorization"].(map[string]any)["acls"].([]any)[i].(map[string]any)
}

// TestValuesSchema expects Helm to refuse value files with a misspelt key or an impossible
// value (the chart's values.schema.json), instead of rendering the chart without them.
func TestValuesSchema(t *testing.T) {
	testRefusals(t, []refusal{
		{"misspelt stage", "stages:\n  worldmodle:\n    replicas: 2\n", "worldmodle"},
		{"misspelt option", "kafka:\n  bootstrapServer: [a:9092]\n", "bootstrapServer"},
		{"unknown authentication", "kafka:\n  authentication: scram\n", "authentication"},
		{"no partitions", "strimzi:\n  topics:\n    partitions: 0\n", "partitions"},
		{"flag with dashes", "stages:\n  sandbox:\n    args:\n      --slots: 2\n", "--slots"},
		{"broker without port", "kafka:\n  bootstrapServers: [kafka]\n", "bootstrapServers"},
		{"unknown jail /proc mode", "stages:\n  sandbox:\n    jail:\n      proc: host\n", "proc"},
		{"misspelt seccomp option", "stages:\n  sandbox:\n    jail:\n      seccompProfile:\n        operater: true\n", "operater"},
	})
}

// TestChartRefuses expects the chart itself to refuse combinations the stages or KEDA cannot run
// with, naming the value to change.
func TestChartRefuses(t *testing.T) {
	testRefusals(t, []refusal{
		{"mutual TLS without TLS", "kafka:\n  authentication: tls\n", "needs kafka.tls.enabled"},
		{"TLS without a CA", "kafka:\n  tls:\n    enabled: true\n", "kafka.tls.caSecret.name"},
		{"more KEDA replicas than partitions", "stages:\n  sandbox:\n    autoscaling:\n      enabled: true\n      minReplicas: 4\n", "minReplicas 4 is above"},
		{"generator without prompts", "stages:\n  generate:\n    enabled: true\n", "stages.generate.prompts"},
		{"Redis password in the URL", "redis:\n  url: rediss://:hunter2@redis:6380/0\n", "redis.url holds a password"},
	})
}

// refusal is a values file that Render must refuse with an error containing want.
type refusal struct{ name, values, want string }

func testRefusals(t *testing.T, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := t.TempDir() + "/values.yaml"
			if err := os.WriteFile(f, []byte(c.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Render(chartDir, []string{f}, Release{Name: "wmrl", Namespace: "wmrl"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("render error %v, want one containing %q", err, c.want)
			}
		})
	}
}
