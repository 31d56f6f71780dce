package topics

import (
	"bytes"
	"strings"
	"testing"
)

func TestStepPolicyStep(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name   string
		policy *int64
		reason string
	}{
		{"absent", nil, ""},
		{"on-policy", i64(3), ""},
		{"two steps behind", i64(1), ""},
		{"first checkpoint", i64(0), ""},
		{"ahead of the step", i64(4), "invalid-field:policy_step"},
		{"negative", i64(-1), "invalid-field:policy_step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sampleStep()
			m.PolicyStep = tt.policy
			b, err := EncodeStep(m)
			if got := Reason(err); got != tt.reason {
				t.Fatalf("encode: Reason %q, want %q (%v)", got, tt.reason, err)
			}
			if err != nil {
				return
			}
			if has := bytes.Contains(b, []byte(`"policy_step"`)); has != (tt.policy != nil) {
				t.Fatalf("policy_step in %s: %v, want %v", b, has, tt.policy != nil)
			}
			back, err := DecodeStep(b)
			if err != nil {
				t.Fatal(err)
			}
			if (back.PolicyStep == nil) != (tt.policy == nil) || (back.PolicyStep != nil && *back.PolicyStep != *tt.policy) {
				t.Fatalf("policy_step round trip: got %v, want %v", back.PolicyStep, tt.policy)
			}
		})
	}
}

// A manifest without policy_step encodes to the bytes of writers that predate the field.
func TestStepWithoutPolicyStepUnchanged(t *testing.T) {
	b, err := EncodeStep(sampleStep())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema":"wmrl.step.v1","run_id":"r1","step":3,"policy_version":"ckpt-3","groups":[`
	if !strings.HasPrefix(string(b), want) {
		t.Fatalf("encoding changed:\n got %s\nwant prefix %s", b, want)
	}
	// JSON null is the absent value, as for every optional field.
	null := strings.Replace(string(b), `"policy_version":"ckpt-3",`, `"policy_version":"ckpt-3","policy_step":null,`, 1)
	m, err := DecodeStep([]byte(null))
	if err != nil || m.PolicyStep != nil {
		t.Fatalf("policy_step null: %v, %v", m.PolicyStep, err)
	}
}

func TestAdvantageRowV2Validate(t *testing.T) {
	masked := func(r *AdvantageRow) { r.Mask, r.Advantage, r.Used, r.Weight = false, 0, 0, 0 }
	tests := []struct {
		name   string
		mod    func(*AdvantageRow)
		reason string
	}{
		{"staleness known", func(r *AdvantageRow) { r.Staleness, r.StalenessOK = 3, true }, ""},
		{"staleness zero", func(r *AdvantageRow) { r.StalenessOK = true }, ""},
		{"staleness without ok", func(r *AdvantageRow) { r.Staleness = 3 }, "invalid-field:staleness"},
		{"negative staleness", func(r *AdvantageRow) { r.Staleness, r.StalenessOK = -1, true }, "invalid-field:staleness"},
		{"masked as stale", func(r *AdvantageRow) { masked(r); r.Staleness, r.StalenessOK, r.MaskReason = 5, true, MaskStale }, ""},
		{"stale but unmasked", func(r *AdvantageRow) { r.Staleness, r.StalenessOK, r.MaskReason = 5, true, MaskStale }, "invalid-field:mask_reason"},
		{"stale without staleness", func(r *AdvantageRow) { masked(r); r.MaskReason = MaskStale }, "invalid-field:mask_reason"},
		{"unknown reason", func(r *AdvantageRow) { masked(r); r.MaskReason = "tired" }, "invalid-field:mask_reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sampleAdvantages()[0]
			tt.mod(&r)
			err := r.Validate()
			if got := Reason(err); got != tt.reason {
				t.Fatalf("Reason %q, want %q (%v)", got, tt.reason, err)
			}
		})
	}
}

