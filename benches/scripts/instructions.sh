#!/usr/bin/env bash
# Instructions our side of the scheduler and actor benchmarks executes, counted by valgrind's
# callgrind: unlike wall-clock time on a shared two-vCPU machine, the count repeats to within a
# few hundred instructions run after run, so a change of a fraction of a percent on a hot path
# shows. Each row runs alone (its warm-up runs and one sample, our side only, runtime start and
# shutdown included) under callgrind, which serializes threads: the count is the work done, not
# how it overlapped, so a change in cross-CPU wake-ups or idle spinning does not show here
# (the wall-clock tables in benches/README.md do that).
#
# Compares builds side by side: give each as a git revision; each is checked out in a temporary
# worktree and built in release in a shared target directory.
#
#   bash benches/scripts/instructions.sh REV [REV ...]    e.g. HEAD~3 HEAD
#
# Installs valgrind with apt when it is missing. Prints one markdown table, a column a
# revision, and the last revision's count over the first's.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$#" -eq 0 ]; then
    echo "usage: bash benches/scripts/instructions.sh REV [REV ...]" >&2
    exit 2
fi
if ! command -v valgrind >/dev/null; then
    echo "installing valgrind" >&2
    apt-get install -y valgrind >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y valgrind >/dev/null 2>&1; } \
        || { echo "instructions: could not install valgrind" >&2; exit 1; }
fi
work=$(mktemp -d)
trap 'for tree in "$work"/tree-*; do git worktree remove --force "$tree" >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
# binary, environment that keeps our side, row filters
rows=(
    "runtime_core BENCH_SIDE=ours spawn_await chained_spawn yield_many timer_churn"
    "runtime_multi BENCH_SIDE=ours spawn_many_local spawn_child_await spawn_clone_await yield_many ping_pong_1000 ping_pong_child chained_spawn_1000 chained_spawn_child"
    "actors_peers BENCH_ONLY=ours tell_1m_one tell_1m_round_robin ask_100k delegated spawn_10k monitor"
)
revisions=("$@")
for index in "${!revisions[@]}"; do
    tree="$work/tree-$index"
    git worktree add --detach "$tree" "${revisions[$index]}" >/dev/null 2>&1
    (cd "$tree" && CARGO_TARGET_DIR="$work/target" cargo build --release -p benches \
        --bin runtime_core --bin runtime_multi --bin actors_peers >&2)
    mkdir -p "$work/bin-$index"
    for binary in runtime_core runtime_multi actors_peers; do
        cp "$work/target/release/$binary" "$work/bin-$index/"
    done
done
count() {
    env "$2" BENCH_FILTER="$3" BENCH_SAMPLES=1 BENCH_ROUNDS=1 \
        valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" 2>&1 \
        | awk '/refs:/ { gsub(",", "", $NF); print $NF }'
}
header="| binary | row |"
rule="|---|---|"
for revision in "${revisions[@]}"; do
    header="$header $revision |"
    rule="$rule---:|"
done
echo "$header last / first |"
echo "$rule---:|"
for entry in "${rows[@]}"; do
    read -r binary side filters <<<"$entry"
    for filter in $filters; do
        line="| $binary | $filter |"
        first="" last=""
        for index in "${!revisions[@]}"; do
            instructions=$(count "$work/bin-$index/$binary" "$side" "$filter")
            line="$line $instructions |"
            first=${first:-$instructions}
            last=$instructions
        done
        echo "$line $(awk -v a="$first" -v b="$last" 'BEGIN { printf "%.4f", b / a }') |"
    done
done
