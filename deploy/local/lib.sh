# shellcheck shell=bash
# lib.sh: what the local service scripts (kafka.sh, cluster.sh, redis.sh, services.sh) share.
# Sourced, never run: `. "$HERE/lib.sh"`. The Kafka part reads the caller's LIB (broker jars),
# REPO and LOCAL; a broker's directory holds server.properties, log4j2.properties, logs/ and
# kafka.pid, for the one broker of kafka.sh as for each node of cluster.sh.

log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { log "error: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# runs PID PATTERN: whether PID is alive with PATTERN in its command line, so that a recycled pid
# is never signalled.
runs() { [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q "$2"; }

# pidfile_pid FILE PATTERN: prints the pid FILE names if that process runs PATTERN.
pidfile_pid() {
	[[ -s $1 ]] || return 1
	local pid
	pid=$(<"$1")
	runs "$pid" "$2" || return 1
	echo "$pid"
}

# reap PID SIG TIMEOUT [DEADLINE]: for a PID that was sent SIG, waits until it exits or SECONDS
# reaches DEADLINE (default TIMEOUT from now), then sends SIGKILL and waits until it has gone.
# Returns 1 when it took SIGKILL.
reap() {
	local pid=$1 sig=$2 timeout=$3 deadline=${4:-$((SECONDS + $3))}
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
	kill -0 "$pid" 2>/dev/null || return 0
	log "pid $pid still alive ${timeout}s after SIG$sig; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	return 1
}

# stop_pidfile PIDFILE PATTERN TIMEOUT: stops the process PIDFILE names if it runs PATTERN (SIGTERM,
# SIGKILL after TIMEOUT seconds) and removes PIDFILE.
stop_pidfile() {
	local pid t0 how=cleanly
	if ! pid=$(pidfile_pid "$1" "$2"); then
		rm -f "$1"
		log "not running"
		return 0
	fi
	t0=$(now)
	kill -TERM "$pid"
	reap "$pid" TERM "$3" || how="with SIGKILL"
	rm -f "$1"
	log "stopped pid $pid $how in $(since "$t0")s"
}

need_java() {
	command -v java >/dev/null || die "java not found; Kafka 4.x needs Java 17+ (Debian: apt-get install -y openjdk-17-jre-headless)"
	local v
	v=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
	[[ ${v%%.*} -ge 17 ]] || die "java $v found; Kafka 4.x needs Java 17+"
}

# storage_tool LOG4J_CONFIG ARGS...: Kafka's kafka-storage tool (random-uuid, format).
storage_tool() {
	local conf=$1
	shift
	java -cp "$LIB/*" -Dlog4j2.configurationFile="$conf" kafka.tools.StorageTool "$@"
}

# write_log4j2 DIR: the broker's log4j2.properties, logging INFO to DIR/logs/server.log.
write_log4j2() {
	cat >"$1/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $1/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
EOF
}

# broker_pid DIR: prints the pid of the broker of DIR if it is alive and runs DIR's config.
broker_pid() { pidfile_pid "$1/kafka.pid" "kafka.Kafka $1/server.properties"; }

# launch_broker DIR JVM_FLAGS...: starts the broker of DIR in the background and writes its pid to
# DIR/kafka.pid; stdout and stderr go to DIR/logs/stdout.log.
launch_broker() {
	local d=$1 pid
	shift
	# setsid: the broker outlives the shell (and make) that started it.
	setsid java "$@" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$d/log4j2.properties" -Dkafka.logs.dir="$d/logs" \
		-cp "$LIB/*" kafka.Kafka "$d/server.properties" </dev/null >>"$d/logs/stdout.log" 2>&1 &
	pid=$!
	# setsid execs in place unless it is a process-group leader (job control on), in which case
	# it forks: then find the broker by its own config path.
	sleep 0.2
	if ! runs "$pid" "kafka.Kafka $d/server.properties"; then
		pid=$(pgrep -f "kafka.Kafka $d/server.properties" | head -n1) || die "$d: broker process not found after launch"
	fi
	echo "$pid" >"$d/kafka.pid"
}

# kafkaready_bin: builds deploy/local/kafkaready (the readiness check) and prints its path.
kafkaready_bin() {
	local bin=$LOCAL/bin/kafkaready
	mkdir -p "$LOCAL/bin"
	(cd "$REPO" && go build -o "$bin" ./deploy/local/kafkaready) || die "could not build deploy/local/kafkaready"
	echo "$bin"
}
