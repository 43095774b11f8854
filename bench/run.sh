#!/usr/bin/env bash
# Runs every benchmark of bench/ in full, writes the raw output under
# results/<UTC time>/, compares with benchstat and prints the ratios the
# project is judged on. About 40 minutes on 2 cores, most of it the outage
# windows, the fleet under latency and the 1M-record prefill.
#
# Each comparison runs in rounds: one process per round runs every client (or
# implementation, or depth) once, so that drift and noise from the rest of the
# machine fall on all of them alike; the rounds are the samples benchstat sees.
#
# Environment:
#   COUNT=10         rounds of the overhead, enqueue and depth benchmarks
#   SLOW_COUNT=6     rounds of the fault, outage and drain benchmarks
#   LAT_COUNT=3      rounds of the drain behind a 50 ms API (BenchmarkDrainLatency,
#                    about 1.5 minutes a round, most of it the 4 workers' drain)
#   OUTAGE=10s       each client's outage window, and the queue's
#                    (BenchmarkQueueOutage: how soon it sends once the API
#                    is back, its probes a minute offline)
#   DEPTHS=1k,100k,1M  queue depths; IDEM_BENCH_SKIP_1M=1 drops 1M
#   IDEM_BENCH_CACHE=DIR  keep the prefilled queue files there (reused by a
#                    later run); by default they go to a temporary folder that
#                    is removed at the end
#   PROFILES=1       also write CPU profiles of the judged paths (0: none)
#   PHASES="overhead clientcost enqueue depth drain fault outage fleet"  the
#                    benchmarks to run, by default all; fleet is the PostgreSQL
#                    queue's (../pgqueue, its own module), on a throwaway server
#                    it starts; without PostgreSQL's binaries (Debian's
#                    postgresql package) its rows say n/a. It also runs
#                    BenchmarkFleetTx and BenchmarkFleetLatency (bench/):
#                    pgqueue beside River and the bbolt queue, through
#                    latency proxies (about 3 minutes a round)
#   FLEET_COUNT=3    rounds of BenchmarkFleetTx and BenchmarkFleetLatency
#   FLEET_N=5000     intents each drain of BenchmarkFleetLatency works: at
#                    2,000, three replicas' 2.7 s drain at 2 ms/20 ms was
#                    much start and last lanes' tails (2.28x one replica;
#                    2.69x at 6,000)
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-10}
SLOW_COUNT=${SLOW_COUNT:-6}
LAT_COUNT=${LAT_COUNT:-3}
OUTAGE=${OUTAGE:-10s}
DEPTHS=${DEPTHS:-1k,100k,1M}
PROFILES=${PROFILES:-1}
FLEET_COUNT=${FLEET_COUNT:-3}
FLEET_N=${FLEET_N:-5000}
PHASES=" ${PHASES:-overhead clientcost enqueue depth drain fault outage fleet} "
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

if [[ "${IDEM_BENCH_SKIP_1M:-0}" == 1 ]]; then
	DEPTHS=$(tr ',' '\n' <<<"$DEPTHS" | grep -vx 1M | paste -sd, -)
fi

out="results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z "${IDEM_BENCH_CACHE:-}" ]]; then
	export IDEM_BENCH_CACHE="$tmp/depth"
fi
export IDEM_BENCH_SMOKE=0 IDEM_BENCH_OUTAGE="$OUTAGE" IDEM_BENCH_DEPTHS="$DEPTHS"

log() { printf '== %s  load %s  %s\n' "$(date -u +%H:%M:%S)" "$(cut -d' ' -f1 /proc/loadavg)" "$*"; }

{
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "cores: $(nproc)"
	echo "go: $(go version)"
	echo "kernel: $(uname -sr)"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)"
	echo "uncommitted files: $(git status --porcelain -- .. 2>/dev/null | wc -l)"
	echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "settings: COUNT=$COUNT SLOW_COUNT=$SLOW_COUNT LAT_COUNT=$LAT_COUNT OUTAGE=$OUTAGE DEPTHS=$DEPTHS FLEET_COUNT=$FLEET_COUNT FLEET_N=$FLEET_N PHASES=$PHASES"
} | tee "$out/machine.txt"

log "building"
go test -c -o "$tmp/bench.test" .
(cd ../pgqueue && go test -c -o "$tmp/pgqueue.test" .)
GOBIN="$tmp" go install "$BENCHSTAT"

# bench FILE ARGS...: one process of the test binary $binary (bench.test
# unless set), its output appended to FILE.
bench() {
	local file=$1 bin=${binary:-bench.test}
	shift
	"$tmp/$bin" -test.run '^$' -test.timeout 0 "$@" >>"$out/$file" 2>&1 || {
		echo "$bin $* failed; see $out/$file" >&2
		tail -20 "$out/$file" >&2
		exit 1
	}
}

# rounds N FILE ARGS...: N processes, one a round, each running bench.
rounds() {
	local n=$1 i
	shift
	for ((i = 1; i <= n; i++)); do
		bench "$@"
	done
}

phase() { [[ "$PHASES" == *" $1 "* ]]; }

if phase overhead; then
	log "overhead: $COUNT rounds"
	rounds "$COUNT" overhead.txt -test.bench '^BenchmarkOverhead$' -test.benchmem -test.benchtime 1s
fi

