package topics

import "testing"

// benchDecode measures one decoder on the encoded sample record.
func benchDecode[T any](b *testing.B, enc func() ([]byte, error), dec func([]byte) (T, error)) {
	p, err := enc()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dec(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRollout(b *testing.B) {
	benchDecode(b, func() ([]byte, error) { return EncodeRollout(sampleRollout()) }, DecodeRollout)
}

func BenchmarkDecodeStep(b *testing.B) {
	benchDecode(b, func() ([]byte, error) { return EncodeStep(sampleStep()) }, DecodeStep)
}

func BenchmarkDecodePredicted(b *testing.B) {
	benchDecode(b, func() ([]byte, error) { return EncodePredicted(samplePredicted()) }, DecodePredicted)
}

func BenchmarkDecodeExecuted(b *testing.B) {
	benchDecode(b, func() ([]byte, error) { return EncodeExecuted(sampleImputed()) }, DecodeExecuted)
}

func BenchmarkDecodeCalibration(b *testing.B) {
	benchDecode(b, func() ([]byte, error) { return EncodeCalibration(sampleCalibration()) }, DecodeCalibration)
}

// BenchmarkDecodePredictedRecord is the correction consumer's per-record read of a predicted
// reward in Protobuf: content-type header, then the decoder.
func BenchmarkDecodePredictedRecord(b *testing.B) {
	n := NewNames("bench.")
	n.Format = FormatProtobuf
	r, err := n.PredictedRecord(samplePredicted())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(r.Value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := n.DecodePredictedRecord(b.Context(), r); err != nil {
			b.Fatal(err)
		}
	}
}
