#!/usr/bin/env bash
# redis-ha.sh {cluster|sentinel} {start|stop|status|failover|kill PORT|url}: a Redis Cluster (3 masters,
# 1 replica each) or a Sentinel setup (master, replica, 3 sentinels, quorum 2) from Debian's
# redis-server on 127.0.0.1, daemonized, without persistence: test state is disposable.
#
#   cluster:  ports BASE..BASE+5 (and their cluster bus ports +10000); redis-cli --cluster create
#   sentinel: master BASE, replica BASE+1, sentinels BASE+2..BASE+4, master set "wmrlmaster"
#
# start prints nothing on stdout; url prints the --redis URL. failover moves every master:
# cluster: CLUSTER FAILOVER on each replica (a coordinated switch, no acknowledged write lost);
# sentinel: SENTINEL FAILOVER wmrlmaster. Both wait until the new roles are in place.
# kill PORT SIGKILLs the master on PORT and waits until its replica has taken over (cluster:
# marked failed after the 2 s node timeout, slots served again; sentinel: down after 1 s, a new
# master elected by the quorum).
#
# Environment (all optional):
#   WMRL_LOCAL_DIR          runtime dir (default <repo>/.local); this uses <dir>/redis-<mode>
#   WMRL_TEST_REDIS_HA_PORT      base port (default 7000 for cluster, 7100 for sentinel)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
MODE=${1:-}
ACTION=${2:-}
MASTER_SET=wmrlmaster

log() { printf 'redis-ha.sh %s: %s\n' "$MODE" "$*" >&2; }
die() { log "error: $*"; exit 1; }

case $MODE in
cluster) BASE=${WMRL_TEST_REDIS_HA_PORT:-7000}; PORTS=(0 1 2 3 4 5) ;;
sentinel) BASE=${WMRL_TEST_REDIS_HA_PORT:-7100}; PORTS=(0 1 2 3 4) ;;
*) echo "usage: $0 {cluster|sentinel} {start|stop|status|failover|kill PORT|url}" >&2; exit 2 ;;
esac
RUN=$LOCAL/redis-$MODE

cli() { local p=$1; shift; redis-cli -h 127.0.0.1 -p "$p" "$@"; }
port() { echo $((BASE + $1)); }
ping() { [[ $(cli "$1" ping 2>/dev/null) == PONG ]]; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.1 s.
wait_for() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@"; do
		((SECONDS < deadline)) || die "$what: not after ${limit}s"
		sleep 0.1
	done
}

start_server() { # start_server PORT EXTRA...
	local p=$1
	shift
	mkdir -p "$RUN/$p"
	redis-server --bind 127.0.0.1 --port "$p" --protected-mode yes --daemonize yes --repl-diskless-sync-delay 0 \
		--pidfile "$RUN/$p/redis.pid" --logfile "$RUN/$p/redis.log" --dir "$RUN/$p" \
		--save '' --appendonly no "$@" </dev/null
}

start_cluster() {
	local addrs=() i
	for i in "${PORTS[@]}"; do
		start_server "$(port "$i")" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
			--cluster-replica-validity-factor 0
		addrs+=("127.0.0.1:$(port "$i")")
	done
	for i in "${PORTS[@]}"; do wait_for 20 "PONG on $(port "$i")" ping "$(port "$i")"; done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$RUN/create.log" 2>&1 ||
		{ cat "$RUN/create.log" >&2; die "redis-cli --cluster create failed"; }
	for i in "${PORTS[@]}"; do wait_for 30 "cluster_state:ok on $(port "$i")" cluster_ok "$(port "$i")"; done
	wait_for 30 "3 masters with a synced replica each" cluster_complete
}

