package correct

import (
	"reflect"
	"strings"
	"testing"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// Every field of correction.Config, and every per-run limit, changes the settings text: a field
// added to either without a line in digestSettings fails here, not in a silently diverging replay.
func TestDigestConfigCoversEveryField(t *testing.T) {
	base := DigestConfig{Correction: correction.DefaultConfig(), MaxStaleness: 2, Limits: DefaultLimits()}
	text := base.Text()
	perturb := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint8:
			v.SetUint(v.Uint() + 1)
		case reflect.Float64:
			v.SetFloat(v.Float() + 0.5)
		default:
			t.Fatalf("no perturbation for kind %v", v.Kind())
		}
	}
	cv := reflect.ValueOf(base.Correction)
	for i := range cv.NumField() {
		d := base
		perturb(reflect.ValueOf(&d.Correction).Elem().Field(i))
		if d.Text() == text {
			t.Errorf("correction.Config.%s is not in the settings text", cv.Type().Field(i).Name)
		}
	}
	perInstance := map[string]bool{"PendingSteps": true, "PendingGroups": true, "ActiveRuns": true, "HeldDeadLetters": true}
	lv := reflect.ValueOf(base.Limits)
	for i := range lv.NumField() {
		name := lv.Type().Field(i).Name
		d := base
		perturb(reflect.ValueOf(&d.Limits).Elem().Field(i))
		if changed := d.Text() != text; changed == perInstance[name] {
			t.Errorf("Limits.%s: settings text changed %v; want %v (per-instance limits are not replayable)", name, changed, !perInstance[name])
		}
	}
	d := base
	d.MaxStaleness++
	if d.Text() == text {
		t.Error("MaxStaleness is not in the settings text")
	}
}

func TestSettingsDiff(t *testing.T) {
	live := DigestConfig{Correction: correction.DefaultConfig(), MaxStaleness: 3, Limits: DefaultLimits()}
	mine := live
	if diff := SettingsDiff(live.Text(), mine.Text()); diff != nil {
		t.Fatalf("equal settings differ: %v", diff)
	}
	mine.MaxStaleness = 0
	mine.Limits.StepRows = 100
	mine.Correction.Eps = 1e-6
	got := strings.Join(SettingsDiff(live.Text(), mine.Text()), "; ")
	want := "--eps (eps): live 0.0001, replay 1e-06; --max-staleness (max-staleness): live 3, replay 0; --max-step-rows (max-step-rows): live 65536, replay 100"
	if got != want {
		t.Errorf("diff\n got %s\nwant %s", got, want)
	}
	// A setting one side does not know (another version of wmrl) differs too.
	got = strings.Join(SettingsDiff(live.Text()+" future=1", live.Text()), "; ")
	if got != "future: live 1, replay (not recorded)" {
		t.Errorf("unknown live setting: %q", got)
	}
	t.Logf("settings text (%d bytes): %s", len(live.Text()), live.Text())
	if n := len(live.Text()); n > 512 {
		t.Errorf("settings text of %d bytes, written with every snapshot", n)
	}
}

// TestTrustGateSetting: the gate is recorded only when on, so a run recorded with it off (or
// before it existed) keeps its settings text, and a replay with the other setting is refused
// naming --trust-gate.
func TestTrustGateSetting(t *testing.T) {
	off := DigestConfig{Correction: correction.DefaultConfig(), Limits: DefaultLimits()}
	on := off
	on.Correction.TrustGate = true
	if strings.Contains(off.Text(), "trust-gate") || !strings.HasSuffix(on.Text(), " trust-gate=true") {
		t.Fatalf("off %q\non %q", off.Text(), on.Text())
	}
	for _, d := range [][2]string{{on.Text(), off.Text()}, {off.Text(), on.Text()}} {
		got := strings.Join(SettingsDiff(d[0], d[1]), "; ")
		if !strings.HasPrefix(got, "--trust-gate (trust-gate): ") {
			t.Errorf("diff %q", got)
		}
	}
}

// TestSchemaIDsCheckedSetting: a consumer that checks schema ids against a registry records it
// (only then), so a replay that does not check them is refused naming --schema-registry.
func TestSchemaIDsCheckedSetting(t *testing.T) {
	off := DigestConfig{Correction: correction.DefaultConfig(), Limits: DefaultLimits()}
	on := off
	on.SchemaIDsChecked = true
	if strings.Contains(off.Text(), "schema-ids") || !strings.HasSuffix(on.Text(), " schema-ids-checked=true") {
		t.Fatalf("off %q\non %q", off.Text(), on.Text())
	}
	if got := strings.Join(SettingsDiff(on.Text(), off.Text()), "; "); got != "--schema-registry (schema-ids-checked): live true, replay (not recorded)" {
		t.Errorf("diff %q", got)
	}
	reg, err := schemareg.New(schemareg.Config{URLs: []string{"http://127.0.0.1:1"}}) // never contacted
	if err != nil {
		t.Fatal(err)
	}
	corr, err := correction.New(correction.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	names := testNames
	names.Registry = reg
	for _, n := range []topics.Names{testNames, names} {
		e := newEngine(corr, n, 0, DefaultLimits(), nil)
		if got, want := strings.Contains(e.settings, "schema-ids-checked=true"), n.Registry != nil; got != want {
			t.Errorf("registry %v: settings %q", n.Registry != nil, e.settings)
		}
	}
}
