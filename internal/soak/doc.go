// Package soak is wmrl's soak test (`make soak`, and `make soak-short` in CI): a month of a
// training platform in compressed time. Runs start, stream their steps and end (an end-of-run
// record, as `wmrl generate` writes when its input ends), many at a time and one after another,
// against three `wmrl correct` processes on a 3-broker Kafka cluster (deploy/local/cluster.sh) with
// a Redis Cluster (deploy/local/redis-ha.sh) as their state cache, while the brokers and the
// correct instances are restarted one by one and every Redis master fails over.
//
// Every few seconds it records the footprint that must not grow with the number of runs that
// have ended: the correct processes' RSS, heap and goroutines, their live (run, stream) states
// (wmrl_correct_active_runs, wmrl_correct_state_bytes), their Prometheus series, the calibration
// changelog's bytes on the brokers and Redis memory over the masters. It passes when each is flat
// in the number of ended runs, a rebuild after a rebalance reads no more runs than are live (plus
// those ended within the retention), no advantage row is lost or duplicated, and a sample of
// runs replayed from the input topics has the live digest. Plots, a CSV and summary.md go to
// the output folder (.local/soak/<UTC time>/, or WMRL_SOAK_OUT).
//
// The soak is a test behind the build tag soak, so `go test ./...` does not run it:
//
//	WMRL_SOAK=full go test -tags soak -run TestSoak -v -timeout 90m ./internal/soak
//	WMRL_SOAK=short go test -tags soak -run TestSoak -v -timeout 10m ./internal/soak
//
// The correct processes are the system under soak; the upstream stages (generate, worldmodel,
// sandbox) are stood in for by a producer in the test that writes what they would write (step
// manifests, predicted and executed rewards, the end-of-run record; bench/workload), so that a
// thousand runs fit on a small machine; those stages hold no per-run state, the correct stage
// does. Last results: docs/soak.md.
package soak
