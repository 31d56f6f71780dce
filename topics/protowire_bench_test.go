package topics

import "testing"

// BenchmarkDecodeProto measures the Protobuf decoders (protowire.go plus Validate) on each
// record's first sample, one sub-benchmark per record type; compare builds with benchstat over
// alternating -count runs.
func BenchmarkDecodeProto(b *testing.B) {
	for _, c := range protoCases() {
		p, err := c.enc(c.samples[0])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.dec(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
