package sim

import (
	"testing"

	"github.com/wmrl/wmrl/correction"
)

func TestWithMap(t *testing.T) {
	for _, tc := range []struct {
		k       correction.MapKind
		renamed map[string]string // arm → new name; arms not listed keep name and config
	}{
		{correction.MapIsotonic, nil},
		{correction.MapCentred, map[string]string{ArmOD: "od-centred", ArmWMRL: "wmrl-centred"}},
		{correction.MapZSpace, map[string]string{ArmOD: "od-zspace", ArmWMRL: "wmrl-zspace"}},
	} {
		t.Run(tc.k.String(), func(t *testing.T) {
			arms := append(Arms(0.25), GridArms(0.25)...)
			got := WithMap(arms, tc.k)
			for i, a := range arms {
				name, ok := tc.renamed[a.Name]
				if !ok {
					if got[i] != a {
						t.Errorf("arm %s changed: %+v", a.Name, got[i])
					}
					continue
				}
				if got[i].Name != name || got[i].Correction.Map != tc.k {
					t.Errorf("arm %s: %s with map %v", a.Name, got[i].Name, got[i].Correction.Map)
				}
				if _, err := correction.New(got[i].Correction); err != nil {
					t.Errorf("arm %s: %v", name, err)
				}
			}
		})
	}
	as, err := ArmsByName([]string{"wmrl-zspace"}, 0.25)
	if err != nil || len(as) != 2 || as[1].Correction != WithMap(Arms(0.25), correction.MapZSpace)[5].Correction {
		t.Fatalf("ArmsByName(wmrl-zspace): %+v %v", as, err)
	}
}