cluster_ok() { cli "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }
# cluster_complete: 3 replicas connected and each done with its first full sync (a replica
# promoted before that holds nothing).
cluster_complete() {
	local n i
	n=$(cli "$(port 0)" cluster nodes 2>/dev/null | awk '$3 ~ /slave/ && $8 == "connected"' | wc -l)
	[[ $n == 3 ]] || return 1
	for i in "${PORTS[@]}"; do
		[[ $(role "$(port "$i")") == slave ]] && ! replica_synced "$(port "$i")" && return 1
	done
	return 0
}
role() { cli "$1" role 2>/dev/null | head -n 1; }
replica_synced() { cli "$1" info replication 2>/dev/null | grep -q '^master_link_status:up'; }

failover_cluster() {
	local i replicas=() masters=()
	for i in "${PORTS[@]}"; do
		if [[ $(role "$(port "$i")") == slave ]]; then replicas+=("$(port "$i")"); else masters+=("$(port "$i")"); fi
	done
	((${#replicas[@]} == 3)) || die "expected 3 replicas, found ${#replicas[@]}"
	for p in "${replicas[@]}"; do
		wait_for 30 "replica $p in sync" replica_synced "$p"
		[[ $(cli "$p" cluster failover) == OK ]] || die "CLUSTER FAILOVER on $p refused"
	done
	for p in "${replicas[@]}"; do
		wait_for 30 "replica $p promoted" is_master "$p"
	done
	for p in "${masters[@]}"; do
		wait_for 30 "old master $p follows" is_replica "$p"
	done
	for i in "${PORTS[@]}"; do wait_for 30 "cluster_state:ok on $(port "$i")" cluster_ok "$(port "$i")"; done
	log "failover done: new masters ${replicas[*]}"
}
is_master() { [[ $(role "$1") == master ]]; }
is_replica() { [[ $(role "$1") == slave ]]; }

start_sentinel() {
	local m r i
	m=$(port 0)
	r=$(port 1)
	start_server "$m"
	start_server "$r" --replicaof 127.0.0.1 "$m"
	wait_for 20 "PONG on $m" ping "$m"
	wait_for 20 "replica $r in sync" replica_synced "$r"
	for i in 2 3 4; do
		local p conf
		p=$(port "$i")
		mkdir -p "$RUN/$p"
		conf=$RUN/$p/sentinel.conf
		cat >"$conf" <<CONF
bind 127.0.0.1
port $p
daemonize yes
pidfile $RUN/$p/redis.pid
logfile $RUN/$p/redis.log
dir $RUN/$p
sentinel monitor $MASTER_SET 127.0.0.1 $m 2
sentinel down-after-milliseconds $MASTER_SET 1000
sentinel failover-timeout $MASTER_SET 5000
sentinel parallel-syncs $MASTER_SET 1
CONF
		redis-server "$conf" --sentinel </dev/null
	done
	for i in 2 3 4; do wait_for 20 "sentinel $(port "$i") sees the replica" sentinel_ready "$(port "$i")"; done
}

sentinel_master() { cli "$1" sentinel get-master-addr-by-name "$MASTER_SET" 2>/dev/null | sed -n 2p; }
sentinel_ready() {
	[[ $(cli "$1" sentinel master "$MASTER_SET" 2>/dev/null | awk 'prev == "num-slaves" { print; exit } { prev = $0 }') == 1 ]] &&
		[[ $(cli "$1" sentinel master "$MASTER_SET" 2>/dev/null | awk 'prev == "num-other-sentinels" { print; exit } { prev = $0 }') == 2 ]]
}

failover_sentinel() {
	local s before
	s=$(port 2)
	before=$(sentinel_master "$s")
	[[ -n $before ]] || die "sentinel $s does not know $MASTER_SET"
	wait_for 30 "a replica in sync" replicas_synced
	[[ $(cli "$s" sentinel failover "$MASTER_SET") == OK ]] || die "SENTINEL FAILOVER refused"
	wait_for 30 "a new master" master_moved "$s" "$before"
	local now
	now=$(sentinel_master "$s")
	wait_for 30 "$now is master" is_master "$now"
	for i in 3 4; do wait_for 30 "sentinel $(port "$i") agrees" master_moved "$(port "$i")" "$before"; done
	log "failover done: master $before -> $now"
}
replicas_synced() {
	local p
	for p in $(port 0) $(port 1); do [[ $(role "$p") == slave ]] && ! replica_synced "$p" && return 1; done
	return 0
}
master_moved() { local m; m=$(sentinel_master "$1"); [[ -n $m && $m != "$2" ]]; }

kill_master() {
	local p=$1 f pid
	f=$RUN/$p/redis.pid
	[[ -s $f ]] || die "no server of ours on port $p"
	is_master "$p" || die "$p is not a master"
	pid=$(<"$f")
	kill_ours "$p" || die "pid $pid is not the redis-server on $p"
	log "killed master $p (pid $pid)"
	if [[ $MODE == cluster ]]; then
		local i s=()
		for i in "${PORTS[@]}"; do [[ $(port "$i") == "$p" ]] || s+=("$(port "$i")"); done
		wait_for 30 "$p marked failed" node_failed "${s[0]}" "$p"
		for q in "${s[@]}"; do wait_for 30 "cluster_state:ok on $q" cluster_ok "$q"; done
	else
		wait_for 30 "a new master" master_moved "$(port 2)" "$p"
		local now
		now=$(sentinel_master "$(port 2)")
		wait_for 30 "$now is master" is_master "$now"
		log "master $p -> $now"
	fi
}
node_failed() { cli "$1" cluster nodes 2>/dev/null | awk -v a="127.0.0.1:$2@" 'index($2, a) == 1 && $3 ~ /fail/ && $3 !~ /fail\?/ { found = 1 } END { exit !found }'; }

# kill_ours PORT: SIGKILL the server on PORT if its pid file names a redis-server of that port.
kill_ours() {
	local f=$RUN/$1/redis.pid pid
	[[ -s $f ]] || return 1
	pid=$(<"$f")
	rm -f "$f"
	tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "redis-server.*:$1" || return 1
	kill -KILL "$pid" 2>/dev/null
}

stop() {
	local i
	for i in "${PORTS[@]}"; do kill_ours "$(port "$i")" || true; done
	log "stopped"
}

status() {
	local i up=0
	for i in "${PORTS[@]}"; do ping "$(port "$i")" && up=$((up + 1)); done
	log "$up of ${#PORTS[@]} processes answer PING"
	((up == ${#PORTS[@]}))
}

url() {
	if [[ $MODE == cluster ]]; then
		echo "redis://127.0.0.1:$(port 0),127.0.0.1:$(port 1),127.0.0.1:$(port 2)"
	else
		echo "redis-sentinel://127.0.0.1:$(port 2),127.0.0.1:$(port 3),127.0.0.1:$(port 4)/$MASTER_SET/0"
	fi
}

case $ACTION in
start)
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
		die "redis-server not installed (Debian: apt-get install -y redis-server)"
	for i in "${PORTS[@]}"; do ping "$(port "$i")" && die "something already answers PING on $(port "$i")"; done
	rm -rf "$RUN"
	mkdir -p "$RUN"
	t0=$SECONDS
	"start_$MODE"
	log "ready in $((SECONDS - t0))s: $(url)"
	;;
stop) stop ;;
status) status ;;
failover) "failover_$MODE" ;;
kill) kill_master "${3:?kill needs the port of a master}" ;;
url) url ;;
*) echo "usage: $0 {cluster|sentinel} {start|stop|status|failover|kill PORT|url}" >&2; exit 2 ;;
esac
