#!/usr/bin/env bash
# kafka.sh {fetch|start|stop|status|reset}: one real Apache Kafka broker (KRaft,
# combined broker+controller) run with `java` from the Maven Central jars, for
# local development and CI. See deploy/local/README.md for what was verified.
# start keeps the data dir of an earlier run (after a crash too) and formats
# only an empty one; reset stops the broker and deletes its data.
#
# Environment (all optional):
#   WMRL_KAFKA_VERSION          Kafka release (default 4.4.0)
#   WMRL_LOG4J_VERSION          log4j-slf4j-impl version = log4j-core's (default 2.25.5)
#   WMRL_CACHE                  jar cache root (default ~/.cache/wmrl)
#   WMRL_LOCAL_DIR              runtime dir: data, logs, pid (default <repo>/.local)
#   WMRL_KAFKA_PORT             PLAINTEXT listener (default 9092)
#   WMRL_KAFKA_CONTROLLER_PORT  CONTROLLER listener (default 9093)
#   WMRL_KAFKA_HEAP             JVM heap flags (default "-Xms256m -Xmx512m")
#   WMRL_KAFKA_READY_TIMEOUT    seconds to wait for readiness (default 90)
#   WMRL_KAFKA_STOP_TIMEOUT     seconds between SIGTERM and SIGKILL (default 30)
#   WMRL_KAFKA_EXTRA_PROPERTIES a properties file appended to server.properties
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
. "$HERE/lib.sh"

KAFKA_VERSION=${WMRL_KAFKA_VERSION:-4.4.0}
LOG4J_VERSION=${WMRL_LOG4J_VERSION:-2.25.5}
CACHE=${WMRL_CACHE:-$HOME/.cache/wmrl}
KDIR=$CACHE/kafka-$KAFKA_VERSION
LIB=$KDIR/lib
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
RUN=$LOCAL/kafka
PORT=${WMRL_KAFKA_PORT:-9092}
CPORT=${WMRL_KAFKA_CONTROLLER_PORT:-9093}
HEAP=${WMRL_KAFKA_HEAP:--Xms256m -Xmx512m}
READY_TIMEOUT=${WMRL_KAFKA_READY_TIMEOUT:-90}
STOP_TIMEOUT=${WMRL_KAFKA_STOP_TIMEOUT:-30}
PIDFILE=$RUN/kafka.pid
MARKER=$LIB/.complete

pid_alive() { broker_pid "$RUN" >/dev/null; }

fetch() {
	if [[ -f $MARKER && $(<"$MARKER") == "$KAFKA_VERSION $LOG4J_VERSION" ]]; then
		log "jars cached: $LIB ($(find "$LIB" -name '*.jar' | wc -l) jars)"
		return 0
	fi
	command -v mvn >/dev/null || die "mvn not found (Debian: apt-get install -y maven)"
	local t0 tmp
	t0=$(now)
	tmp=$LIB.tmp.$$
	rm -rf "$tmp"
	mkdir -p "$KDIR"
	log "fetching kafka_2.13 $KAFKA_VERSION + log4j-slf4j-impl $LOG4J_VERSION from Maven Central"
	if ! mvn -q -B -f "$HERE/pom.xml" \
		-Dkafka.version="$KAFKA_VERSION" -Dlog4j.version="$LOG4J_VERSION" \
		org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
		-DoutputDirectory="$tmp" -DincludeScope=runtime >"$KDIR/fetch.log" 2>&1; then
		cat "$KDIR/fetch.log" >&2
		rm -rf "$tmp"
		die "maven could not fetch the broker jars (log above)"
	fi
	[[ -f $tmp/kafka_2.13-$KAFKA_VERSION.jar ]] || die "kafka_2.13-$KAFKA_VERSION.jar missing after fetch"
	[[ -f $tmp/log4j-slf4j-impl-$LOG4J_VERSION.jar ]] || die "SLF4J binding missing after fetch"
	rm -rf "$LIB"
	mv "$tmp" "$LIB"
	echo "$KAFKA_VERSION $LOG4J_VERSION" >"$MARKER"
	log "fetched $(find "$LIB" -name '*.jar' | wc -l) jars ($(du -sh "$LIB" | cut -f1)) in $(since "$t0")s"
}

