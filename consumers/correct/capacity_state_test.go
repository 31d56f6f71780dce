package correct

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
	"github.com/wmrl/wmrl/topics"
)

// capacityStates is how many full-window states BenchmarkCapacityStateBytes builds: enough that
// the per-state heap is not lost in the noise of one GC cycle, few enough to take a second.
const capacityStates = 64

// BenchmarkCapacityStateBytes measures what one (run, stream) state with a full 5,000-pair
// window costs, for docs/capacity.md (bench/capacity.sh):
//
//   - heap-bytes/state: the live Go heap the correction.State holds (what `wmrl correct` keeps in
//     memory per active (run, stream), before GC headroom);
//   - decoded-heap-bytes/state and decoded-stepped-heap-bytes/state: the same states decoded from
//     their encoding (as a rebuild makes them), then after one more step each, which allocates
//     the buffers a live refit keeps (the sorted copy's merge target);
//   - changelog-bytes/state: key + value bytes of the calibration records that survive
//     compaction for the state (the latest snapshot and the latest chunk of every window slot),
//     before batching and compression: what a rebuild reads per state.
func BenchmarkCapacityStateBytes(b *testing.B) {
	corr, err := correction.New(correction.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	names := topics.NewNames("")
	var heap, decoded, stepped, changelog float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		states := make([]*correction.State, capacityStates)
		for i := range states {
			states[i] = liveFullWindowState(b, corr, fmt.Sprintf("run-%05d", i), "stream0")
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / capacityStates

		b.StopTimer()
		var total int
		for _, st := range states {
			if st.Pairs() != correction.DefaultConfig().Window {
				b.Fatalf("state %s holds %d pairs, want a full window", st.Run(), st.Pairs())
			}
			n, err := compactedChangelogBytes(names, st)
			if err != nil {
				b.Fatal(err)
			}
			total += n
		}
		changelog = float64(total) / capacityStates
		encs := make([][]byte, len(states))
		for i, st := range states {
			encs[i] = st.Encode()
		}
		states = nil
		decoded, stepped = decodedHeap(b, corr, encs)
		b.StartTimer()
	}
	b.ReportMetric(heap, "heap-bytes/state")
	b.ReportMetric(changelog, "changelog-bytes/state")
	b.ReportMetric(decoded, "decoded-heap-bytes/state")
	b.ReportMetric(stepped, "decoded-stepped-heap-bytes/state")
}

// decodedHeap decodes the encoded states and returns the live heap per state held by them, and
// after one more step each.
func decodedHeap(b *testing.B, corr *correction.Corrector, encs [][]byte) (decoded, stepped float64) {
	b.Helper()
	var before, mid, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	states := make([]*correction.State, len(encs))
	for i, enc := range encs {
		st, err := correction.DecodeState(enc)
		if err != nil {
			b.Fatal(err)
		}
		states[i] = st
	}
	runtime.GC()
	runtime.ReadMemStats(&mid)
	for _, st := range states {
		if _, err := corr.Advance(st, liveStep(st.Run(), st.Stream(), st.SealedStep()+1, func() float64 { return 0.5 }), nil); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(states)
	n := float64(len(encs))
	return float64(int64(mid.HeapAlloc)-int64(before.HeapAlloc)) / n, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
}

// liveFullWindowState is a state that filled its window the way a live run does: steps of 8
// groups of 8 rollouts, 2 of them anchor groups (16 pairs a step), continuous scores, 330 steps
// (5,280 pairs, so the window is full and has slid). Unlike fullWindowState's few huge steps,
// its slices grew as a live state's do.
func liveFullWindowState(b *testing.B, corr *correction.Corrector, run, stream string) *correction.State {
	b.Helper()
	st := corr.NewState(run, stream)
	x := uint64(len(run)*7919 + len(stream))
	next := func() float64 { // SplitMix64, enough for scores
		x += 0x9e3779b97f4a7c15
		z := (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return float64((z^(z>>31))>>11) / (1 << 53)
	}
	for v := range 330 {
		if _, err := corr.Advance(st, liveStep(run, stream, int64(v), next), nil); err != nil {
			b.Fatal(err)
		}
	}
	return st
}

// liveStep is step v: 8 groups of 8 rollouts, groups 0 and 4 anchors, true scores from score.
func liveStep(run, stream string, v int64, score func() float64) correction.Step {
	groups := make([]correction.Group, 8)
	for g := range groups {
		groups[g] = correction.Group{ID: fmt.Sprintf("s%d-g%d", v, g), Anchor: g%4 == 0}
		for k := range 8 {
			truth := score()
			r := correction.Rollout{ID: fmt.Sprintf("r%d", k), Predicted: correction.Reward{Score: 0.15 + 0.8*truth, OK: true}}
			if groups[g].Anchor {
				r.Executed = correction.Reward{Score: truth, OK: true}
			}
			groups[g].Rollouts = append(groups[g].Rollouts, r)
		}
	}
	return correction.Step{Run: run, Stream: stream, Step: v, Groups: groups}
}

// sealedWhole is st sealed as a consumer seals it when its whole window is written: the
// snapshot and every chunk of the window.
func sealedWhole(st *correction.State) *sealed {
	return &sealed{run: st.Run(), step: st.SealedStep(), chunks: [][]statestore.Chunk{statestore.WindowChunks(st, 0)},
		snaps: []topics.CalibrationSnapshot{{RunID: st.Run(), Stream: st.Stream(), Step: st.SealedStep(),
			Digest: fmt.Sprintf("%x", st.Digest()), State: st.EncodeHead(), FitVersion: st.FitVersion(), Pairs: st.Pairs()}}}
}

// compactedChangelogBytes is the key and value bytes of st's calibration records after
// compaction: its snapshot and every chunk of its window, as a consumer writes them.
func compactedChangelogBytes(names topics.Names, st *correction.State) (int, error) {
	recs, err := calibrationRecords(names, sealedWhole(st), nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range recs {
		n += len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += len(h.Key) + len(h.Value)
		}
	}
	return n, nil
}
