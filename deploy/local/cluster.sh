#!/usr/bin/env bash
# cluster.sh {start|stop|status|start-node N|stop-node N|kill-node N}: a real 3-node Apache Kafka
# cluster (KRaft, every node broker+controller, three voters) run with `java` from the Maven
# Central jars kafka.sh fetches, for failover tests and local development. Topics default to
# replication factor 3 and min.insync.replicas 2, so one node may die without losing a write.
#
# Environment (all optional):
#   WMRL_CLUSTER_NODES       nodes (default 3)
#   WMRL_CLUSTER_BASE_PORT   node i listens on BASE+i-1 (PLAINTEXT) and BASE+NODES+i-1
#                            (CONTROLLER); default 29092 (29092-29094, controllers 29095-29097)
#   WMRL_LOCAL_DIR           runtime dir (default <repo>/.local); the cluster lives in
#                            $WMRL_LOCAL_DIR/cluster/node-<i>/{server.properties,data,logs,kafka.pid}
#   WMRL_KAFKA_HEAP          JVM heap flags per node (default "-Xms128m -Xmx384m")
#   WMRL_KAFKA_READY_TIMEOUT seconds to wait for readiness (default 120)
#   WMRL_KAFKA_STOP_TIMEOUT  seconds between SIGTERM and SIGKILL (default 30)
#   WMRL_KAFKA_VERSION, WMRL_LOG4J_VERSION, WMRL_CACHE: as in kafka.sh
#
# start formats fresh data dirs (one cluster id for all nodes) and waits until every broker is
# in the metadata and a transaction commits; start-node restarts one stopped node on its
# existing data (a node that rejoins); kill-node sends SIGKILL (a crash), stop-node SIGTERM.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
. "$HERE/lib.sh"

KAFKA_VERSION=${WMRL_KAFKA_VERSION:-4.4.0}
CACHE=${WMRL_CACHE:-$HOME/.cache/wmrl}
LIB=$CACHE/kafka-$KAFKA_VERSION/lib
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
ROOT=$LOCAL/cluster
NODES=${WMRL_CLUSTER_NODES:-3}
BASE=${WMRL_CLUSTER_BASE_PORT:-29092}
HEAP=${WMRL_KAFKA_HEAP:--Xms128m -Xmx384m}
READY_TIMEOUT=${WMRL_KAFKA_READY_TIMEOUT:-120}
STOP_TIMEOUT=${WMRL_KAFKA_STOP_TIMEOUT:-30}

port() { echo $((BASE + $1 - 1)); }
cport() { echo $((BASE + NODES + $1 - 1)); }
dir() { echo "$ROOT/node-$1"; }

seeds() {
	local i out=()
	for ((i = 1; i <= NODES; i++)); do out+=("127.0.0.1:$(port "$i")"); done
	local IFS=,
	echo "${out[*]}"
}

node_pid() { broker_pid "$(dir "$1")"; }

write_config() {
	local i=$1 d voters="" j
	d=$(dir "$i")
	for ((j = 1; j <= NODES; j++)); do voters+="${voters:+,}$j@127.0.0.1:$(cport "$j")"; done
	mkdir -p "$d/data" "$d/logs"
	cat >"$d/server.properties" <<EOF
# Written by deploy/local/cluster.sh: node $i of $NODES, broker and controller.
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(port "$i"),CONTROLLER://127.0.0.1:$(cport "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(port "$i")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$d/data
num.partitions=3
default.replication.factor=$((NODES < 3 ? NODES : 3))
min.insync.replicas=$((NODES < 2 ? 1 : 2))
offsets.topic.replication.factor=$((NODES < 3 ? NODES : 3))
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=$((NODES < 3 ? NODES : 3))
transaction.state.log.min.isr=$((NODES < 2 ? 1 : 2))
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=$((NODES < 3 ? NODES : 3))
share.coordinator.state.topic.min.isr=$((NODES < 2 ? 1 : 2))
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
EOF
	write_log4j2 "$d"
	printf 'status = warn\nrootLogger.level = ERROR\n' >"$d/tools-log4j2.properties"
}

launch() {
	local i=$1
	# shellcheck disable=SC2086 # HEAP is a list of JVM flags
	launch_broker "$(dir "$i")" $HEAP -XX:TieredStopAtLevel=1
	log "node $i: java pid $(<"$(dir "$i")/kafka.pid") on 127.0.0.1:$(port "$i") (controller $(cport "$i"))"
}

