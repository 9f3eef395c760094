#!/usr/bin/env bash
# System calls, context switches and CPU migrations per operation of the `runtime_multi` rows,
# ours and tokio's, counted by `perf stat` over each side run alone (`BENCH_SIDE`): one round
# of SAMPLES timed samples after the table's 3 warm-ups, the counts divided by every run's
# operations. Each run builds a fresh runtime (a ring and a thread for us, threads and an epoll
# instance for tokio), which adds a few dozen calls a run: about 0.005 per operation on the
# 10k rows, 0.05 on the 1k rows. Run nothing else alongside.
#
#   bash benches/scripts/syscalls.sh [SAMPLES]    # 21 by default
#
# Needs `perf` with the `raw_syscalls` tracepoints (root, or `perf_event_paranoid` <= -1);
# tries to install it with apt when it is missing and says so when it cannot.
set -euo pipefail
cd "$(dirname "$0")/../.."
samples=${1:-21}
warmups=3
if ! command -v perf >/dev/null; then
    echo "installing perf" >&2
    apt-get install -y "linux-tools-$(uname -r)" linux-tools-common >/dev/null 2>&1 \
        || apt-get install -y linux-perf >/dev/null 2>&1 \
        || { echo "syscalls: perf is missing and could not be installed; nothing counted" >&2; exit 1; }
fi
cargo build --release -p benches --bin runtime_multi >&2
binary=target/release/runtime_multi
# row name, operations per sample (what "per operation" divides by)
rows=(
    "spawn_many_local_10k 10000"
    "spawn_child_await_10k 10000"
    "spawn_clone_await_10k 10000"
    "yield_many_200x1000 200000"
    "ping_pong_1000 1000"
    "ping_pong_child_1000 1000"
    "chained_spawn_1000 1000"
    "chained_spawn_child_1000 1000"
    "wake_latency_1000 1000"
)
events=raw_syscalls:sys_enter,context-switches,cpu-migrations
# Prints the three counts, space-separated, of one run of `row` on `side` with `samples`.
count() {
    BENCH_FILTER="$1" BENCH_SIDE="$2" BENCH_SAMPLES="$3" BENCH_ROUNDS=1 \
        perf stat -x, -e "$events" "$binary" 2>&1 >/dev/null \
        | awk -F, '/raw_syscalls:sys_enter|context-switches|cpu-migrations/ { printf "%s ", $1 }'
}
printf '| row | syscalls / op ours | tokio | context switches / op ours | tokio | migrations / op ours | tokio |\n'
printf '|---|---:|---:|---:|---:|---:|---:|\n'
for entry in "${rows[@]}"; do
    read -r row ops <<<"$entry"
    line="| $row |"
    declare -A per=()
    for side in ours peer; do
        read -r s c m <<<"$(count "$row" "$side" "$samples")"
        per[$side]=$(awk -v s="$s" -v c="$c" -v m="$m" -v n=$((samples + warmups)) -v ops="$ops" \
            'BEGIN { printf "%.3f %.3f %.4f", s / n / ops, c / n / ops, m / n / ops }')
    done
    read -r so co mo <<<"${per[ours]}"
    read -r sp cp mp <<<"${per[peer]}"
    echo "$line $so | $sp | $co | $cp | $mo | $mp |"
done
