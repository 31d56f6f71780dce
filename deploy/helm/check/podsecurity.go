package main

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// PodLevel is the strictest Pod Security Standards level one rendered pod (template) passes, as
// the Kubernetes project's own admission library evaluates it at the latest policy version.
type PodLevel struct {
	Manifest Manifest
	Level    api.Level
	// Short is why the pod misses the next stricter level ("" for restricted), in the
	// library's words.
	Short string
}

// PodSecurityLevels evaluates every pod template of ms (Deployments, StatefulSets, Jobs and
// bare Pods) against the baseline and restricted levels.
func PodSecurityLevels(ms []Manifest) ([]PodLevel, error) {
	kube, err := newKubeTypes()
	if err != nil {
		return nil, err
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("pod security evaluator: %w", err)
	}
	var out []PodLevel
	for _, m := range ms {
		switch m.Obj["kind"] {
		case "Deployment", "StatefulSet", "Job", "Pod":
		default:
			continue
		}
		obj, err := kube.decode(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		var meta *metav1.ObjectMeta
		var spec *corev1.PodSpec
		switch t := obj.(type) {
		case *appsv1.Deployment:
			meta, spec = &t.Spec.Template.ObjectMeta, &t.Spec.Template.Spec
		case *appsv1.StatefulSet:
			meta, spec = &t.Spec.Template.ObjectMeta, &t.Spec.Template.Spec
		case *batchv1.Job:
			meta, spec = &t.Spec.Template.ObjectMeta, &t.Spec.Template.Spec
		case *corev1.Pod:
			meta, spec = &t.ObjectMeta, &t.Spec
		default:
			continue
		}
		pl := PodLevel{Manifest: m, Level: api.LevelPrivileged}
		for _, level := range []api.Level{api.LevelBaseline, api.LevelRestricted} {
			r := policy.AggregateCheckResults(eval.EvaluatePod(api.LevelVersion{Level: level, Version: api.LatestVersion()}, meta, spec))
			if !r.Allowed {
				pl.Short = string(level) + ": " + r.ForbiddenReason() + " (" + r.ForbiddenDetail() + ")"
				break
			}
			pl.Level = level
		}
		out = append(out, pl)
	}
	return out, nil
}
