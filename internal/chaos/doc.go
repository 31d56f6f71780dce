// Package chaos is wmrl's fault harness (`make chaos`, `make chaos-short`): it runs the real
// stages as processes against a broker and a Redis server of its own, injects the faults an
// operator meets (SIGKILLed stages, a broker killed inside a transaction, Redis flushed or
// killed, a paused zombie, correct scaled out and in) and checks the advantages topic row by
// row: every rollout exactly once, and the run's digest equal to a fault-free baseline.
//
// The harness is a test behind the build tag chaos, so `go test ./...` does not run it:
//
//	go test -tags chaos -run TestChaos -v -timeout 60m ./internal/chaos   # full (WMRL_CHAOS=full)
//	WMRL_CHAOS=short go test -tags chaos -run TestChaos -v ./internal/chaos
//
// WMRL_CHAOS_ONLY=a,b runs only the named scenarios (plus the baseline); WMRL_CHAOS_OUTAGE=5m
// keeps the broker down that long in broker-kill-in-txn. A stage that exits by itself fails the
// scenario at once (no stage is ever restarted by hand), and correct's /readyz must turn non-200
// during the broker outage and 200 after it. Last results: docs/reliability.md.
package chaos
