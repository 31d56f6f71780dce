package correction

import "slices"

// addPairs appends pairs in the given (canonical) order, evicting the
// oldest once the window is full, and keeps the sorted view in step with a
// single O(W + k log k) merge.
func (s *State) addPairs(ps []pair) {
	if len(ps) == 0 {
		return
	}
	s.sums, s.sumsValid = nil, false
	W := s.cfg.Window
	var evicted []pair
	for _, p := range ps {
		if p.w != 1 {
			s.weighted++
		}
		if s.win.len() == W {
			e := s.win.pop()
			if e.w != 1 {
				s.weighted--
			}
			if s.cfg.Mode == ModeDefault {
				evicted = append(evicted, e)
			}
		}
		s.win.push(p)
	}
	s.totalPairs += uint64(len(ps))
	s.pending += uint64(len(ps))
	if s.cfg.Mode != ModeDefault {
		return
	}
	added := slices.Clone(ps)
	slices.SortFunc(added, cmpPair)
	slices.SortFunc(evicted, cmpPair)
	out := s.spare[:0]
	if n := s.win.len(); cap(out) < n {
		out = make([]pair, 0, max(n, min(W, 2*n)))
	}
	if len(ps) <= W {
		out = spliceSorted(out, s.sorted, added, evicted)
	} else {
		out = mergeSorted(out, s.sorted, added, evicted)
	}
	if s.sortedOwned {
		s.spare = s.sorted
	}
	s.sorted = out
	s.sortedOwned = true
}

// spliceSorted writes old − evicted + added (all sorted by (x, y)) into out
// with binary searches and block copies: k insertions and evictions cost
// O(k log W) comparisons plus one memmove of the window, several times
// faster than an element-wise merge. Every evicted pair must occur in old,
// which holds when no more than W pairs are added at once; if a search
// disagrees it falls back to mergeSorted.
func spliceSorted(out, old, added, evicted []pair) []pair {
	var evIdx []int
	for e := 0; e < len(evicted); {
		f := e
		for f < len(evicted) && evicted[f] == evicted[e] {
			f++
		}
		lo, _ := slices.BinarySearchFunc(old, evicted[e], cmpPair)
		for k := range f - e {
			if lo+k >= len(old) || old[lo+k] != evicted[e] {
				return mergeSorted(out, old, added, evicted)
			}
			evIdx = append(evIdx, lo+k)
		}
		e = f
	}
	pos, a, e := 0, 0, 0
	for a < len(added) || e < len(evIdx) {
		ins := len(old)
		if a < len(added) {
			// Insert after all equal elements (upper bound).
			ins, _ = slices.BinarySearchFunc(old[pos:], added[a], func(p, t pair) int {
				if cmpPair(p, t) <= 0 {
					return -1
				}
				return 1
			})
			ins += pos
		}
		if e < len(evIdx) && evIdx[e] < ins {
			out = append(out, old[pos:evIdx[e]]...)
			pos = evIdx[e] + 1
			e++
			continue
		}
		out = append(out, old[pos:ins]...)
		out = append(out, added[a])
		pos = ins
		a++
	}
	return append(out, old[pos:]...)
}

// mergeSorted is the element-wise merge of old ∪ added dropping one
// occurrence of each evicted pair; it handles evictions of pairs added in
// the same call. Equal pairs are identical, so which occurrence is dropped
// is moot.
func mergeSorted(out, old, added, evicted []pair) []pair {
	out = out[:0]
	i, j, e := 0, 0, 0
	for i < len(old) || j < len(added) {
		var p pair
		if j >= len(added) || (i < len(old) && cmpPair(old[i], added[j]) <= 0) {
			p = old[i]
			i++
		} else {
			p = added[j]
			j++
		}
		if e < len(evicted) && cmpPair(p, evicted[e]) == 0 {
			e++
			continue
		}
		out = append(out, p)
	}
	return out
}
