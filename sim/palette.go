package sim

import (
	"hash/fnv"
	"image/color"
)

// armPalette is the one colour table of every plot that draws arms (the demo's and simulate's
// report, the error grid's line plots): an arm keeps its colour in every plot, whichever arms a
// run includes and in whichever order. The colours are Okabe–Ito's colour-blind-safe set (plus a
// brown); greys are left for reference lines (targets, caps, identity), so a grey line is never an
// arm.
var armPalette = map[string]color.NRGBA{
	ArmRealGRPO:  {R: 0xD5, G: 0x5E, B: 0x00, A: 0xFF}, // vermillion
	ArmPureWM:    {R: 0x00, G: 0x9E, B: 0x73, A: 0xFF}, // bluish green
	ArmNone:      {R: 0xE6, G: 0x9F, B: 0x00, A: 0xFF}, // orange
	ArmIVD:       {R: 0x56, G: 0xB4, B: 0xE9, A: 0xFF}, // sky blue
	ArmOD:        {R: 0xCC, G: 0x79, B: 0xA7, A: 0xFF}, // reddish purple
	ArmWMRL:      {R: 0x00, G: 0x72, B: 0xB2, A: 0xFF}, // blue
	ArmReference: {R: 0x8C, G: 0x56, B: 0x4B, A: 0xFF}, // brown
}

// extraArmColours colour arms outside the standard set; the name picks one by hash, so such an arm
// too has the same colour in every plot.
var extraArmColours = []color.NRGBA{
	{R: 0x7F, G: 0x3C, B: 0x8D, A: 0xFF},
	{R: 0x11, G: 0xA5, B: 0x79, A: 0xFF},
	{R: 0x3B, G: 0x3B, B: 0x98, A: 0xFF},
	{R: 0xA0, G: 0x7D, B: 0x00, A: 0xFF},
	{R: 0xE7, G: 0x3F, B: 0x74, A: 0xFF},
}

// ArmColor is the colour of the named arm in every plot.
func ArmColor(arm string) color.NRGBA {
	if c, ok := armPalette[arm]; ok {
		return c
	}
	h := fnv.New32a()
	h.Write([]byte(arm))
	return extraArmColours[h.Sum32()%uint32(len(extraArmColours))]
}
