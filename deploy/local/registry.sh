#!/usr/bin/env bash
# registry.sh {fetch|start|stop|status}: one real schema registry for local development and CI:
# Apicurio Registry (its Confluent-compatible API under /apis/ccompat/v7), run with `java` from
# the distribution Maven Central serves (io.apicurio:apicurio-registry-app:VERSION:tar.gz:all, a
# Quarkus runner jar plus lib/), with its in-memory (H2) storage: test state is disposable, a
# restart starts empty. See deploy/local/README.md for what was verified and what did not run.
#
# Environment (all optional):
#   WMRL_REGISTRY_VERSION        Apicurio Registry release (default 2.6.13.Final; 3.x needs Java 21)
#   WMRL_CACHE                   distribution cache root (default ~/.cache/wmrl)
#   WMRL_LOCAL_DIR               runtime dir: logs, pid (default <repo>/.local)
#   WMRL_REGISTRY_PORT           HTTP port on 127.0.0.1 (default 8481; not 8081, which many
#                                registries and tools claim)
#   WMRL_REGISTRY_HEAP           JVM heap flags (default "-Xms64m -Xmx384m")
#   WMRL_REGISTRY_READY_TIMEOUT  seconds to wait for the ccompat API (default 120)
#   WMRL_REGISTRY_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 20)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
. "$HERE/lib.sh"

VERSION=${WMRL_REGISTRY_VERSION:-2.6.13.Final}
CACHE=${WMRL_CACHE:-$HOME/.cache/wmrl}
DIST=$CACHE/apicurio-registry-$VERSION
JAR=$DIST/apicurio-registry-app-$VERSION-runner.jar
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
PORT=${WMRL_REGISTRY_PORT:-8481}
RUN=$LOCAL/registry-$PORT
HEAP=${WMRL_REGISTRY_HEAP:--Xms64m -Xmx384m}
READY_TIMEOUT=${WMRL_REGISTRY_READY_TIMEOUT:-120}
STOP_TIMEOUT=${WMRL_REGISTRY_STOP_TIMEOUT:-20}
PIDFILE=$RUN/registry.pid
MARKER=$DIST/.complete
# What our registry's command line shows, so that a recycled pid is never signalled.
PROC="quarkus.http.port=$PORT"
API=http://127.0.0.1:$PORT/apis/ccompat/v7

pid_alive() { pidfile_pid "$PIDFILE" "$PROC" >/dev/null; }

# answers: whether the Confluent-compatible API lists subjects (the registry is serving).
answers() { curl -sf -m 2 "$API/subjects" >/dev/null 2>&1; }

fetch() {
	if [[ -f $MARKER && -f $JAR ]]; then
		log "distribution cached: $DIST"
		return 0
	fi
	command -v mvn >/dev/null || die "mvn not found (Debian: apt-get install -y maven)"
	local t0 tmp
	t0=$(now)
	tmp=$DIST.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$tmp"
	log "fetching io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all from Maven Central"
	if ! mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
		-Dartifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all" \
		-DoutputDirectory="$tmp" >"$CACHE/apicurio-fetch.log" 2>&1; then
		cat "$CACHE/apicurio-fetch.log" >&2
		rm -rf "$tmp"
		die "maven could not fetch the registry distribution (log above)"
	fi
	local tgz=$tmp/apicurio-registry-app-$VERSION-all.tar.gz
	[[ -f $tgz ]] || die "$tgz missing after fetch"
	tar xzf "$tgz" -C "$tmp" || die "could not unpack $tgz"
	rm -f "$tgz"
	[[ -f $tmp/apicurio-registry-app-$VERSION-runner.jar ]] || die "runner jar missing in the distribution"
	rm -rf "$DIST"
	mv "$tmp" "$DIST"
	echo "$VERSION" >"$MARKER"
	log "fetched $(find "$DIST/lib" -name '*.jar' | wc -l) jars ($(du -sh "$DIST" | cut -f1)) in $(since "$t0")s"
}

start() {
	if pid_alive; then
		log "already running (pid $(<"$PIDFILE")) on 127.0.0.1:$PORT"
		return 0
	fi
	port_open "$PORT" && die "127.0.0.1:$PORT is already in use by another process"
	need_java
	command -v curl >/dev/null || die "curl not found: needed for the readiness check (Debian: apt-get install -y curl)"
	fetch
	rm -rf "$RUN"
	mkdir -p "$RUN"
	local t0 pid
	t0=$(now)
	# setsid: the registry outlives the shell (and make) that started it. The default (prod)
	# profile has authentication off and in-memory storage; the UI and the ccompat API share the
	# one port. Quarkus' own file log is off: stdout goes to the log file.
	# shellcheck disable=SC2086 # HEAP is a list of JVM flags
	setsid java $HEAP -XX:+UseSerialGC -Djava.awt.headless=true \
		"-D$PROC" -Dquarkus.http.host=127.0.0.1 \
		-jar "$JAR" </dev/null >>"$RUN/registry.log" 2>&1 &
	pid=$!
	echo "$pid" >"$PIDFILE"
	sleep 0.2
	if ! runs "$pid" "$PROC"; then
		pid=$(pgrep -f "$PROC -Dquarkus.http.host" | head -n1) || die "registry process not found after launch"
		echo "$pid" >"$PIDFILE"
	fi
	log "started java pid $pid (Apicurio Registry $VERSION, log $RUN/registry.log)"
	local deadline=$((SECONDS + READY_TIMEOUT))
	until answers; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 40 "$RUN/registry.log" >&2 || true
			rm -f "$PIDFILE"
			die "registry exited during startup (log tail above)"
		fi
		((SECONDS < deadline)) || { tail -n 40 "$RUN/registry.log" >&2 || true; die "$API not answering after ${READY_TIMEOUT}s (registry still running, pid $pid: registry.sh stop)"; }
		sleep 0.5
	done
	log "ready on $API in $(since "$t0")s after launch"
}

stop() { stop_pidfile "$PIDFILE" "$PROC" "$STOP_TIMEOUT"; }

status() {
	if pid_alive; then
		local state="not answering"
		answers && state=answering
		log "running: pid $(<"$PIDFILE"), Apicurio Registry $VERSION, $API $state"
		return 0
	fi
	if answers; then
		log "not started by registry.sh, but a registry answers on $API"
	else
		log "not running"
	fi
	return 3
}

case ${1:-} in
fetch) fetch ;;
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 {fetch|start|stop|status}" >&2
	exit 2
	;;
esac
