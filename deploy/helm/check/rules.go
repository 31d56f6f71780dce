package main

import (
	"cmp"
	"fmt"
	"regexp"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// objects is one rendering, indexed for the rules that span objects.
type objects struct {
	all      []entry
	pods     []podEntry
	services map[string]*corev1.Service
}

type entry struct {
	m     Manifest
	gvk   schema.GroupVersionKind
	typed runtime.Object
}

// podEntry is a pod template (of a workload or a bare Pod) with where it came from.
type podEntry struct {
	m      Manifest
	labels map[string]string
	spec   *corev1.PodSpec
	// claims are a StatefulSet's volumeClaimTemplates, volumes of every pod it makes.
	claims []string
}

func (o *objects) add(m Manifest, gvk schema.GroupVersionKind, typed runtime.Object) {
	o.all = append(o.all, entry{m: m, gvk: gvk, typed: typed})
	if o.services == nil {
		o.services = map[string]*corev1.Service{}
	}
	switch t := typed.(type) {
	case *appsv1.Deployment:
		o.pods = append(o.pods, podEntry{m: m, labels: t.Spec.Template.Labels, spec: &t.Spec.Template.Spec})
	case *appsv1.StatefulSet:
		p := podEntry{m: m, labels: t.Spec.Template.Labels, spec: &t.Spec.Template.Spec}
		for _, c := range t.Spec.VolumeClaimTemplates {
			p.claims = append(p.claims, c.Name)
		}
		o.pods = append(o.pods, p)
	case *batchv1.Job:
		o.pods = append(o.pods, podEntry{m: m, labels: t.Spec.Template.Labels, spec: &t.Spec.Template.Spec})
	case *corev1.Pod:
		o.pods = append(o.pods, podEntry{m: m, labels: t.Labels, spec: &t.Spec})
	case *corev1.Service:
		o.services[t.Name] = t
	}
}

// check runs every cross-object rule and returns one message per violation.
func (o *objects) check() []string {
	var errs []string
	fail := func(m Manifest, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s: %s", m, fmt.Sprintf(format, args...)))
	}
	seen := map[string]Manifest{}
	for _, e := range o.all {
		key := e.gvk.Kind + "/" + name(e.m)
		if prev, dup := seen[key]; dup {
			fail(e.m, "same kind and name as %s", prev.Source)
		}
		seen[key] = e.m
	}
	for _, p := range o.pods {
		checkPod(p, fail)
	}
	var topicPartitions []string
	partitions := map[string]bool{}
	for _, e := range o.all {
		switch t := e.typed.(type) {
		case *appsv1.Deployment:
			checkSelector(e.m, t.Spec.Selector, t.Spec.Template.Labels, fail)
		case *appsv1.StatefulSet:
			checkSelector(e.m, t.Spec.Selector, t.Spec.Template.Labels, fail)
			if svc, ok := o.services[t.Spec.ServiceName]; !ok {
				fail(e.m, "serviceName %q is not a Service of this release", t.Spec.ServiceName)
			} else if svc.Spec.ClusterIP != corev1.ClusterIPNone {
				fail(e.m, "serviceName %q must be a headless Service (clusterIP: None) for stable pod DNS names", t.Spec.ServiceName)
			}
		case *policyv1.PodDisruptionBudget:
			if o.selectedPods(t.Spec.Selector) == 0 {
				fail(e.m, "selector matches no pod template of this release")
			}
		case *corev1.Service:
			o.checkService(e.m, t, fail)
		}
		switch e.gvk.Kind {
		case "ServiceMonitor":
			o.checkServiceMonitor(e.m, fail)
		case "ScaledObject":
			o.checkScaledObject(e.m, fail)
		case "KafkaUser":
			checkKafkaUser(e.m, fail)
		case "KafkaTopic":
			checkKafkaTopic(e.m, fail)
			if p, ok := dig(e.m.Obj, "spec", "partitions").(float64); ok {
				topicPartitions = append(topicPartitions, fmt.Sprintf("%s=%v", dig(e.m.Obj, "spec", "topicName"), p))
				partitions[fmt.Sprint(p)] = true
			}
		}
	}
	if len(partitions) > 1 {
		sort.Strings(topicPartitions)
		errs = append(errs, fmt.Sprintf("KafkaTopics: every wmrl topic needs one partition count (records of a run meet on one partition number): %s", strings.Join(topicPartitions, ", ")))
	}
	return errs
}

func name(m Manifest) string {
	n, _ := dig(m.Obj, "metadata", "name").(string)
	return n
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func checkSelector(m Manifest, sel *metav1.LabelSelector, podLabels map[string]string, fail func(Manifest, string, ...any)) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		fail(m, "selector: %v", err)
		return
	}
	if s.Empty() {
		fail(m, "selector is empty")
		return
	}
	if !s.Matches(labels.Set(podLabels)) {
		fail(m, "selector %s does not match the pod template's labels %v", s, podLabels)
	}
}

// secretFlags are wmrl options whose values are credentials: they must come from a Secret
// mounted as a file, never from arguments (visible in `ps`, events and the API).
var secretFlags = []string{"--sasl-password"}