func TestAdvantagesV2Layout(t *testing.T) {
	tests := []struct {
		name   string
		rows   []AdvantageRow
		schema string
	}{
		{"no v2 field", sampleAdvantages(), SchemaAdvantages},
		{"no rows", nil, SchemaAdvantages},
		{"staleness", sampleAdvantagesV2(), SchemaAdvantagesV2},
		{"one row with a staleness", func() []AdvantageRow {
			rows := sampleAdvantages()
			rows[3].StalenessOK = true
			return rows
		}(), SchemaAdvantagesV2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AdvantageSchemaID(tt.rows); got != tt.schema {
				t.Fatalf("AdvantageSchemaID = %q, want %q", got, tt.schema)
			}
			b, err := EncodeAdvantages(tt.rows)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tt.schema)) {
				t.Fatalf("payload does not carry %q in its Arrow metadata", tt.schema)
			}
			back, err := DecodeAdvantages(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != len(tt.rows) {
				t.Fatalf("%d rows back, want %d", len(back), len(tt.rows))
			}
			for i := range back {
				if back[i] != tt.rows[i] {
					t.Fatalf("row %d:\n got %+v\nwant %+v", i, back[i], tt.rows[i])
				}
			}
		})
	}
}

// Every chunk of a step has the step's layout, and its wmrl-schema header says which.
func TestAdvantageRecordsV2Chunks(t *testing.T) {
	var rows []AdvantageRow
	for range 20 {
		rows = append(rows, sampleAdvantages()[:8]...)
	}
	for i := range rows {
		rows[i].GroupID = "g" + string(rune('a'+i/8))
		rows[i].RolloutID = rows[i].GroupID + "-r" + string(rune('a'+i%8))
	}
	// Only the last row uses v2: the whole step must still be v2.
	rows[len(rows)-1].Staleness, rows[len(rows)-1].StalenessOK = 1, true
	recs, err := NewNames("").AdvantageRecords("r1", "", 3, rows, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 {
		t.Fatalf("%d chunks, want several", len(recs))
	}
	var n int
	for i, rec := range recs {
		if v, _ := HeaderValue(rec.Headers, HeaderSchema); v != SchemaAdvantagesV2 {
			t.Fatalf("chunk %d: header %s = %q", i, HeaderSchema, v)
		}
		if v, _ := HeaderValue(rec.Headers, HeaderContentType); v != ContentTypeArrow {
			t.Fatalf("chunk %d: content type %q", i, v)
		}
		got, err := decodeAny(SchemaAdvantagesV2, rec.Value)
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		n += len(got.([]AdvantageRow))
	}
	if n != len(rows) {
		t.Fatalf("%d rows in the chunks, want %d", n, len(rows))
	}
}

func TestDigestV2Fields(t *testing.T) {
	base := DigestRows(digestRowsFixture())
	same := map[string]func(*AdvantageRow){
		"unknown staleness": func(r *AdvantageRow) { r.StalenessOK = false },
	}
	differ := map[string]func(*AdvantageRow){
		"staleness 0":      func(r *AdvantageRow) { r.StalenessOK = true },
		"staleness 1":      func(r *AdvantageRow) { r.Staleness, r.StalenessOK = 1, true },
		"stale mask":       func(r *AdvantageRow) { r.Mask, r.Staleness, r.StalenessOK, r.MaskReason = false, 1, true, MaskStale },
		"mask without why": func(r *AdvantageRow) { r.Mask, r.Staleness, r.StalenessOK = false, 1, true },
	}
	seen := map[string]string{base: "base"}
	for name, mod := range same {
		rows := digestRowsFixture()
		mod(&rows[0])
		if got := DigestRows(rows); got != base {
			t.Errorf("%s changed the digest", name)
		}
	}
	for name, mod := range differ {
		rows := digestRowsFixture()
		mod(&rows[0])
		got := DigestRows(rows)
		if other, dup := seen[got]; dup {
			t.Errorf("%s digests like %s", name, other)
		}
		seen[got] = name
	}
}
