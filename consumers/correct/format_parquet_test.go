package correct

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wmrl/wmrl/sinks/analytics"
	"github.com/wmrl/wmrl/topics"
)

// tapOutput is what the analytics tap wrote for one mode: per kind ("advantages", "calibration")
// the table its files hold, and each file's bytes by name.
type tapOutput struct {
	tables map[string]parquetTable
	files  map[string][]byte
}

// tapParquet runs the analytics tap (`wmrl analytics`) over names' advantages and calibration
// topics until it has fetched every offset there, stops it (which flushes the partial files) and
// reads its Parquet files back.
func tapParquet(t *testing.T, seeds []string, names topics.Names) tapOutput {
	t.Helper()
	want := endOffsets(t, seeds, names.Advantages(), names.Calibration())
	dir := t.TempDir()
	tap, err := analytics.New(analytics.Config{Brokers: seeds, Names: names, Group: names.Prefix + "tap", Dir: dir,
		RollSteps: 1000, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tap.Run(runCtx) }()
	for {
		st := tap.Stats()
		if st.Messages >= want {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("tap stopped early: %v (stats %+v)", err, st)
		case <-ctx.Done():
			t.Fatalf("tap fetched %d of %d offsets (stats %+v)", st.Messages, want, st)
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("tap: %v", err)
	}
	if st := tap.Stats(); st.Skipped != 0 || st.Rows == 0 || st.Calibration == 0 {
		t.Fatalf("tap stats %+v: want rows and snapshots written, nothing skipped", st)
	}
	out := tapOutput{tables: map[string]parquetTable{}, files: map[string][]byte{}}
	for _, kind := range []string{"advantages", "calibration"} {
		out.tables[kind] = readParquet(t, dir, kind)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.parquet"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out.files[filepath.Base(p)] = b
	}
	return out
}

// endOffsets sums the end offsets of the topics' partitions: every offset the tap fetches,
// records and transaction markers alike (the tap counts both in Stats.Messages).
func endOffsets(t *testing.T, seeds []string, tops ...string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, tops...)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// parquetTable is one kind of the tap's files (advantages or calibration) of one directory: the
// Arrow schema stored in the files, and each row as its columns' values (arrow's ValueStr:
// shortest round-trip floats, lists in full, "(null)" for a null), sorted.
type parquetTable struct {
	schema *arrow.Schema
	rows   []string
}

// readParquet reads every file of dir whose name starts with kind into one parquetTable. Rows
// are sorted because the tap writes them in arrival order, which across partitions differs
// between two runs of the same input; which step lands in which file (the roll) does too.
func readParquet(t *testing.T, dir, kind string) parquetTable {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, kind+"-*.parquet"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no %s files in %s (%v)", kind, dir, err)
	}
	var out parquetTable
	for _, p := range paths {
		rdr, err := file.OpenParquetFile(p, false)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.NewGoAllocator())
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if out.schema == nil {
			out.schema = tbl.Schema()
		} else if !out.schema.Equal(tbl.Schema()) || !out.schema.Metadata().Equal(tbl.Schema().Metadata()) {
			t.Fatalf("%s: schema %v differs from the directory's first file's %v", p, tbl.Schema(), out.schema)
		}
		cols := make([][]arrow.Array, tbl.NumCols())
		for c := range cols {
			cols[c] = tbl.Column(c).Data().Chunks()
		}
		for chunk := range cols[0] {
			for i := 0; i < cols[0][chunk].Len(); i++ {
				vals := make([]string, len(cols))
				for c := range cols {
					vals[c] = cols[c][chunk].ValueStr(i)
				}
				out.rows = append(out.rows, strings.Join(vals, "\x1f"))
			}
		}
		tbl.Release()
		_ = rdr.Close()
	}
	slices.Sort(out.rows)
	return out
}

// sameParquet requires two modes' tap outputs to hold the same tables: equal Arrow schemas
// (names, types, the schema metadata the tap stores) and, per kind, the same rows column for
// column. It reports whether same-named files are also equal byte for byte, which the comparison
// does not need: a file's split into row groups and its name follow the roll, i.e. arrival order.
func sameParquet(t *testing.T, modeA string, a tapOutput, modeB string, b tapOutput) {
	t.Helper()
	for _, kind := range []string{"advantages", "calibration"} {
		ta, tb := a.tables[kind], b.tables[kind]
		if !ta.schema.Equal(tb.schema) || !ta.schema.Metadata().Equal(tb.schema.Metadata()) {
			t.Errorf("%s vs %s, %s: schemas differ:\n%v\n%v", modeA, modeB, kind, ta.schema, tb.schema)
			continue
		}
		if len(ta.rows) == 0 || len(ta.rows) != len(tb.rows) {
			t.Errorf("%s vs %s, %s: %d rows against %d", modeA, modeB, kind, len(ta.rows), len(tb.rows))
			continue
		}
		for i := range ta.rows {
			if ta.rows[i] != tb.rows[i] {
				t.Errorf("%s vs %s, %s: row %d differs:\n%s\n%s", modeA, modeB, kind, i, ta.rows[i], tb.rows[i])
				break
			}
		}
	}
	same, of := 0, 0
	for name, x := range a.files {
		if y, ok := b.files[name]; ok {
			of++
			if bytes.Equal(x, y) {
				same++
			}
		}
	}
	t.Logf("parquet %s vs %s: %d of %d same-named files equal byte for byte (%d files)", modeA, modeB, same, of, len(a.files))
}

// parquetByMode compares every mode's tap output with the first mode's (by name).
func parquetByMode(t *testing.T, outs map[string]tapOutput) {
	t.Helper()
	modes := slices.Sorted(maps.Keys(outs))
	if len(modes) < 2 {
		t.Fatalf("parquet of %d modes, want at least 2: %v", len(modes), modes)
	}
	for _, m := range modes[1:] {
		sameParquet(t, modes[0], outs[modes[0]], m, outs[m])
	}
}
