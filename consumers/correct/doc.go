// Package correct is wmrl's stateful correction consumer (README.md's data flow; the step
// semantics are correction/doc.go's): it joins step
// manifests, predicted and executed rewards of each run, seals steps strictly in order once
// complete, runs the correction core (package correction; this package is named for the stage and
// its command, `wmrl correct`) and produces the advantage rows and the calibration snapshots in the
// same Kafka transaction as the input offsets. Downstream reads with read_committed.
//
// # Inputs and completeness
//
// The consumer reads wmrl.steps.v1, wmrl.rewards.predicted.v1 and wmrl.rewards.executed.v1 in one
// consumer group with the range balancer, which gives a member the same partition numbers of all
// three topics (they are co-partitioned by run_id), and the run-control topic wmrl.runs.v1, whose
// end requests it relays onto the steps topic (runend.go). A step v of a run is complete when its
// manifest is buffered, every group has Size predicted rewards and every anchor group also has
// Size executed rewards for the same rollout ids. Rollout ids come from the reward records.
//
// Duplicates are judged per rollout id on what correction reads (stream, status, score,
// imputed): an identical redelivery is counted (wmrl_correct_records_total{result="duplicate"}),
// a differing one is dead-lettered with reason "conflict" and the first one wins (input order
// within a partition is fixed, so the choice is deterministic). Also dead-lettered as conflicts:
// rewards for a group not in the manifest, with a different stream, executed rewards for a
// non-anchor group, rollouts beyond the group size, executed ids without a predicted reward in
// a full group, a differing second manifest. Undecodable or invalid records are dead-lettered
// with the codec's reason. Records of steps the run has already sealed (re-read after a restart)
// are dropped and counted as "sealed_duplicate". A run must start at step 0; a run whose next
// step never completes holds back later ones (the progress line lists waiting runs).
//
// Buffering is bounded (Limits, limits.go): a record of a step too far beyond its run's first
// incomplete step, a manifest claiming too many groups or rollouts, rewards piling up for a step
// without a manifest, and (per instance) more buffered steps or manifest groups than allowed are
// dead-lettered with the limit's reason (pending-steps-exceeded, step-too-large,
// instance-pending-exceeded). The per-run and per-step decisions depend only on the run's input
// order, so replays with the same limits reproduce them.
//
// Dead letters carry at most topics.DefaultDLQMaxValueBytes of value (topics.DeadLetterWriter).
// One that Kafka still refuses for good dooms its transaction; the consumer then sends it again
// without value and source headers, and on a second refusal skips its record
// (wmrl_correct_dead_letters_undeliverable_total), so a poison record costs at most two aborts
// instead of an abort loop.
//
// A run ends with its end-of-run record on the steps topic (topics.StepManifest.EndOfRun, naming
// the run's last step; why the steps topic: docs/design-notes.md), honoured only from correct's own
// transactions: end requests on the run-control topic are relayed onto the steps topic. Once its last step is sealed the run leaves memory, its per-run metric
// series are deleted after the commit (wmrl_correct_active_runs counts the runs held), later
// records of steps beyond the end are dead-lettered with reason run_ended and re-reads of sealed
// steps dropped as sealed_duplicate. Runs do not resume after their end; docs/design-notes.md says why. The
// end is recorded on the calibration changelog (a rebuild installs only live runs) and in Redis
// (key <prefix>:{run}:end); after Config.EndedRunRetention the run's changelog keys are
// tombstoned and its Redis keys expire (retention.go). Config.RunIdleTimeout ends runs without
// input by publishing their end-of-run record (idle.go).
//
// Every stream of a run advances at every step (streams without groups in the step get an
// empty step); a stream first seen at step v starts from an empty state fast-forwarded through
// empty steps 0..v−1. Calibration is per (run, stream).
//
// # Transactions and offsets
//
// A transaction starts only when at least one step is ready to seal or a dead letter can be
// written. It holds, per sealed step, the step's advantage chunks (topics.AdvantageRecords with
// stream "": one chunk set for all streams, key run_id, headers wmrl-chunk i/n and wmrl-rows)
// followed by one CalibrationSnapshot per (run, stream) (key run_id/stream), all produced to the
// run's input partition number; then the dead letters. Several steps may share a transaction,
// a step is never split. While fetched records are already waiting in the client (a backlog) the
// consumer polls again before sealing, up to Config.MaxTxnSteps buffered steps or
// Config.MaxTxnLinger, so a backlog drains in few large transactions while live traffic commits
// at every poll. A transaction begins before its outputs are encoded, so the broker writes the
// first steps' records while later ones are encoded.
//
// GroupTransactSession.End commits the polled offsets; records buffered for unsealed steps must
// not be committed, or a crash loses them. The consumer therefore rewrites the TxnOffsetCommit
// request with kgo.PreTxnCommitFnContext: per input partition the offset is lowered to the
// oldest record still buffered for an unsealed step. A dead letter is held until the transaction
// that commits past its source record, which makes dead-lettering exactly-once as well. On
// restart the records from the committed offset on are read again; those of sealed steps are
// dropped. When End aborts, the session rewinds to the committed offsets and the consumer
// rebuilds its state as on a fresh assignment.
//
// Before joining the group the consumer sends InitProducerID for its transactional id, which
// fences any predecessor with the same id and aborts its open transaction at once.
//
// # State: changelog and Redis
//
// The calibration topic is the source of truth (it commits atomically with outputs and offsets).
// It carries what each sealed step changed, so its cost is O(change), not O(window): per
// (run, stream) and step, the window chunks the step's new anchor pairs fell into
// (topics.CalibrationChunk: the pairs with absolute index in chunk c of correction.ChunkPairs,
// key run_id/stream/slot with slot = c mod correction.ChunkSlots(window), so compaction keeps
// exactly the live window's chunks), then the snapshot (key run_id/stream, binary:
// topics.SchemaCalibration, topics.EncodeCalibration) whose state is the head
// (correction.State.EncodeHead: scalars, and the breakpoints only when the window does not
// determine them) and whose settings are the consumer's DigestConfig (what a replay must repeat).
// Snapshots carry BreakX/BreakY for dashboards every mapEvery (64) steps only.
// A stream's first step, and the first step after its calibration restarted for a config change,
// writes every chunk of its window. The snapshot's digest is correction.State.Digest (a two-level
// SHA-256 over the head's fields and the hash of each window chunk, so sealing costs O(change)
// there too).
//
// On every assignment the consumer reads the owned calibration partitions (read_committed) to
// their stable end, takes each (run, stream)'s latest snapshot and the latest chunk of every slot,
// joins head and chunks (correction.AssembleState) and checks the digest. Then Redis is compared with the changelog and repaired with
// whole windows where it is missing, behind, ahead or different
// (wmrl_correct_state_rebuilds_total{reason}); a (run, stream) Redis holds nothing of counts as
// lost data (wmrl_correct_redis_state_lost_total) and the run's streams set is re-added.
// A state built with another correction config stops the consumer (ErrConfigChanged) unless
// Config.AllowConfigChange is set.
//
// Redis is written after the transaction commits, so it is never ahead of committed output,
// in one round trip per transaction (a pipeline of one Lua script per (run, stream) and step).
// The write runs on its own goroutine, overlapping the next poll; at most one is in flight, and
// it is joined before state is reloaded and before Run returns. Writes are idempotent; different
// content for an existing step is an alarm (wmrl_correct_redis_digest_mismatch_total and an error
// log) and is not overwritten. A step whose predecessor Redis does not hold (it lost its data) is
// refused by the script and written again with its whole window, and the streams set re-added,
// in a second round trip (wmrl_correct_redis_state_lost_total).
//
// # Redis key layout
//
// The keys, the write script and the readers live in package statestore (Config.RedisPrefix is
// its prefix); dashboards and tools read Redis through it, not through this consumer.
//
// # Replay
//
// Replay re-runs the same engine over the retained input topics of one run with fresh state,
// without transactions, and emits every sealed step's rows; the digest of a replay equals the
// digest of the live advantages of the run. Replay files (WriteReplayFile, ReadReplayFile) are
// length-prefixed Arrow IPC payloads exactly as they appear as record values.
package correct
