package statestore

import (
	"strconv"
	"strings"
)

// The Redis key layout of doc.go, spelled out once: every reader and writer, write.lua included
// (it gets the state and chunk key prefixes as arguments), builds its keys here. The keys of one
// (run, stream) start with the hash tag {run/stream}, the run-level keys with {run}, so each
// write script's keys share one Redis Cluster slot.

// streamKeys is the start of every key of one (run, stream): "P:{run/stream}:".
type streamKeys string

func (s *Store) keys(run, stream string) streamKeys {
	return streamKeys(s.prefix + ":{" + run + "/" + stream + "}:")
}

func (k streamKeys) head() string   { return string(k) + "head" }
func (k streamKeys) steps() string  { return string(k) + "steps" }
func (k streamKeys) lows() string   { return string(k) + "lows" }
func (k streamKeys) chunks() string { return string(k) + "chunks" }

// statePrefix and chunkPrefix are followed by a step, or a chunk number, in decimal: the
// members of the steps and chunks sets.
func (k streamKeys) statePrefix() string { return string(k) + "state:" }
func (k streamKeys) chunkPrefix() string { return string(k) + "chunk:" }

func (k streamKeys) state(step int64) string {
	return k.statePrefix() + strconv.FormatInt(step, 10)
}

func (k streamKeys) chunk(c uint64) string { return k.chunkPrefix() + strconv.FormatUint(c, 10) }

// StateKey is the key of the state bytes of (run, stream) sealed after step.
func (s *Store) StateKey(run, stream string, step int64) string {
	return s.keys(run, stream).state(step)
}

// HeadKey is the hash with the latest sealed step of (run, stream).
func (s *Store) HeadKey(run, stream string) string { return s.keys(run, stream).head() }

// StepsKey is the sorted set of the steps whose snapshots are kept.
func (s *Store) StepsKey(run, stream string) string { return s.keys(run, stream).steps() }

// The run-level keys: P:{run}:streams and P:{run}:end.
const (
	streamsName = "streams"
	endName     = "end"
)

func (s *Store) runKey(run, name string) string { return s.prefix + ":{" + run + "}:" + name }

// StreamsKey is the set of a run's streams (its own hash tag {run}).
func (s *Store) StreamsKey(run string) string { return s.runKey(run, streamsName) }

// EndKey is the hash recording run's end.
func (s *Store) EndKey(run string) string { return s.runKey(run, endName) }

// runKeysPattern is a SCAN pattern matching every run's streams and end keys; the class
// [se][tn][dr] narrows the match on the server, runOfKey makes it exact.
func (s *Store) runKeysPattern() string { return s.prefix + ":{*}:[se][tn][dr]*" }

// runOfKey returns the run whose streams or end key k is, or "" for any other key (a per-stream
// key, or another prefix's key that runKeysPattern also matched). Run ids never contain '/',
// '{' or '}'.
func (s *Store) runOfKey(k string) string {
	k, ok := strings.CutPrefix(k, s.prefix+":{")
	if !ok {
		return ""
	}
	for _, name := range []string{streamsName, endName} {
		if run, ok := strings.CutSuffix(k, "}:"+name); ok && run != "" && !strings.ContainsAny(run, "/{}") {
			return run
		}
	}
	return ""
}
