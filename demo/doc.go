// Package demo wires the whole WMRL pipeline into one process for `wmrl demo` — generator,
// world-model and sandbox stages, correction consumer and trainer sink talking only through
// Kafka topics and Redis (embedded kfake + miniredis by default, or a real cluster) — and renders
// its report (report.html with gonum/plot PNGs).
package demo
