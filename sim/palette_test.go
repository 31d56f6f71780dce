package sim

import (
	"image/color"
	"testing"
)

// isGrey: greys (R = G = B) are the colours left for reference lines.
func isGrey(c color.NRGBA) bool { return c.R == c.G && c.G == c.B }

// Every standard arm has its own colour, none of them grey (greys are reference lines), and an
// arm outside the standard set gets the same colour every time.
func TestArmColors(t *testing.T) {
	seen := map[[3]uint8]string{}
	for _, a := range Arms(0.25) {
		c := ArmColor(a.Name)
		if isGrey(c) || c.A != 255 {
			t.Errorf("%s: %v is grey or translucent", a.Name, c)
		}
		k := [3]uint8{c.R, c.G, c.B}
		if other, ok := seen[k]; ok {
			t.Errorf("%s and %s share %v", a.Name, other, c)
		}
		seen[k] = a.Name
	}
	for _, name := range []string{"my-arm", "od-0.5", ""} {
		c := ArmColor(name)
		if c != ArmColor(name) || isGrey(c) {
			t.Errorf("%q: %v", name, c)
		}
	}
}
