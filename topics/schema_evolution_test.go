package topics

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/wmrl/wmrl/topics/wirepb"
)

var updateSchemas = flag.Bool("update-schemas", false, "rewrite schemas/testdata/fields.txt, the released schema fields")

// schemaSnapshot lists every released field of schemas/wmrl/v1; TestSchemaEvolution holds the
// current schemas to it. Adding a field passes (then -update-schemas records it as released);
// removing, renumbering, renaming or retyping one fails.
const schemaSnapshot = "../schemas/testdata/fields.txt"

// schemaFields describes the wmrl.v1 messages (as generated from schemas/, which `make
// schemas-check` keeps in step) one field a line: `Message.field = number label type`, and
// reserved numbers as `Message reserved number`.
func schemaFields(t *testing.T) []string {
	t.Helper()
	var rows []string
	protoregistry.GlobalFiles.RangeFilesByPackage("wmrl.v1", func(fd protoreflect.FileDescriptor) bool {
		rows = append(rows, messageFields(fd.Messages())...)
		return true
	})
	if len(rows) == 0 {
		t.Fatal("no wmrl.v1 descriptors registered")
	}
	slices.Sort(rows)
	return rows
}

func messageFields(ms protoreflect.MessageDescriptors) []string {
	var rows []string
	for i := range ms.Len() {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue
		}
		fs := m.Fields()
		for j := range fs.Len() {
			rows = append(rows, fieldRow(fs.Get(j)))
		}
		rs := m.ReservedRanges()
		for j := range rs.Len() {
			for n := rs.Get(j)[0]; n < rs.Get(j)[1]; n++ {
				rows = append(rows, fmt.Sprintf("%s reserved %d", m.FullName(), n))
			}
		}
		rows = append(rows, messageFields(m.Messages())...)
	}
	return rows
}

func fieldRow(f protoreflect.FieldDescriptor) string {
	typ := f.Kind().String()
	switch {
	case f.IsMap():
		typ = fmt.Sprintf("map<%s,%s>", f.MapKey().Kind(), f.MapValue().Kind())
	case f.Message() != nil:
		typ = string(f.Message().FullName())
	}
	label := f.Cardinality().String()
	if f.HasOptionalKeyword() {
		label = "explicit"
	}
	return fmt.Sprintf("%s.%s = %d %s %s", f.ContainingMessage().FullName(), f.Name(), f.Number(), label, typ)
}

// incompatible returns what a change from the released rows to the current ones breaks: a
// released field must stay with its number, name, label and type, or its number be reserved.
func incompatible(released, current []string) []string {
	have := map[string]bool{}
	numbers := map[string]string{} // "Message number" → current row
	for _, r := range current {
		have[r] = true
		if msg, num, ok := rowNumber(r); ok {
			numbers[msg+" "+num] = r
		}
	}
	var bad []string
	for _, r := range released {
		if have[r] || strings.Contains(r, " reserved ") {
			if !have[r] {
				bad = append(bad, "reserved number released again: "+r)
			}
			continue
		}
		msg, num, _ := rowNumber(r)
		if now, ok := numbers[msg+" "+num]; ok && !strings.Contains(now, " reserved ") {
			bad = append(bad, fmt.Sprintf("changed: %s → %s", r, now))
		} else if !ok {
			bad = append(bad, "removed without reserving its number: "+r)
		}
	}
	return bad
}

// rowNumber parses "M.f = 3 ..." and "M reserved 3" into ("M", "3").
func rowNumber(r string) (string, string, bool) {
	if m, n, ok := strings.Cut(r, " reserved "); ok {
		return m, n, true
	}
	lhs, rhs, ok := strings.Cut(r, " = ")
	if !ok {
		return "", "", false
	}
	msg := lhs[:strings.LastIndex(lhs, ".")]
	num, _, _ := strings.Cut(rhs, " ")
	return msg, num, true
}

