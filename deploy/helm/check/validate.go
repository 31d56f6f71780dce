package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Validator checks rendered manifests offline: built-in kinds against the Kubernetes API types,
// custom kinds against vendored CRD schemas, and the whole set against rules that tie objects
// together (selectors, port names, references, ACLs).
type Validator struct {
	kube *kubeTypes
	crds *crdSchemas
}

// NewValidator loads the CRD schemas in crdDir.
func NewValidator(crdDir string) (*Validator, error) {
	k, err := newKubeTypes()
	if err != nil {
		return nil, err
	}
	c, err := loadCRDs(crdDir)
	if err != nil {
		return nil, err
	}
	return &Validator{kube: k, crds: c}, nil
}

// Report is the outcome of validating one rendering.
type Report struct {
	// Kinds counts the validated objects per "apiVersion Kind".
	Kinds map[string]int
	// Errors names the manifest and the problem, one per entry.
	Errors []string
}

// Validate checks every manifest and the cross-object rules.
func (v *Validator) Validate(ms []Manifest) Report {
	r := Report{Kinds: map[string]int{}}
	set := &objects{}
	for _, m := range ms {
		// The rules read the same bytes the decoders and schemas validate.
		m.Obj = nil
		if err := json.Unmarshal(m.JSON, &m.Obj); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m.Source, err))
			continue
		}
		apiVersion, _ := m.Obj["apiVersion"].(string)
		kind, _ := m.Obj["kind"].(string)
		if apiVersion == "" || kind == "" {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: apiVersion and kind are required", m))
			continue
		}
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m, err))
			continue
		}
		gvk := gv.WithKind(kind)
		var typed runtime.Object
		namespaced := true
		switch {
		case v.kube.known(gvk):
			if typed, err = v.kube.decode(m); err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m, err))
				continue
			}
		default:
			cv, ok := v.crds.byGVK[gvk]
			if !ok {
				r.Errors = append(r.Errors, fmt.Sprintf("%s: no schema for %s %s (built-in: core, apps, batch, policy, networking v1; CRDs: %s)",
					m, apiVersion, kind, strings.Join(v.crds.kinds(), ", ")))
				continue
			}
			namespaced = cv.namespaced
			if _, err := v.crds.validate(gvk, m); err != nil {
				r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m, err))
				continue
			}
		}
		if err := validateMeta(m, namespaced, kind); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m, err))
			continue
		}
		r.Kinds[apiVersion+" "+kind]++
		set.add(m, gvk, typed)
	}
	r.Errors = append(r.Errors, set.check()...)
	sort.Strings(r.Errors)
	return r
}

// strictJSON decodes v (a YAML-derived value) into out, refusing unknown fields.
func strictJSON(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}