write_config() {
	local data=$1
	cat >"$RUN/server.properties" <<EOF
# Written by deploy/local/kafka.sh; one combined node with a static voter.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
# wmrl creates its topics explicitly (same partition count everywhere); an
# auto-created one-partition topic would hide a missing create.
auto.create.topics.enable=false
EOF
	if [[ -n ${WMRL_KAFKA_EXTRA_PROPERTIES:-} ]]; then
		{ echo "# from $WMRL_KAFKA_EXTRA_PROPERTIES"; cat "$WMRL_KAFKA_EXTRA_PROPERTIES"; } >>"$RUN/server.properties"
	fi
	write_log4j2 "$RUN"
	# The storage tool logs its whole config at INFO; keep its console quiet.
	cat >"$RUN/tools-log4j2.properties" <<EOF
status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = STDERR
EOF
}

start() {
	if pid_alive; then
		log "already running (pid $(<"$PIDFILE")) on 127.0.0.1:$PORT"
		return 0
	fi
	for p in "$PORT" "$CPORT"; do
		port_open "$p" && die "127.0.0.1:$p is already in use by another process"
	done
	need_java
	fetch
	command -v go >/dev/null || die "go not found: needed to build the readiness check"

	mkdir -p "$RUN/data" "$RUN/logs"
	write_config "$RUN/data"
	local id t0 pid
	t0=$(now)
	if [[ -f $RUN/data/meta.properties ]]; then
		# A restart (after a stop or a crash) keeps every topic: the log recovers on start.
		log "reusing $RUN/data ($(grep -m1 '^cluster.id=' "$RUN/data/meta.properties" || echo 'cluster id unknown')); kafka.sh reset for a clean slate"
	else
		id=$(storage_tool "$RUN/tools-log4j2.properties" random-uuid)
		storage_tool "$RUN/tools-log4j2.properties" format -t "$id" -c "$RUN/server.properties" >"$RUN/logs/format.log" 2>&1 ||
			{ cat "$RUN/logs/format.log" >&2; die "kafka-storage format failed"; }
		log "formatted $RUN/data (cluster $id) in $(since "$t0")s"
	fi

	t0=$(now)
	# shellcheck disable=SC2086 # HEAP is a list of JVM flags
	launch_broker "$RUN" $HEAP
	pid=$(<"$PIDFILE")
	log "started java pid $pid (Kafka $KAFKA_VERSION, logs in $RUN/logs)"

	local bin
	bin=$(kafkaready_bin)
	log "readiness check built $(since "$t0")s after launch"
	local deadline=$((SECONDS + READY_TIMEOUT))
	until port_open "$PORT"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 40 "$RUN/logs/server.log" "$RUN/logs/stdout.log" >&2 || true
			rm -f "$PIDFILE"
			die "broker exited during startup (log tail above)"
		fi
		((SECONDS < deadline)) || { tail -n 40 "$RUN/logs/server.log" >&2 || true; die "port $PORT not open after ${READY_TIMEOUT}s"; }
		sleep 0.2
	done
	log "port $PORT open $(since "$t0")s after launch"
	local left=$((deadline - SECONDS))
	((left > 5)) || left=5
	if ! "$bin" -brokers "127.0.0.1:$PORT" -timeout "${left}s"; then
		tail -n 40 "$RUN/logs/server.log" >&2 || true
		die "broker did not become ready (log tail above; broker still running, pid $pid: kafka.sh stop)"
	fi
	local reported
	reported=$(grep -m1 -o 'Kafka version: [^ ]*' "$RUN/logs/server.log" || echo "Kafka version: (not in log)")
	log "ready on 127.0.0.1:$PORT in $(since "$t0")s after launch; broker log says $reported"
}

stop() { stop_pidfile "$PIDFILE" "kafka.Kafka $RUN/server.properties" "$STOP_TIMEOUT"; }

status() {
	if pid_alive; then
		local state=closed
		port_open "$PORT" && state=open
		log "running: pid $(<"$PIDFILE"), Kafka $KAFKA_VERSION, 127.0.0.1:$PORT $state, logs $RUN/logs"
		return 0
	fi
	if port_open "$PORT"; then
		log "not started by kafka.sh, but something answers on 127.0.0.1:$PORT"
	else
		log "not running"
	fi
	return 3
}

reset() {
	stop
	rm -rf "$RUN"
	log "deleted $RUN (data and logs); the next start formats a new cluster"
}

case ${1:-} in
fetch) fetch ;;
start) start ;;
stop) stop ;;
status) status ;;
reset) reset ;;
*)
	echo "usage: $0 {fetch|start|stop|status|reset}" >&2
	exit 2
	;;
esac
