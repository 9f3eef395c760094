#!/usr/bin/env bash
# Our `kv` against `redis-server` on this machine, in one run, with redis-benchmark's flags
# from the kv issue: `-t set,get -n 200000 -c 50` with `-P 1` and `-P 16`, and `-c 500`.
# redis-server runs with `appendfsync always` (every acknowledged write synced, as ours), then
# `appendfsync everysec` against our `--durability everysec`.
# Installs redis-server and redis-tools with apt when they are missing. Prints, per row,
# requests per second and p50/p99 of each, and ours over redis-server.
#
#   bash benches/scripts/kv_vs_redis.sh [REQUESTS]
set -euo pipefail
cd "$(dirname "$0")/../.."
requests=${1:-200000}
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
    echo "installing redis-server and redis-tools" >&2
    apt-get install -y redis-server redis-tools >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y redis-server redis-tools >/dev/null 2>&1; } \
        || { echo "kv_vs_redis: could not install redis-server and redis-tools" >&2; exit 1; }
fi
cargo build --release -p examples --bin kv >&2
work=$(mktemp -d)
kv="" kv_everysec=""
trap 'redis-cli -p 6390 shutdown nosave >/dev/null 2>&1 || true; redis-cli -p 6393 shutdown nosave >/dev/null 2>&1 || true; kill $kv $kv_everysec 2>/dev/null || true; rm -rf "$work"' EXIT
redis-server --port 6390 --save '' --appendonly yes --appendfsync always --dir "$work" \
    --daemonize yes --logfile "$work/redis.log" >/dev/null
mkdir -p "$work/everysec"
redis-server --port 6393 --save '' --appendonly yes --appendfsync everysec --dir "$work/everysec" \
    --daemonize yes --logfile "$work/redis-everysec.log" >/dev/null
./target/release/kv 127.0.0.1:6391 127.0.0.1:6392 "$work/kv" >"$work/kv.out" 2>&1 &
kv=$!
./target/release/kv 127.0.0.1:6394 127.0.0.1:6395 "$work/kv-everysec" --durability everysec \
    >"$work/kv-everysec.out" 2>&1 &
kv_everysec=$!
for port in 6390 6391 6393 6394; do
    for _ in $(seq 50); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
done
# One CSV line per test: "test","rps","avg","min","p50","p95","p99","max".
run() { redis-benchmark -p "$1" -t set,get -n "$requests" "${@:2}" --csv 2>/dev/null | grep -v '^"test"'; }
printf '| durability | flags | test | kv rps | redis rps | kv / redis | kv p50 / p99 ms | redis p50 / p99 ms |\n'
printf '|---|---|---|---:|---:|---:|---:|---:|\n'
for mode in "always 6391 6390" "everysec 6394 6393"; do
    read -r name ours theirs <<<"$mode"
    for flags in "-c 50 -P 1" "-c 50 -P 16" "-c 500 -P 1"; do
        # shellcheck disable=SC2086
        paste -d, <(run "$ours" $flags) <(run "$theirs" $flags) | tr -d '"' | awk -F, -v flags="$flags" -v mode="$name" '{
            printf "| %s | %s | %s | %.0f | %.0f | %.2f | %s / %s | %s / %s |\n",
                mode, flags, $1, $2, $10, $2 / $10, $5, $7, $13, $15 }'
    done
done
