package main

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kubeTypes decodes built-in objects into the Kubernetes API Go types with a strict decoder: an
// unknown or duplicate field, a value of the wrong type or an unparsable quantity is an error,
// as `kubectl apply --validate=strict` reports it.
type kubeTypes struct {
	scheme *runtime.Scheme
	codec  runtime.Decoder
}

func newKubeTypes() (*kubeTypes, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	ser := json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Strict: true})
	return &kubeTypes{scheme: s, codec: ser}, nil
}

// known reports whether gvk is a built-in type this validator decodes.
func (k *kubeTypes) known(gvk schema.GroupVersionKind) bool { return k.scheme.Recognizes(gvk) }

// decode returns the typed object or every decoding error.
func (k *kubeTypes) decode(m Manifest) (runtime.Object, error) {
	obj, _, err := k.codec.Decode(m.JSON, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// validateMeta checks name, namespace, labels and annotations as the API server does for every
// object (DNS names, label syntax, annotation size).
func validateMeta(m Manifest, namespaced bool, kind string) error {
	var meta metav1.ObjectMeta
	raw, ok := m.Obj["metadata"]
	if !ok {
		return fmt.Errorf("metadata is missing")
	}
	if err := strictJSON(raw, &meta); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if namespaced && meta.Namespace == "" {
		meta.Namespace = "default" // Helm leaves the namespace to the install
	}
	name := apivalidation.NameIsDNSSubdomain
	if kind == "Service" {
		name = apivalidation.NameIsDNS1035Label // a Service name is a DNS label
	}
	errs := apivalidation.ValidateObjectMeta(&meta, namespaced, name, field.NewPath("metadata"))
	return errs.ToAggregate()
}
