#!/usr/bin/env bash
# services.sh {up|down|status}: the Kafka broker and Redis server that the
# integration tests need. `up` starts each one only if nothing answers on its
# port yet, and writes what it started to a state file; `down` stops exactly
# that, so a broker someone else started (or left running for others) is
# never stopped by a test run.
#
# Environment (all optional):
#   WMRL_SERVICES_STATE  state file (default <local dir>/services.state)
#   WMRL_LOCAL_DIR, WMRL_KAFKA_PORT, WMRL_REDIS_PORT: see kafka.sh, redis.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
. "$HERE/lib.sh"
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
STATE=${WMRL_SERVICES_STATE:-$LOCAL/services.state}
KAFKA_PORT=${WMRL_KAFKA_PORT:-9092}
REDIS_PORT=${WMRL_REDIS_PORT:-6379}

started() { [[ -f $STATE ]] && grep -qx "$1" "$STATE"; }

record() {
	mkdir -p "$(dirname "$STATE")"
	started "$1" || echo "$1" >>"$STATE"
}

up() {
	if port_open "$KAFKA_PORT"; then
		log "Kafka already answers on 127.0.0.1:$KAFKA_PORT; using it"
	else
		# Recorded first: a start that fails half-way still gets stopped by down.
		record kafka
		"$HERE/kafka.sh" start
	fi
	if port_open "$REDIS_PORT"; then
		log "Redis already answers on 127.0.0.1:$REDIS_PORT; using it"
	else
		record redis
		"$HERE/redis.sh" start
	fi
}

down() {
	if [[ ! -f $STATE ]]; then
		log "nothing to stop: $STATE is absent (up started nothing)"
		return 0
	fi
	local rc=0
	if started redis; then "$HERE/redis.sh" stop || rc=1; fi
	if started kafka; then "$HERE/kafka.sh" stop || rc=1; fi
	rm -f "$STATE"
	return "$rc"
}

status() {
	"$HERE/kafka.sh" status || true
	"$HERE/redis.sh" status || true
	if [[ -f $STATE ]]; then
		log "started by up (stopped by down): $(paste -sd' ' "$STATE")"
	fi
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*)
	echo "usage: $0 {up|down|status}" >&2
	exit 2
	;;
esac
