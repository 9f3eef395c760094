#!/usr/bin/env bash
# Restarts of a `cluster` worker under the same name, at once: starts `nats-server` on a free
# port and a client node, then ROUNDS times starts worker `w1`, waits until it serves, ends it
# (SIGINT: it leaves; SIGKILL: it just dies, its connections linger until the kernel closes
# them) and starts the next `w1` without a pause. Counts the restarts that joined (printed
# `worker w1 serving`) against those refused (exit 1, `NameTaken`), per signal.
#
#   bash benches/scripts/remote_restarts.sh [ROUNDS]    # 32 by default
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-32}
export PATH="$PATH:/usr/sbin:/sbin"
command -v nats-server >/dev/null || { echo "remote_restarts: nats-server is not installed" >&2; exit 1; }
cargo build --release -p examples --bin cluster >&2
cluster=target/release/cluster
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
work=$(mktemp -d)
nats-server -a 127.0.0.1 -p "$port" >"$work/nats.log" 2>&1 &
nats=$!
client=""
cleanup() {
    [ -n "$client" ] && kill "$client" 2>/dev/null || true
    kill "$nats" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
url="nats://127.0.0.1:$port"
for _ in $(seq 50); do
    (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
done
export CLUSTER_HEARTBEAT_MS=200
"$cluster" client c1 "$url" >"$work/client.log" 2>&1 &
client=$!

# Starts w1; prints "joined" once it serves, or "refused" if it exits first.
start_worker() {
    local log=$1
    "$cluster" worker w1 "$url" >"$log" 2>&1 &
    local pid=$!
    for _ in $(seq 300); do
        if grep -q 'worker w1 serving' "$log"; then
            echo "joined $pid"
            return
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "refused $pid"
            return
        fi
        sleep 0.02
    done
    echo "stuck $pid"
}

for signal in INT KILL; do
    joined=0
    refused=0
    read -r outcome pid < <(start_worker "$work/w1-$signal-0.log")
    for round in $(seq "$rounds"); do
        kill "-$signal" "$pid" 2>/dev/null || true
        # Gone (not a child of this shell: polled), then the next one at once.
        while kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
        read -r outcome pid < <(start_worker "$work/w1-$signal-$round.log")
        case $outcome in
            joined) joined=$((joined + 1)) ;;
            *) refused=$((refused + 1)); tail -2 "$work/w1-$signal-$round.log" >&2 ;;
        esac
    done
    kill -INT "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
    echo "after SIG$signal: $joined of $rounds immediate restarts joined, $refused refused"
done
