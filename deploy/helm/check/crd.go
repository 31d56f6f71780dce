package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// crdSchemas holds, per group/version/kind, the compiled openAPIV3Schema of a served version of
// a vendored CustomResourceDefinition.
type crdSchemas struct {
	byGVK map[schema.GroupVersionKind]*crdVersion
}

type crdVersion struct {
	schema     *jsonschema.Schema
	namespaced bool
	source     string
}

type crdFile struct {
	Spec struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// loadCRDs compiles every *.yaml CRD in dir.
func loadCRDs(dir string) (*crdSchemas, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRD files in %s", dir)
	}
	sort.Strings(files)
	c := &crdSchemas{byGVK: map[schema.GroupVersionKind]*crdVersion{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd crdFile
		if err := yaml.Unmarshal(b, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if crd.Spec.Group == "" || crd.Spec.Names.Kind == "" {
			return nil, fmt.Errorf("%s: not a CustomResourceDefinition (no spec.group or spec.names.kind)", f)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			s, err := compileStructural(v.Schema.OpenAPIV3Schema, filepath.Base(f)+"/"+v.Name)
			if err != nil {
				return nil, fmt.Errorf("%s version %s: %w", f, v.Name, err)
			}
			c.byGVK[gvk] = &crdVersion{schema: s, namespaced: crd.Spec.Scope != "Cluster", source: filepath.Base(f)}
		}
	}
	return c, nil
}

// compileStructural turns a CRD's structural OpenAPI v3 schema into a JSON Schema that rejects
// what the API server rejects or silently drops: every object with neither
// x-kubernetes-preserve-unknown-fields nor additionalProperties gets
// additionalProperties: false (the server prunes unknown fields, `kubectl --validate=strict`
// refuses them; either way the setting would not take effect), nullable becomes a null type,
// and x-kubernetes-int-or-string accepts both.
func compileStructural(openapi map[string]any, name string) (*jsonschema.Schema, error) {
	if openapi == nil {
		return nil, errors.New("no openAPIV3Schema")
	}
	s := structural(openapi, true)
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	url := "mem://crd/" + name
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft7)
	if err := comp.AddResource(url, doc); err != nil {
		return nil, err
	}
	return comp.Compile(url)
}

// structural rewrites one schema node; root is the object itself, whose metadata CRDs leave
// open (it is checked as ObjectMeta separately).
func structural(node map[string]any, root bool) map[string]any {
	out := make(map[string]any, len(node))
	for k, v := range node {
		if strings.HasPrefix(k, "x-kubernetes-") || k == "nullable" {
			continue
		}
		out[k] = v
	}
	if props, ok := node["properties"].(map[string]any); ok {
		np := make(map[string]any, len(props))
		for k, v := range props {
			if m, ok := v.(map[string]any); ok {
				np[k] = structural(m, false)
			}
		}
		out["properties"] = np
	}
	_, hasAP := node["additionalProperties"]
	preserve, _ := node["x-kubernetes-preserve-unknown-fields"].(bool)
	if t, _ := node["type"].(string); t == "object" && !preserve && !hasAP {
		out["additionalProperties"] = false
	}
	if ap, ok := node["additionalProperties"].(map[string]any); ok {
		out["additionalProperties"] = structural(ap, false)
	}
	if items, ok := node["items"].(map[string]any); ok {
		out["items"] = structural(items, false)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := node[k].([]any); ok {
			nl := make([]any, len(list))
			for i, e := range list {
				if m, ok := e.(map[string]any); ok {
					nl[i] = structural(m, false)
				} else {
					nl[i] = e
				}
			}
			out[k] = nl
		}
	}
	if ios, _ := node["x-kubernetes-int-or-string"].(bool); ios {
		delete(out, "type")
		out["anyOf"] = []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}
	}
	if nullable, _ := node["nullable"].(bool); nullable {
		if t, ok := out["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
	}
	if root {
		if props, ok := out["properties"].(map[string]any); ok {
			props["metadata"] = map[string]any{"type": "object"}
		}
	}
	return out
}

// validate checks one custom object against its CRD version's schema.
func (c *crdSchemas) validate(gvk schema.GroupVersionKind, m Manifest) (bool, error) {
	v, ok := c.byGVK[gvk]
	if !ok {
		return false, nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.JSON))
	if err != nil {
		return true, err
	}
	if err := v.schema.Validate(inst); err != nil {
		return true, fmt.Errorf("against %s: %w", v.source, err)
	}
	return true, nil
}

// kinds lists the custom kinds known, for messages.
func (c *crdSchemas) kinds() []string {
	var out []string
	for gvk := range c.byGVK {
		out = append(out, gvk.GroupVersion().String()+" "+gvk.Kind)
	}
	sort.Strings(out)
	return out
}