// urlFlags are options whose value is a URL that may carry a password (user:password@).
var urlFlags = []string{"--redis"}

// secretEnv are the environment variables carrying credentials. The stages take credentials
// from files (--sasl-password-file, --redis-password-file, --wm-api-key-file,
// --policy-api-key-file): an environment variable, even from a Secret, is readable by any
// process of the same uid through /proc/<pid>/environ unless the stage is non-dumpable, and
// is inherited by children started before the stage removes it.
var secretEnv = map[string]bool{"WMRL_SASL_PASSWORD": true, "WMRL_REDIS": true, "WMRL_WM_API_KEY": true, "WMRL_POLICY_API_KEY": true, "OPENAI_API_KEY": true}

// urlPassword matches a URL with a password in its user information.
var urlPassword = regexp.MustCompile(`^[a-z]+://[^/@]*:[^/@]*@`)

// checkSecretVolumes fails a Secret volume whose files every user of the pod may read: a
// credential file is for the stage (the pod's fsGroup), not for a sandbox job running under a
// uid of its own. Kubernetes' default mode is 0644.
func checkSecretVolumes(p podEntry, fail func(Manifest, string, ...any)) {
	for _, v := range p.spec.Volumes {
		if v.Secret == nil {
			continue
		}
		mode := int32(0o644)
		if v.Secret.DefaultMode != nil {
			mode = *v.Secret.DefaultMode
		}
		for _, it := range v.Secret.Items {
			if it.Mode != nil && *it.Mode&0o007 != 0 {
				fail(p.m, "secret volume %s: item %s mode %#o is readable by every user; want 0440", v.Name, it.Path, *it.Mode)
			}
		}
		if mode&0o007 != 0 {
			fail(p.m, "secret volume %s: defaultMode %#o is readable by every user; want 0440", v.Name, mode)
		}
	}
}

func checkPod(p podEntry, fail func(Manifest, string, ...any)) {
	vols := map[string]bool{}
	for _, v := range p.spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range p.claims {
		vols[c] = true
	}
	if len(p.spec.Containers) == 0 {
		fail(p.m, "pod template has no containers")
	}
	checkSecretVolumes(p, fail)
	for _, c := range p.spec.Containers {
		if c.Image == "" {
			fail(p.m, "container %s: image is empty", c.Name)
		}
		ports := map[string]bool{}
		for _, cp := range c.Ports {
			ports[cp.Name] = true
		}
		for _, vm := range c.VolumeMounts {
			if !vols[vm.Name] {
				fail(p.m, "container %s: volumeMount %q names no volume of the pod", c.Name, vm.Name)
			}
		}
		for what, pr := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
			if pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "" && !ports[pr.HTTPGet.Port.StrVal] {
				fail(p.m, "container %s: %s port %q is not a named container port", c.Name, what, pr.HTTPGet.Port.StrVal)
			}
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			for _, f := range secretFlags {
				if a == f || strings.HasPrefix(a, f+"=") {
					fail(p.m, "container %s: %s in the arguments; credentials come from a Secret mounted as a file (%s-file)", c.Name, f, f)
				}
			}
			for _, f := range urlFlags {
				if v, ok := strings.CutPrefix(a, f+"="); ok && urlPassword.MatchString(v) {
					fail(p.m, "container %s: %s in the arguments holds a password; give it in a file (%s-password-file)", c.Name, f, f)
				}
			}
		}
		for _, e := range c.Env {
			if secretEnv[e.Name] {
				fail(p.m, "container %s: credential in env %s; mount its Secret as a file and pass the --*-file option", c.Name, e.Name)
			}
		}
	}
}

func (o *objects) selectedPods(sel *metav1.LabelSelector) int {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return 0
	}
	n := 0
	for _, p := range o.pods {
		if s.Matches(labels.Set(p.labels)) {
			n++
		}
	}
	return n
}

func (o *objects) checkService(m Manifest, svc *corev1.Service, fail func(Manifest, string, ...any)) {
	if len(svc.Spec.Selector) == 0 {
		return
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	var matched []podEntry
	for _, p := range o.pods {
		if sel.Matches(labels.Set(p.labels)) {
			matched = append(matched, p)
		}
	}
	if len(matched) == 0 {
		fail(m, "selector %s matches no pod template of this release", sel)
		return
	}
	for _, sp := range svc.Spec.Ports {
		if sp.TargetPort.StrVal == "" {
			continue
		}
		for _, p := range matched {
			found := false
			for _, c := range p.spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == sp.TargetPort.StrVal
				}
			}
			if !found {
				fail(m, "port %s: targetPort %q is no container port of %s", sp.Name, sp.TargetPort.StrVal, p.m)
			}
		}
	}
}

