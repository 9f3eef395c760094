#!/usr/bin/env bash
# Our `kv` against `redis-server` on this machine, with redis-benchmark's flags from the kv
# issue: `-t set` and `-t get`, `-n REQUESTS`, at `-c 50 -P 1`, `-c 50 -P 16` and `-c 500 -P 1`.
# redis-server runs with `appendfsync always` (every acknowledged write synced, as ours),
# then `appendfsync everysec` against our `--durability everysec`; each pair of servers is
# started fresh for its durability.
#
# Every row is run RUNS times (3 by default), the two servers alternating (kv first in odd
# runs, redis-server first in even ones), each benchmark run counted by
# `perf stat -e raw_syscalls:sys_enter -p PID` (every thread of the server) for the system
# calls it cost per request. Prints one markdown row per durability, flags and test: the
# range of requests per second of each, the ratio kv / redis-server taken within each run
# as the median (range) of the runs, the median p50 / p99 latencies, and the median system
# calls per request of each.
#
# Installs redis-server and redis-tools with apt when they are missing; perf is optional
# (without it the syscall columns say n/a).
#
#   bash benches/scripts/kv_vs_redis.sh [REQUESTS] [RUNS]     # 200 000, 3
set -euo pipefail
cd "$(dirname "$0")/../.."
requests=${1:-200000}
runs=${2:-3}
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    echo "installing redis-server and redis-tools" >&2
    apt-get install -y redis-server redis-tools >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y redis-server redis-tools >/dev/null 2>&1; } \
        || { echo "kv_vs_redis: could not install redis-server and redis-tools" >&2; exit 1; }
fi
perf_ok=0
if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter -x, -o /dev/null -- true 2>/dev/null; then
    perf_ok=1
fi
cargo build --release -p examples --bin kv >&2
kv_binary="${CARGO_TARGET_DIR:-target}/release/kv"
work=$(mktemp -d)
kv="" redis_port=""
stop() {
    [ -n "$redis_port" ] && { redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true; }
    [ -n "$kv" ] && { kill "$kv" 2>/dev/null || true; wait "$kv" 2>/dev/null || true; }
    kv="" redis_port=""
}
trap 'stop; rm -rf "$work"' EXIT
wait_for() {
    for _ in $(seq 100); do redis-cli -p "$1" PING >/dev/null 2>&1 && return; sleep 0.1; done
    echo "kv_vs_redis: nothing answers on port $1" >&2
    exit 1
}
# One benchmark run: prints "rps p50 p99 syscalls-per-request" (the last n/a without perf).
bench() {
    local port=$1 pid=$2 test=$3 csv count
    shift 3
    if [ "$perf_ok" = 1 ]; then
        csv=$(perf stat -e raw_syscalls:sys_enter -x, -o "$work/stat" -p "$pid" -- \
            redis-benchmark -p "$port" -t "$test" -n "$requests" "$@" --csv 2>/dev/null)
        count=$(awk -F, '/raw_syscalls/ { print $1 }' "$work/stat")
    else
        csv=$(redis-benchmark -p "$port" -t "$test" -n "$requests" "$@" --csv 2>/dev/null)
        count=""
    fi
    # "test","rps","avg","min","p50","p95","p99","max"
    echo "$csv" | grep -v '^"test"' | tr -d '"' | awk -F, -v count="$count" -v n="$requests" '{
        printf "%s %s %s %s\n", $2, $5, $7, (count == "" ? "n/a" : sprintf("%.2f", count / n)) }'
}
results="$work/results"
: >"$results"
for mode in always everysec; do
    mkdir -p "$work/$mode"
    redis-server --port 6390 --save '' --appendonly yes --appendfsync "$mode" \
        --dir "$work/$mode" --daemonize yes --logfile "$work/$mode/redis.log" >/dev/null
    redis_port=6390
    "$kv_binary" 127.0.0.1:6391 127.0.0.1:6392 "$work/$mode/kv" --durability "$mode" \
        >"$work/$mode/kv.out" 2>&1 &
    kv=$!
    wait_for 6390
    wait_for 6391
    redis_pid=$(redis-cli -p 6390 info server | tr -d '\r' | awk -F: '/^process_id:/ { print $2 }')
    for flags in "-c 50 -P 1" "-c 50 -P 16" "-c 500 -P 1"; do
        for run in $(seq "$runs"); do
            if [ $((run % 2)) = 1 ]; then order="kv redis"; else order="redis kv"; fi
            for test in set get; do
                for server in $order; do
                    if [ "$server" = kv ]; then port=6391 pid=$kv; else port=6390 pid=$redis_pid; fi
                    # shellcheck disable=SC2086
                    echo "$mode|$flags|$test|$run|$server|$(bench "$port" "$pid" "$test" $flags)" >>"$results"
                done
            done
        done
    done
    stop
done
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, flags, test, run, server, figures = line.rstrip("\n").split("|")
    rps, p50, p99, calls = figures.split()
    row = rows.setdefault((mode, flags, test), {})
    row.setdefault(server, {})[int(run)] = (float(rps), p50, p99, calls)
def span(values, digits):
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"
def median_of(texts):
    numbers = [float(text) for text in texts if text != "n/a"]
    return f"{statistics.median(numbers):.2f}" if numbers else "n/a"
print("| durability | flags | test | kv rps | redis rps | kv / redis | kv p50 / p99 ms | "
      "redis p50 / p99 ms | syscalls / request kv · redis |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for (mode, flags, test), row in rows.items():
    kv, redis = row["kv"], row["redis"]
    runs = sorted(set(kv) & set(redis))
    ratios = [kv[run][0] / redis[run][0] for run in runs]
    latency = lambda side: (f"{median_of([side[run][1] for run in runs])} / "
                            f"{median_of([side[run][2] for run in runs])}")
    print(f"| {mode} | {flags} | {test.upper()} "
          f"| {span([kv[run][0] for run in runs], 0)} | {span([redis[run][0] for run in runs], 0)} "
          f"| {statistics.median(ratios):.2f} ({span(ratios, 2)}) "
          f"| {latency(kv)} | {latency(redis)} "
          f"| {median_of([kv[run][3] for run in runs])} · {median_of([redis[run][3] for run in runs])} |")
EOF
