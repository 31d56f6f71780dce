package correct

import (
	"runtime"

	"golang.org/x/sync/errgroup"
)

// ordered is the consumer's one way to use all cores: it runs work(slot, i) for every i in
// [0, n) on at most GOMAXPROCS goroutines and, on the calling goroutine, then(i) (if not nil)
// in index order as soon as work(i) is done, so what then sees does not depend on the split.
// Work runs at most one slot per goroutine ahead of then, so slot (< GOMAXPROCS) is held by one
// goroutine at a time and can index per-goroutine scratch. The first error, in index order,
// stops further work and is returned once the work already started has finished.
func ordered(n int, work func(slot, i int) error, then func(i int) error) error {
	slots := max(1, min(runtime.GOMAXPROCS(0), n))
	var g errgroup.Group
	g.SetLimit(slots)
	defer g.Wait() //nolint:errcheck // work's errors travel in errs, by index
	errs := make([]error, n)
	ready := make([]chan struct{}, n)
	started := 0
	for i := range n {
		for ; started < min(i+slots, n); started++ {
			j := started
			ready[j] = make(chan struct{})
			g.Go(func() error {
				defer close(ready[j])
				errs[j] = work(j%slots, j)
				return nil
			})
		}
		<-ready[i]
		if errs[i] != nil {
			return errs[i]
		}
		if then != nil {
			if err := then(i); err != nil {
				return err
			}
		}
	}
	return nil
}
