package topics

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestPooledEncoderMatchesFreshWriter: the pooled encoder (cached schema message, reused builder
// and writer) writes the bytes a fresh RecordBuilder and ipc.Writer write, for both schemas,
// nulls, empty and varying batches, interleaved and from several goroutines.
func TestPooledEncoderMatchesFreshWriter(t *testing.T) {
	v2 := manyRows(13)
	for i := range v2 {
		v2[i].Staleness, v2[i].StalenessOK = int64(i%3), i%2 == 0
		if i%4 == 0 {
			v2[i].MaskReason = MaskStale
		}
	}
	nulls := manyRows(9)
	for i := range nulls {
		nulls[i].PredictedOK = i%3 != 0
		nulls[i].ExecutedOK, nulls[i].Executed = i%2 == 0, float64(i)/10
	}
	sets := [][]AdvantageRow{nil, manyRows(1), manyRows(64), nulls, v2, manyRows(500), v2[:1], nil, manyRows(3)}
	check := func(t *testing.T, rows []AdvantageRow) {
		id := AdvantageSchemaID(rows)
		got, err := encodeAdvantagesAs(rows, id)
		if err != nil {
			t.Fatal(err)
		}
		want := encodeAdvantagesFresh(t, rows, id)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d rows (%s): pooled encoder wrote %d bytes, a fresh writer %d, or they differ", len(rows), id, len(got), len(want))
		}
	}
	for range 3 {
		for _, rows := range sets {
			check(t, rows)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 {
				rows := sets[(g+i)%len(sets)]
				id := AdvantageSchemaID(rows)
				got, err := encodeAdvantagesAs(rows, id)
				if err != nil || !bytes.Equal(got, encodeAdvantagesFresh(t, rows, id)) {
					t.Errorf("goroutine %d batch %d differs: %v", g, i, err)
				}
			}
		})
	}
	wg.Wait()
}

// encodeAdvantagesFresh is the reference encoding: a new builder and IPC writer per payload.
func encodeAdvantagesFresh(t *testing.T, rows []AdvantageRow, id string) []byte {
	t.Helper()
	c := advCodecFor(id)
	mem := memory.NewGoAllocator()
	b := array.NewRecordBuilder(mem, c.schema)
	defer b.Release()
	c.fill(b, rows)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(c.schema), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		t.Fatal(fmt.Errorf("fresh writer: %w", err))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
