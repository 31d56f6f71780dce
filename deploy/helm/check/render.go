package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

// Manifest is one rendered Kubernetes object.
type Manifest struct {
	// Source is the template that produced it and its position there, for messages.
	Source string
	Obj    map[string]any
	// JSON is the object as JSON, the input of the typed and schema validators.
	JSON []byte
}

func (m Manifest) String() string {
	meta, _ := m.Obj["metadata"].(map[string]any)
	return fmt.Sprintf("%s %s/%v (%s)", m.Obj["apiVersion"], m.Obj["kind"], meta["name"], m.Source)
}

// Release names the install the chart is rendered for.
type Release struct {
	Name, Namespace string
}

// Render renders the chart in dir with the value files merged in order (later files win, maps
// merge key by key, as `helm template -f a -f b`), including test hooks, and returns every
// object. The chart's values.schema.json, if any, is enforced by Helm itself.
func Render(dir string, valueFiles []string, rel Release) ([]Manifest, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	vals := map[string]any{}
	for _, f := range valueFiles {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("values %s: %w", f, err)
		}
		vals = mergeValues(vals, v)
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: rel.Name, Namespace: rel.Namespace, IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("values for %s: %w", dir, err)
	}
	out, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	var ms []Manifest
	for _, n := range names {
		if path.Ext(n) != ".yaml" && path.Ext(n) != ".yml" {
			continue // NOTES.txt and helpers
		}
		docs, err := splitDocuments(out[n])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		for i, d := range docs {
			var obj map[string]any
			if err := yaml.Unmarshal(d, &obj); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", n, i+1, err)
			}
			if len(obj) == 0 {
				continue
			}
			j, err := yaml.YAMLToJSONStrict(d)
			if err != nil {
				return nil, fmt.Errorf("%s document %d: %w", n, i+1, err)
			}
			ms = append(ms, Manifest{Source: fmt.Sprintf("%s#%d", n, i+1), Obj: obj, JSON: j})
		}
	}
	return ms, nil
}

// splitDocuments splits a multi-document YAML stream into its documents; Render converts each
// with YAMLToJSONStrict, so a duplicate key (which a lenient decoder resolves silently) is an
// error.
func splitDocuments(s string) ([][]byte, error) {
	dec := yamlv3.NewDecoder(strings.NewReader(s))
	var docs [][]byte
	for {
		var n yamlv3.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		enc := yamlv3.NewEncoder(&buf)
		if err := enc.Encode(&n); err != nil {
			return nil, err
		}
		docs = append(docs, buf.Bytes())
	}
}

// mergeValues merges src into dst like Helm merges -f files: nested maps key by key, any other
// value replaced.
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}