// TestSchemaEvolution is the CI check over the schema folder: the current schemas must be a
// compatible evolution of the released ones (schemas/testdata/fields.txt).
func TestSchemaEvolution(t *testing.T) {
	current := schemaFields(t)
	if *updateSchemas {
		if err := os.WriteFile(filepath.FromSlash(schemaSnapshot), []byte(strings.Join(current, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.FromSlash(schemaSnapshot))
	if err != nil {
		t.Fatalf("%v (first release: go test ./topics -run TestSchemaEvolution -update-schemas)", err)
	}
	released := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, p := range incompatible(released, current) {
		t.Errorf("schemas/wmrl/v1 breaks a released schema: %s", p)
	}
	if added := len(current) - len(released); added > 0 && !t.Failed() {
		t.Logf("%d field(s) added since the snapshot: rerun with -update-schemas when they are released", added)
	}
}

// TestSchemaEvolutionRules: the rules themselves, on edited copies of the current schema.
func TestSchemaEvolutionRules(t *testing.T) {
	released := schemaFields(t)
	const score = "wmrl.v1.PredictedReward.score = 8 explicit double"
	if !slices.Contains(released, score) {
		t.Fatalf("fixture row %q not in the schema", score)
	}
	edit := func(drop string, add ...string) []string {
		out := slices.DeleteFunc(slices.Clone(released), func(r string) bool { return r == drop })
		return append(out, add...)
	}
	for _, c := range []struct {
		name    string
		current []string
		ok      bool
	}{
		{"unchanged", released, true},
		{"optional field added", edit("", "wmrl.v1.PredictedReward.confidence = 15 explicit double"), true},
		{"message added", edit("", "wmrl.v1.Verdict.run_id = 1 optional string"), true},
		{"field removed", edit(score), false},
		{"field removed, number reserved", edit(score, "wmrl.v1.PredictedReward reserved 8"), true},
		{"field retyped", edit(score, "wmrl.v1.PredictedReward.score = 8 explicit float"), false},
		{"field renamed", edit(score, "wmrl.v1.PredictedReward.value = 8 explicit double"), false},
		{"field made repeated", edit(score, "wmrl.v1.PredictedReward.score = 8 repeated double"), false},
	} {
		if got := incompatible(released, c.current); (len(got) == 0) != c.ok {
			t.Errorf("%s: problems %q, want compatible=%v", c.name, got, c.ok)
		}
	}
}

// TestOldReaderSkipsNewOptionalField: a writer built from a newer schema, with an optional field
// this reader's schema lacks, is read by this reader as if the field were absent.
func TestOldReaderSkipsNewOptionalField(t *testing.T) {
	fdp := protodesc.ToFileDescriptorProto(wirepb.File_wmrl_v1_predicted_proto)
	for _, m := range fdp.MessageType {
		if m.GetName() == "PredictedReward" {
			m.Field = append(m.Field, &descriptorpb.FieldDescriptorProto{
				Name: proto.String("confidence"), Number: proto.Int32(15), JsonName: proto.String("confidence"),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Type: descriptorpb.FieldDescriptorProto_TYPE_DOUBLE.Enum(),
				Proto3Optional: proto.Bool(true), OneofIndex: proto.Int32(int32(len(m.OneofDecl))),
			})
			m.OneofDecl = append(m.OneofDecl, &descriptorpb.OneofDescriptorProto{Name: proto.String("_confidence")})
		}
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	newer := dynamicpb.NewMessage(fd.Messages().ByName("PredictedReward"))
	old, err := EncodePredictedProto(samplePredicted())
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(old, newer); err != nil {
		t.Fatal(err)
	}
	newer.Set(newer.Descriptor().Fields().ByName("confidence"), protoreflect.ValueOfFloat64(0.9))
	b, err := proto.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= len(old) {
		t.Fatalf("the newer record (%d bytes) does not carry the new field (old: %d)", len(b), len(old))
	}
	got, err := DecodePredictedProto(b)
	if err != nil {
		t.Fatalf("old reader refused a record with a new optional field: %v", err)
	}
	if !reflect.DeepEqual(got, samplePredicted()) {
		t.Errorf("old reader read %+v, want %+v", got, samplePredicted())
	}
}
