// Package trainer is the trainer-side sink of the advantages topic: it reads the fused advantage
// rows read_committed, reassembles each step from its Arrow IPC chunks (headers wmrl-chunk i/n,
// wmrl-run, wmrl-step) and hands complete steps to the caller in step order per run.
//
// Offsets are committed only after the caller acknowledges a step, and never past the oldest
// record of a step that is incomplete or not yet acknowledged, so a crash of the trainer
// re-delivers exactly the steps it had not finished (at-least-once per step, with the correction
// consumer's transactions guaranteeing that a step is either wholly visible or not at all).
//
// The package also computes the canonical digest of an advantage stream straight from a topic
// (DigestTopicResult) or from the payloads of a replay file (DigestPayloads); replay tests and the
// Python client compare against it.
package trainer
