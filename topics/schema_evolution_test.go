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

// incompatible returns what a change from the released rows to the current ones breaks. The rule
// is the schema registry's (Apicurio Registry 2.6.13 under BACKWARD, the registry the tests and
// deploy/local run; TestEvolutionRulesMatchRegistry holds the two together case by case): a
// released field must stay with its number, name, label and type, and a reserved number stay
// reserved. A field may not be removed even when its number is then reserved, which protobuf
// itself allows: Apicurio's checkNoChangingFieldNames finds the number's name "changed" to none
// (https://github.com/Apicurio/apicurio-registry/issues/1334, open). Mark the field
// `[deprecated = true]` and stop writing it instead (an unset proto3 field costs no bytes).
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
		if have[r] {
			continue
		}
		if strings.Contains(r, " reserved ") {
			bad = append(bad, "reserved number released again: "+r)
			continue
		}
		msg, num, _ := rowNumber(r)
		now, ok := numbers[msg+" "+num]
		switch {
		case !ok:
			bad = append(bad, "removed: "+r)
		case strings.Contains(now, " reserved "):
			bad = append(bad, "removed, its number reserved (the registry refuses this too: deprecate the field instead): "+r)
		default:
			bad = append(bad, fmt.Sprintf("changed: %s → %s", r, now))
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

// EvolutionCase is one schema change, as an edit of predicted.proto's text (what the registry
// is given) and the same edit of its rows (what incompatible is given).
type EvolutionCase struct {
	Name string
	// V1 and V2 are the text edits (old, new) from the released predicted.proto to the first and
	// second registered versions; a zero edit keeps the released text.
	V1, V2 [2]string
	// Released and Current are the rows of V1 and V2.
	Released, Current []string
	// OK: the change is compatible, for the registry (BACKWARD) and for incompatible alike.
	OK bool
}

// EvolutionCases are the rule cases; each was tried on Apicurio Registry 2.6.13 under BACKWARD
// (TestEvolutionRulesMatchRegistry does so again), and where protobuf's own rules differ the
// case says so.
func EvolutionCases(t *testing.T) []EvolutionCase {
	rows := schemaFields(t)
	const m = "wmrl.v1.PredictedReward"
	for _, r := range []string{m + ".score = 8 explicit double", m + ".latency_ms = 13 optional double",
		m + ".model = 11 optional string", m + ".attempts = 12 optional int64"} {
		if !slices.Contains(rows, r) {
			t.Fatalf("fixture row %q not in the schema", r)
		}
	}
	edit := func(in []string, drop string, add ...string) []string {
		out := slices.DeleteFunc(slices.Clone(in), func(r string) bool { return r == drop })
		return append(out, add...)
	}
	const score, latency, model, end = "  optional double score = 8;\n", "double latency_ms = 13;", "string model = 11;", "created_at = 14;\n}\n"
	reserved20 := [2]string{end, "created_at = 14;\n  reserved 20;\n}\n"}
	return []EvolutionCase{
		{Name: "unchanged", Released: rows, Current: rows, OK: true},
		{Name: "optional field added", V2: [2]string{end, "created_at = 14;\n  optional double confidence = 15;\n}\n"},
			Released: rows, Current: edit(rows, "", m+".confidence = 15 explicit double"), OK: true},
		{Name: "plain field added", V2: [2]string{end, "created_at = 14;\n  string note = 15;\n}\n"},
			Released: rows, Current: edit(rows, "", m+".note = 15 optional string"), OK: true},
		{Name: "repeated field added", V2: [2]string{end, "created_at = 14;\n  repeated string tags = 15;\n}\n"},
			Released: rows, Current: edit(rows, "", m+".tags = 15 repeated string"), OK: true},
		{Name: "message added", V2: [2]string{end, "created_at = 14;\n}\n\nmessage Verdict {\n  string run_id = 1;\n}\n"},
			Released: rows, Current: edit(rows, "", "wmrl.v1.Verdict.run_id = 1 optional string"), OK: true},
		{Name: "field deprecated", V2: [2]string{latency, "double latency_ms = 13 [deprecated = true];"},
			Released: rows, Current: rows, OK: true},
		{Name: "field removed", V2: [2]string{score, ""}, Released: rows, Current: edit(rows, m+".score = 8 explicit double")},
		// Protobuf allows this; Apicurio refuses it (issue 1334), and so do we.
		{Name: "field removed, number reserved", V2: [2]string{score, "  reserved 8;\n"},
			Released: rows, Current: edit(rows, m+".score = 8 explicit double", m+" reserved 8")},
		{Name: "field removed, number and name reserved", V2: [2]string{score, "  reserved 8;\n  reserved \"score\";\n"},
			Released: rows, Current: edit(rows, m+".score = 8 explicit double", m+" reserved 8")},
		{Name: "field retyped", V2: [2]string{score, "  optional float score = 8;\n"},
			Released: rows, Current: edit(rows, m+".score = 8 explicit double", m+".score = 8 explicit float")},
		// Protobuf calls int64 and int32 (and string and bytes) wire-compatible; Apicurio compares type names.
		{Name: "int64 field made int32", V2: [2]string{"int64 attempts = 12;", "int32 attempts = 12;"},
			Released: rows, Current: edit(rows, m+".attempts = 12 optional int64", m+".attempts = 12 optional int32")},
		{Name: "string field made bytes", V2: [2]string{model, "bytes model = 11;"},
			Released: rows, Current: edit(rows, m+".model = 11 optional string", m+".model = 11 optional bytes")},
		{Name: "field renamed", V2: [2]string{latency, "double latency = 13;"},
			Released: rows, Current: edit(rows, m+".latency_ms = 13 optional double", m+".latency = 13 optional double")},
		{Name: "field renumbered", V2: [2]string{model, "string model = 15;"},
			Released: rows, Current: edit(rows, m+".model = 11 optional string", m+".model = 15 optional string")},
		{Name: "field made repeated", V2: [2]string{model, "repeated string model = 11;"},
			Released: rows, Current: edit(rows, m+".model = 11 optional string", m+".model = 11 repeated string")},
		{Name: "optional keyword dropped", V2: [2]string{score, "  double score = 8;\n"},
			Released: rows, Current: edit(rows, m+".score = 8 explicit double", m+".score = 8 optional double")},
		{Name: "optional keyword added", V2: [2]string{latency, "optional double latency_ms = 13;"},
			Released: rows, Current: edit(rows, m+".latency_ms = 13 optional double", m+".latency_ms = 13 explicit double")},
		{Name: "reserved number kept, field added", V1: reserved20, V2: [2]string{end, "created_at = 14;\n  reserved 20;\n  string note = 21;\n}\n"},
			Released: edit(rows, "", m+" reserved 20"), Current: edit(rows, "", m+" reserved 20", m+".note = 21 optional string"), OK: true},
		{Name: "reserved number dropped", V1: reserved20, Released: edit(rows, "", m+" reserved 20"), Current: rows},
		{Name: "reserved number reused", V1: reserved20, V2: [2]string{end, "created_at = 14;\n  string note = 20;\n}\n"},
			Released: edit(rows, "", m+" reserved 20"), Current: edit(rows, "", m+".note = 20 optional string")},
	}
}

// TestSchemaEvolutionRules: the CI check's rules themselves, case by case.
func TestSchemaEvolutionRules(t *testing.T) {
	for _, c := range EvolutionCases(t) {
		if got := incompatible(c.Released, c.Current); (len(got) == 0) != c.OK {
			t.Errorf("%s: problems %q, want compatible=%v", c.Name, got, c.OK)
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
