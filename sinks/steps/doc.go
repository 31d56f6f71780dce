// Package steps is the read half of the advantages contract: it reassembles the chunked
// advantage records of package topics into complete, ordered training steps and tracks which
// offsets are safe to commit. The trainer sink and the analytics tap both build on it, with
// whatever Kafka client they use.
package steps