if phase clientcost; then
	log "client cost without network: $COUNT rounds"
	rounds "$COUNT" clientcost.txt -test.bench '^BenchmarkClientCost$' -test.benchmem -test.benchtime 1s
fi

if phase enqueue; then
	log "enqueue: $COUNT rounds"
	rounds "$COUNT" enqueue.txt -test.bench '^BenchmarkEnqueue$' -test.benchtime 1s
fi

if phase depth; then
	log "queue depths $DEPTHS: prefill (not measured)"
	bench prefill.log -test.bench '^BenchmarkEnqueueDepth$' -test.benchtime 1x -test.v
	grep -h 'queued\|opened' "$out/prefill.log" || true
	log "queue depths: $COUNT rounds"
	rounds "$COUNT" depth.txt -test.bench '^BenchmarkEnqueueDepth$' -test.benchtime 300x
fi

if phase drain; then
	log "drain: $SLOW_COUNT rounds"
	rounds "$SLOW_COUNT" drain.txt -test.bench '^BenchmarkDrain$' -test.benchtime 1s
	log "drain behind a 50 ms API: $LAT_COUNT rounds of 64 lanes x 100 records, 4 workers and the default"
	rounds "$LAT_COUNT" drain.txt -test.bench '^BenchmarkDrainLatency$' -test.benchtime 1x
fi

if phase fault; then
	log "fault: $SLOW_COUNT rounds of 10,000 POSTs per client"
	rounds "$SLOW_COUNT" fault.txt -test.bench '^BenchmarkFault$' -test.benchtime 10000x
fi

if phase outage; then
	log "outage: $SLOW_COUNT rounds of $OUTAGE per client and fault"
	rounds "$SLOW_COUNT" outage.txt -test.bench '^BenchmarkOutage$' -test.benchtime 1x
	log "queue outage: $SLOW_COUNT rounds of $OUTAGE offline, then the API back"
	rounds "$SLOW_COUNT" queue-outage.txt -test.bench '^BenchmarkQueueOutage$' -test.benchtime 1x
fi

if phase fleet; then
	log "fleet store (PostgreSQL): $COUNT rounds of business transactions, $SLOW_COUNT of drains, $FLEET_COUNT of batch enqueues"
	binary=pgqueue.test rounds "$COUNT" fleet.txt -test.bench '^BenchmarkBusinessTx$' -test.benchtime 1000x
	binary=pgqueue.test rounds "$SLOW_COUNT" fleet.txt -test.bench '^BenchmarkFleetDrain$' -test.benchtime 3000x
	binary=pgqueue.test rounds "$FLEET_COUNT" fleet.txt -test.bench '^BenchmarkEnqueueMany$' -test.benchtime 1x
	log "fleet through latency proxies, River beside: $FLEET_COUNT rounds of $FLEET_N intents"
	rounds "$FLEET_COUNT" fleet.txt -test.bench '^BenchmarkFleetTx$' -test.benchtime 100x
	rounds "$FLEET_COUNT" fleet.txt -test.bench '^BenchmarkFleetLatency$' -test.benchtime "${FLEET_N}x"
	grep -h 'SKIP\|skip' "$out/fleet.txt" | sort -u || true
fi

if [[ "$PROFILES" == 1 ]]; then
	log "CPU profiles"
	deepest=${DEPTHS##*,}
	while read -r name pattern benchtime; do
		bench "profile-$name.txt" -test.bench "$pattern" -test.benchtime "$benchtime" \
			-test.cpuprofile "$out/cpu-$name.pprof" -test.outputdir .
	done <<-EOF
		overhead-post-raw ^BenchmarkOverhead$/^op=POST$/^client=raw$ 10s
		overhead-post-idem-do ^BenchmarkOverhead$/^op=POST$/^client=idem-do$ 10s
		overhead-get-raw ^BenchmarkOverhead$/^op=GET$/^client=raw$ 10s
		overhead-get-idem-do ^BenchmarkOverhead$/^op=GET$/^client=idem-do$ 10s
		enqueue-bolt-update ^BenchmarkEnqueue$/^impl=bolt-update$/^producers=1$ 3s
		enqueue-queue-1 ^BenchmarkEnqueue$/^impl=queue$/^producers=1$ 3s
		enqueue-queue-64 ^BenchmarkEnqueue$/^impl=queue$/^producers=64$ 3s
		depth-$deepest ^BenchmarkEnqueueDepth$/^depth=$deepest$ 1000x
	EOF
	cp "$tmp/bench.test" "$out/bench.test" # pprof needs the binary
fi
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/machine.txt"

log "benchstat"
for f in overhead:"-col /client" clientcost:"-col /client" enqueue: depth:"-col /depth" drain: fault:"-col /client" outage:"-col /client" queue-outage: fleet:; do
	name=${f%%:*}
	if [[ -s "$out/$name.txt" ]]; then
		# shellcheck disable=SC2086 # the options are words
		"$tmp/benchstat" ${f#*:} "$out/$name.txt"
	fi
done >"$out/benchstat.txt" 2>&1
cat "$out/benchstat.txt"

log "summary (the median of the rounds' ratios; benchstat above shows the spread)"
files=()
for name in overhead clientcost enqueue depth drain fault outage queue-outage fleet; do
	if [[ -s "$out/$name.txt" ]]; then
		files+=("$out/$name.txt")
	fi
done
go run ./cmd/ratios "${files[@]}" | tee "$out/summary.txt"
echo
echo "raw output, benchstat and summary: $out"
