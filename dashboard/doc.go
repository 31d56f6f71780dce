// Package dashboard serves a live web page that follows wmrl runs from their topics
// (read_committed, so aborted transactions never show) and the correction consumer's Redis head:
// the calibration map and anchor pairs over time, calibration error before and after Online
// Debiasing per step, the IVD anchor weight, fit version, step latency (last reward record →
// advantages), consumer-group lag and topic throughput per stage, and dead letters by reason.
//
// The page is plain HTML, JavaScript and SVG embedded in the binary (no build step). It gets
// updates by server-sent events; the same JSON is served on documented endpoints (docs/dashboard.md)
// for other tools.
package dashboard
