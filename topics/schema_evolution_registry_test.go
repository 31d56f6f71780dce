package topics_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/wmrl/wmrl/internal/testenv"
	"github.com/wmrl/wmrl/schemas"
	"github.com/wmrl/wmrl/topics"
)

// TestEvolutionRulesMatchRegistry gives each of the CI check's rule cases to the real registry
// (WMRL_TEST_REGISTRY; Apicurio Registry 2.6.13 in `make test`): the first version, then the
// second under BACKWARD, on a subject of its own. The registry must accept exactly the changes
// the CI check (TestSchemaEvolutionRules) accepts, so a schema change CI lets through is one the
// stages can register at start-up.
func TestEvolutionRulesMatchRegistry(t *testing.T) {
	url := testenv.Registry(t)
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	text, err := fs.ReadFile(schemas.FS, "wmrl/v1/predicted.proto")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(name string, e [2]string) sr.Schema {
		out := string(text)
		if e != [2]string{} {
			if !strings.Contains(out, e[0]) {
				t.Fatalf("%s: predicted.proto has no %q", name, e[0])
			}
			out = strings.Replace(out, e[0], e[1], 1)
		}
		return sr.Schema{Type: sr.TypeProtobuf, Schema: out}
	}
	prefix := testenv.Name(t)
	for i, c := range topics.EvolutionCases(t) {
		subject := fmt.Sprintf("%s-%d-value", prefix, i)
		for _, res := range cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, subject) {
			if res.Err != nil {
				t.Fatalf("%s: set BACKWARD: %v", c.Name, res.Err)
			}
		}
		if _, err := cl.CreateSchema(ctx, subject, apply(c.Name, c.V1)); err != nil {
			t.Fatalf("%s: first version: %v", c.Name, err)
		}
		_, err := cl.CreateSchema(ctx, subject, apply(c.Name, c.V2))
		var re *sr.ResponseError
		refused := errors.As(err, &re) && re.ErrorCode == sr.ErrIncompatibleSchema.Code
		switch {
		case err != nil && !refused:
			t.Errorf("%s: registry answered %v, want success or INCOMPATIBLE_SCHEMA", c.Name, err)
		case refused == c.OK:
			t.Errorf("%s: registry accepted=%v (%v), CI check accepts=%v", c.Name, !refused, err, c.OK)
		}
	}
}