wait_ready() {
	local bin deadline i
	bin=$(kafkaready_bin)
	deadline=$((SECONDS + READY_TIMEOUT))
	for ((i = 1; i <= NODES; i++)); do
		until port_open "$(port "$i")"; do
			node_pid "$i" >/dev/null || { tail -n 30 "$(dir "$i")/logs/server.log" >&2 || true; die "node $i exited during startup"; }
			((SECONDS < deadline)) || die "node $i: port $(port "$i") not open after ${READY_TIMEOUT}s"
			sleep 0.3
		done
	done
	local left=$((deadline - SECONDS))
	((left > 10)) || left=10
	"$bin" -brokers "$(seeds)" -min-brokers "$NODES" -timeout "${left}s" ||
		die "cluster did not become ready (logs: $ROOT/node-*/logs/server.log)"
}

start() {
	local i
	for ((i = 1; i <= NODES; i++)); do
		node_pid "$i" >/dev/null && die "node $i already running (cluster.sh stop first)"
		port_open "$(port "$i")" && die "127.0.0.1:$(port "$i") is in use"
		port_open "$(cport "$i")" && die "127.0.0.1:$(cport "$i") is in use"
	done
	need_java
	"$HERE/kafka.sh" fetch
	rm -rf "$ROOT"
	local id
	for ((i = 1; i <= NODES; i++)); do write_config "$i"; done
	id=$(storage_tool "$(dir 1)/tools-log4j2.properties" random-uuid)
	for ((i = 1; i <= NODES; i++)); do
		storage_tool "$(dir "$i")/tools-log4j2.properties" \
			format -t "$id" -c "$(dir "$i")/server.properties" >"$(dir "$i")/logs/format.log" 2>&1 ||
			{ cat "$(dir "$i")/logs/format.log" >&2; die "node $i: format failed"; }
	done
	log "formatted $NODES nodes (cluster $id)"
	for ((i = 1; i <= NODES; i++)); do launch "$i"; done
	wait_ready
	log "ready: $(seeds)"
}

start_node() {
	local i=$1
	[[ -f $(dir "$i")/server.properties ]] || die "node $i was never started (cluster.sh start)"
	node_pid "$i" >/dev/null && { log "node $i already running"; return 0; }
	launch "$i"
	local deadline=$((SECONDS + READY_TIMEOUT))
	until port_open "$(port "$i")"; do
		node_pid "$i" >/dev/null || die "node $i exited during startup"
		((SECONDS < deadline)) || die "node $i: port not open after ${READY_TIMEOUT}s"
		sleep 0.3
	done
	log "node $i: listening again"
}

signal_node() {
	local i=$1 sig=$2 pid
	pid=$(node_pid "$i") || { log "node $i not running"; return 0; }
	kill "-$sig" "$pid"
	reap "$pid" "$sig" "$STOP_TIMEOUT" || true
	rm -f "$(dir "$i")/kafka.pid"
	log "node $i: pid $pid stopped (SIG$sig)"
}

stop() {
	# All at once: a node shutting down alone after the others would wait for a quorum that is gone.
	local i pid pids=() deadline=$((SECONDS + STOP_TIMEOUT))
	for ((i = 1; i <= NODES; i++)); do
		if pid=$(node_pid "$i"); then
			kill -TERM "$pid"
			pids+=("$i:$pid")
		fi
	done
	for entry in "${pids[@]}"; do
		i=${entry%%:*} pid=${entry#*:}
		reap "$pid" TERM "$STOP_TIMEOUT" "$deadline" || true
		rm -f "$(dir "$i")/kafka.pid"
		log "node $i: pid $pid stopped"
	done
	((${#pids[@]} > 0)) || log "not running"
}

status() {
	local i rc=0 pid
	for ((i = 1; i <= NODES; i++)); do
		if pid=$(node_pid "$i"); then
			log "node $i: running, pid $pid, 127.0.0.1:$(port "$i")"
		else
			log "node $i: not running"
			rc=3
		fi
	done
	return $rc
}

node_arg() {
	[[ ${1:-} =~ ^[0-9]+$ && $1 -ge 1 && $1 -le $NODES ]] || die "want a node number 1..$NODES"
	echo "$1"
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
seeds) seeds ;;
start-node) start_node "$(node_arg "${2:-}")" ;;
stop-node) signal_node "$(node_arg "${2:-}")" TERM ;;
kill-node) signal_node "$(node_arg "${2:-}")" KILL ;;
*)
	echo "usage: $0 {start|stop|status|seeds|start-node N|stop-node N|kill-node N}" >&2
	exit 2
	;;
esac
