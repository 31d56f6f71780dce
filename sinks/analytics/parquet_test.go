package analytics

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/wmrl/wmrl/topics"
)

func TestParquetRoundTrip(t *testing.T) {
	dir := t.TempDir()
	steps := [][]topics.AdvantageRow{advRows("a", 0, false), advRows("a", 1, false)}
	data, err := encodeAdvantagesParquet(steps)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(dir, "advantages-a-0-1.parquet", data); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAdvantagesFile(filepath.Join(dir, "advantages-a-0-1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]topics.AdvantageRow(nil), steps[0]...), steps[1]...); !reflect.DeepEqual(got, want) {
		t.Fatal("advantage rows changed in the Parquet round trip")
	}

	cal := []CalibrationRow{CalibrationRowOf(snapshot("a", 0, false)), CalibrationRowOf(snapshot("a", 1, false))}
	cal[0].BreakpointsX, cal[0].BreakpointsY = nil, nil // identity map before the first fit
	data, err = encodeCalibrationParquet(cal)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(dir, "calibration-a-0-1.parquet", data); err != nil {
		t.Fatal(err)
	}
	gotCal, err := ReadCalibrationFile(filepath.Join(dir, "calibration-a-0-1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotCal, cal) {
		t.Fatalf("calibration rows changed:\n got %+v\nwant %+v", gotCal, cal)
	}

	// A calibration file is not an advantages file: the schema check says so.
	if _, err := ReadAdvantagesFile(filepath.Join(dir, "calibration-a-0-1.parquet")); !errors.Is(err, topics.ErrUnknownSchema) && !errors.Is(err, topics.ErrMalformed) {
		t.Fatalf("reading a calibration file as advantages: %v", err)
	}
	if _, err := ReadCalibrationFile(filepath.Join(dir, "advantages-a-0-1.parquet")); !errors.Is(err, topics.ErrMalformed) {
		t.Fatalf("reading an advantages file as calibration: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}
