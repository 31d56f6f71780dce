// Package statestore is the Redis side of the correction state: versioned snapshots per
// (run, stream), a head record that dashboards and tools read, and the window chunk layout
// that the calibration changelog and Redis share. The correction consumer (consumers/correct)
// writes it; readers (dashboard, demo, replay) use only this package, not the consumer.
//
// Redis is a cache of the calibration changelog: everything here can be rebuilt from the
// changelog, and the consumer repairs Redis from it on every assignment.
//
// # Key layout
//
// With prefix P (default "wmrl"), run R and stream S — ids never contain '/', '{' or '}' —
// every key of one (run, stream) shares the hash tag {R/S}, so a snapshot write is one script
// on one Redis Cluster slot:
//
//	P:{R/S}:head        hash: sealed_step, digest (hex, the snapshot's state digest),
//	                    config_hash (hex correction.Config.Hash), fit_version, anchor_weight,
//	                    pairs; fit (JSON {"x":[..],"y":[..]}: breakpoints, linear interpolation,
//	                    clipped at the ends) and fit_step, from the latest snapshot carrying them
//	P:{R/S}:state:<v>   string: the raw 32-byte digest, then correction.State.EncodeHead() of the
//	                    state sealed after step v (last K kept)
//	P:{R/S}:chunk:<c>   string: window chunk c (topics.EncodeCalibrationChunk), kept while a
//	                    kept step's window reaches it
//	P:{R/S}:steps       sorted set of the kept steps v (score v)
//	P:{R/S}:lows        sorted set: kept step v scored by the oldest chunk of its window
//	P:{R/S}:chunks      sorted set of the stored chunk numbers
//	P:{R}:streams       set of the run's streams
//
// The run-level set P:{R}:streams lives in the run's own slot; no script touches it (it is a
// separate SADD in the same pipeline), so every script's keys share one slot.
//
// keys.go builds every one of these keys; write.lua gets its key names from it.
//
// A reader of a state: Store.ReadState (GET state:<v>, then the chunks its head names, joined
// with correction.AssembleState and checked against the digest).
package statestore
