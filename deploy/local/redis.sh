#!/usr/bin/env bash
# redis.sh {start|stop|status}: Debian's redis-server on 127.0.0.1, started by
# hand (no systemd), daemonized, without persistence: test state is disposable.
#
# Environment (all optional):
#   WMRL_LOCAL_DIR           runtime dir for pid and log (default <repo>/.local)
#   WMRL_REDIS_PORT          port (default 6379)
#   WMRL_REDIS_STOP_TIMEOUT  seconds between SIGTERM and SIGKILL (default 15)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
. "$HERE/lib.sh"
LOCAL=${WMRL_LOCAL_DIR:-$REPO/.local}
RUN=$LOCAL/redis
PORT=${WMRL_REDIS_PORT:-6379}
STOP_TIMEOUT=${WMRL_REDIS_STOP_TIMEOUT:-15}
PIDFILE=$RUN/redis.pid
# What our server's command line shows, so that a recycled pid is never signalled.
PROC="redis-server 127.0.0.1:$PORT"

ping() { [[ $(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null) == PONG ]]; }

pid_alive() { pidfile_pid "$PIDFILE" "$PROC" >/dev/null; }

ensure_installed() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		log "redis-server missing; installing Debian's package"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server </dev/null >/dev/null
		return 0
	fi
	die "redis-server not installed (Debian: sudo apt-get install -y redis-server)"
}

start() {
	if pid_alive; then
		log "already running (pid $(<"$PIDFILE")) on 127.0.0.1:$PORT"
		return 0
	fi
	ensure_installed
	if ping; then die "something already answers PING on 127.0.0.1:$PORT"; fi
	rm -rf "$RUN"
	mkdir -p "$RUN"
	local t0
	t0=$(now)
	redis-server --bind 127.0.0.1 --port "$PORT" --protected-mode yes \
		--daemonize yes --pidfile "$PIDFILE" --logfile "$RUN/redis.log" --dir "$RUN" \
		--save '' --appendonly no </dev/null
	local deadline=$((SECONDS + 20))
	until ping; do
		((SECONDS < deadline)) || { tail -n 20 "$RUN/redis.log" >&2 || true; die "no PONG on 127.0.0.1:$PORT after 20s"; }
		sleep 0.1
	done
	log "ready on 127.0.0.1:$PORT in $(since "$t0")s: $(redis-server --version | cut -d' ' -f1-3), pid $(<"$PIDFILE")"
}

stop() { stop_pidfile "$PIDFILE" "$PROC" "$STOP_TIMEOUT"; }

status() {
	if pid_alive; then
		local state="no PONG"
		ping && state=PONG
		log "running: pid $(<"$PIDFILE"), 127.0.0.1:$PORT $state"
		return 0
	fi
	if ping; then
		log "not started by redis.sh, but something answers PING on 127.0.0.1:$PORT"
	else
		log "not running"
	fi
	return 3
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 {start|stop|status}" >&2
	exit 2
	;;
esac
