package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/wmrl/wmrl/correction"
	"github.com/wmrl/wmrl/statestore"
)

// The calibration topic's snapshots carry the map's breakpoints only every few dozen steps (they
// are not part of the state's changelog, which stays O(change) per step), so a short run would
// show only the identity map although the consumer refitted many times. The correction
// consumer's Redis state holds the map in force, so when the head reports a fit version the page
// has no map for, the follower reads that state and adds its map.

// NeedsMap reports whether the run has no map of fit version fit yet (from a snapshot or Redis).
func (m *Model) NeedsMap(k runKey, fit uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[k]
	if !ok || fit == 0 {
		return false
	}
	if _, ok := r.redisMaps[fit]; ok {
		return false
	}
	for _, si := range r.snaps {
		if si.s.FitVersion == fit && len(si.s.BreakX) > 0 {
			return false
		}
	}
	return true
}

// SetRedisMap adds the map in force after mp.Step, read from the consumer's Redis state.
func (m *Model) SetRedisMap(k runKey, mp Map) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.runs[k]
	if !ok {
		return
	}
	if r.redisMaps == nil {
		r.redisMaps = map[uint64]Map{}
	}
	r.redisMaps[mp.FitVersion] = mp
	m.bump()
}

// withRedisMaps merges the maps read from Redis into the snapshots' maps: a fit version a
// snapshot already shows keeps the snapshot's (earlier) step; the result is in step order.
func (r *runModel) withRedisMaps(maps []Map) []Map {
	if len(r.redisMaps) == 0 {
		return maps
	}
	have := map[uint64]bool{}
	for _, mp := range maps {
		have[mp.FitVersion] = true
	}
	for fit, mp := range r.redisMaps {
		if !have[fit] {
			maps = append(maps, mp)
		}
	}
	slices.SortStableFunc(maps, func(a, b Map) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.FitVersion, b.FitVersion))
	})
	return maps
}

// redisMap reads the map in force after step from the consumer's Redis state.
func redisMap(ctx context.Context, st *statestore.Store, k runKey, step int64) (Map, error) {
	b, err := st.ReadState(ctx, k.run, k.stream, step)
	if err != nil {
		return Map{}, fmt.Errorf("read state of %s step %d: %w", k.id(), step, err)
	}
	s, err := correction.DecodeState(b)
	if err != nil {
		return Map{}, fmt.Errorf("decode state of %s step %d: %w", k.id(), step, err)
	}
	x, y := s.Breakpoints()
	space := MapSpaceScore
	if s.Config().Map == correction.MapZSpace {
		space = MapSpaceZ
	}
	return Map{Step: step, FitVersion: s.FitVersion(), X: orEmpty(x), Y: orEmpty(y), Space: space}, nil
}
