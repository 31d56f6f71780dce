#!/usr/bin/env bash
# services.sh {up|down|status}: the Kafka broker, Redis server and schema registry that the
# integration tests need. `up` starts each one only if nothing answers on its
# port yet, and writes what it started to a state file; `down` stops exactly
# that, so a broker someone else started (or left running for others) is
# never stopped by a test run.
#
# Environment (all optional):
#   WMRL_SERVICES_STATE  state file (default <local dir>/services.state)
#   WMRL_SERVICES_REGISTRY  0: leave the schema registry out (suites that do not use it)
#   WMRL_LOCAL_DIR, WMRL_KAFKA_PORT, WMRL_REDIS_PORT, WMRL_REGISTRY_PORT: see kafka.sh, redis.sh,
#   registry.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
. "$HERE/lib.sh"
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
STATE=${WMRL_SERVICES_STATE:-$LOCAL/services.state}
KAFKA_PORT=${WMRL_KAFKA_PORT:-9092}
REDIS_PORT=${WMRL_REDIS_PORT:-6379}
REGISTRY_PORT=${WMRL_REGISTRY_PORT:-8481}
WITH_REGISTRY=${WMRL_SERVICES_REGISTRY:-1}

started() { [[ -f $STATE ]] && grep -qx "$1" "$STATE"; }

record() {
	mkdir -p "$(dirname "$STATE")"
	started "$1" || echo "$1" >>"$STATE"
}

up() {
	# The registry's JVM takes the longest to serve (~20 s on 2 busy cores): it starts first, in
	# the background, and is waited for last.
	local reg=
	if [[ $WITH_REGISTRY == 0 ]]; then
		:
	elif port_open "$REGISTRY_PORT"; then
		log "something already answers on 127.0.0.1:$REGISTRY_PORT; using it as the schema registry"
	else
		record registry
		"$HERE/registry.sh" start &
		reg=$!
	fi
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
	if [[ -n $reg ]]; then
		wait "$reg" || die "the schema registry did not start (registry.sh start exit $?)"
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
	if started registry; then "$HERE/registry.sh" stop || rc=1; fi
	rm -f "$STATE"
	return "$rc"
}

status() {
	"$HERE/kafka.sh" status || true
	"$HERE/redis.sh" status || true
	[[ $WITH_REGISTRY == 0 ]] || "$HERE/registry.sh" status || true
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