func (o *objects) checkServiceMonitor(m Manifest, fail func(Manifest, string, ...any)) {
	var sel metav1.LabelSelector
	if err := strictJSON(dig(m.Obj, "spec", "selector"), &sel); err != nil {
		fail(m, "spec.selector: %v", err)
		return
	}
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		fail(m, "spec.selector: %v", err)
		return
	}
	portNames := map[string]bool{}
	n := 0
	for _, svc := range o.services {
		if s.Matches(labels.Set(svc.Labels)) {
			n++
			for _, p := range svc.Spec.Ports {
				portNames[p.Name] = true
			}
		}
	}
	if n == 0 {
		fail(m, "selector %s matches no Service of this release", s)
		return
	}
	eps, _ := dig(m.Obj, "spec", "endpoints").([]any)
	for i, ep := range eps {
		if p, _ := dig(ep, "port").(string); p != "" && !portNames[p] {
			fail(m, "endpoints[%d].port %q is no port of the selected Services", i, p)
		}
	}
}

func (o *objects) checkScaledObject(m Manifest, fail func(Manifest, string, ...any)) {
	kind, _ := dig(m.Obj, "spec", "scaleTargetRef", "kind").(string)
	kind = cmp.Or(kind, "Deployment")
	target, _ := dig(m.Obj, "spec", "scaleTargetRef", "name").(string)
	if !o.has(kind, target) {
		fail(m, "scaleTargetRef %s/%s is not an object of this release", kind, target)
	}
	trs, _ := dig(m.Obj, "spec", "triggers").([]any)
	for i, tr := range trs {
		if ref, _ := dig(tr, "authenticationRef", "name").(string); ref != "" {
			k, _ := dig(tr, "authenticationRef", "kind").(string)
			k = cmp.Or(k, "TriggerAuthentication")
			if k == "TriggerAuthentication" && !o.has(k, ref) {
				fail(m, "triggers[%d].authenticationRef %s/%s is not an object of this release", i, k, ref)
			}
		}
	}
}

func (o *objects) has(kind, n string) bool {
	for _, e := range o.all {
		if e.gvk.Kind == kind && name(e.m) == n {
			return true
		}
	}
	return false
}

// aclOperations are the operations Kafka's authorizer accepts per resource type (AclEntry's
// supported operations); the CRD's enum allows every operation on every type, the broker then
// refuses the binding, and the Strimzi User Operator reports the user NotReady.
var aclOperations = map[string][]string{
	"topic":           {"Read", "Write", "Create", "Delete", "Alter", "Describe", "AlterConfigs", "DescribeConfigs", "All"},
	"group":           {"Read", "Describe", "Delete", "All"},
	"cluster":         {"Create", "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "Alter", "Describe", "All"},
	"transactionalId": {"Describe", "Write", "All"},
}

func checkKafkaUser(m Manifest, fail func(Manifest, string, ...any)) {
	if _, ok := dig(m.Obj, "metadata", "labels", "strimzi.io/cluster").(string); !ok {
		fail(m, "label strimzi.io/cluster is missing: the User Operator ignores the user")
	}
	acls, _ := dig(m.Obj, "spec", "authorization", "acls").([]any)
	for i, a := range acls {
		typ, _ := dig(a, "resource", "type").(string)
		rname, _ := dig(a, "resource", "name").(string)
		if typ != "cluster" && rname == "" {
			fail(m, "acls[%d]: a %s resource needs a name", i, typ)
		}
		if typ == "cluster" && dig(a, "resource", "patternType") != nil {
			fail(m, "acls[%d]: a cluster resource has no patternType", i)
		}
		ops, _ := dig(a, "operations").([]any)
		if len(ops) == 0 {
			fail(m, "acls[%d]: no operations", i)
		}
		for _, op := range ops {
			s, _ := op.(string)
			if !contains(aclOperations[typ], s) {
				fail(m, "acls[%d]: operation %s is not valid on a %s resource (valid: %s)", i, s, typ, strings.Join(aclOperations[typ], ", "))
			}
			if s == "All" {
				fail(m, "acls[%d]: operation All on %s %q is not least privilege", i, typ, rname)
			}
		}
	}
}

// checkKafkaTopic enforces the layout `wmrl topics check` expects of each topic: the compacted
// calibration changelog, every other topic deleted after retention.ms.
func checkKafkaTopic(m Manifest, fail func(Manifest, string, ...any)) {
	if _, ok := dig(m.Obj, "metadata", "labels", "strimzi.io/cluster").(string); !ok {
		fail(m, "label strimzi.io/cluster is missing: the Topic Operator ignores the topic")
	}
	topic, _ := dig(m.Obj, "spec", "topicName").(string)
	if topic == "" {
		topic = name(m)
	}
	cleanup, _ := dig(m.Obj, "spec", "config", "cleanup.policy").(string)
	if strings.HasSuffix(topic, "calibration.v1") {
		if cleanup != "compact" {
			fail(m, "topic %s: cleanup.policy %q, want compact (the calibration changelog is rebuilt from it)", topic, cleanup)
		}
		return
	}
	if cleanup != "delete" {
		fail(m, "topic %s: cleanup.policy %q, want delete", topic, cleanup)
	}
	if dig(m.Obj, "spec", "config", "retention.ms") == nil {
		fail(m, "topic %s: retention.ms is not set (wmrl topics check compares it)", topic)
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
