#!/usr/bin/env python3
"""How much a log rewrite (compaction) of a large store stalls a GET: our `kv` against
`redis-server` (its AOF rewrite, `BGREWRITEAOF`), side by side in one run.

Loads KEYS keys (1,000,000 by default) into a fresh `kv` (release build, default durability
`always`) and a fresh `redis-server` (`appendonly yes`, `appendfsync always`, no RDB), then,
in each of RUNS runs (3 by default), for each server in turn:
  1. baseline: one client sends GETs of random keys, one at a time, for SECONDS seconds with
     no rewrite running, and notes each GET's round trip;
  2. rewrite: `BGREWRITEAOF` starts a rewrite of the whole store, and the same client sends
     GETs until `INFO persistence` says the rewrite is done.
Prints, per run and server, the baseline's p50, p99 and max, the rewrite's duration, the GETs'
p99 and max during it, and the worst GET during the rewrite over the baseline's p99 and over
the baseline's max; then, per server, the median and range of those over the runs. The
baseline's max is the machine's noise floor: a GET that waits one scheduler tick.

    python3 benches/scripts/kv_rewrite_stall.py [KEYS] [RUNS] [SECONDS]

Builds kv with cargo first; runs redis-server if it is installed (`apt-get install
redis-server`), else only kv. Needs nothing else but python3.
"""

import gc
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

KEYS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(*parts):
    out = b"*%d\r\n" % len(parts)
    for part in parts:
        part = part if isinstance(part, bytes) else str(part).encode()
        out += b"$%d\r\n%s\r\n" % (len(part), part)
    return out


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def _line(self):
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("kv closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self._line()
        if line[:1] == b"$":
            length = int(line[1:])
            if length < 0:
                return None
            while len(self.buffer) < length + 2:
                self.buffer += self.sock.recv(1 << 20)
            value, self.buffer = self.buffer[:length], self.buffer[length + 2:]
            return value
        if line[:1] == b"-":
            raise RuntimeError(line.decode())
        return line[1:]

    def call(self, *parts):
        self.sock.sendall(command(*parts))
        return self.reply()


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def load(port):
    client = Client(port)
    batch = 10_000
    for start in range(0, KEYS, batch):
        end = min(KEYS, start + batch)
        client.sock.sendall(b"".join(command("SET", "key:%d" % i, "value-%016d" % i) for i in range(start, end)))
        for _ in range(start, end):
            client.reply()
    assert int(client.call("DBSIZE")) == KEYS


def gets(client, until):
    """GETs of random keys until `until()` says stop; their round trips in ms."""
    latencies = []
    while not until():
        key = "key:%d" % random.randrange(KEYS)
        started = time.perf_counter()
        value = client.call("GET", key)
        latencies.append((time.perf_counter() - started) * 1000)
        assert value is not None, key
    return latencies


def rewriting(port):
    info = Client(port).call("INFO", "persistence").decode()
    return "aof_rewrite_in_progress:1" in info or "aof_rewrite_scheduled:1" in info


def wait_until_up(port):
    for _ in range(100):
        try:
            Client(port).call("PING")
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("nothing answers on port %d" % port)


def measure(port):
    """One run on the server at `port`: (baseline latencies, rewrite seconds, latencies during)."""
    client = Client(port)
    deadline = time.monotonic() + SECONDS
    baseline = gets(client, lambda: time.monotonic() >= deadline)
    started = time.monotonic()
    client.call("BGREWRITEAOF")
    checks = [0]

    def done():
        checks[0] += 1
        # Asked every 100 GETs: INFO costs a round trip of its own.
        return checks[0] % 100 == 0 and not rewriting(port)

    during = gets(client, done)
    return baseline, time.monotonic() - started, during


def main():
    # The client's own pauses must not count as the servers'.
    gc.disable()
    subprocess.run(["cargo", "build", "--release", "-p", "examples", "--bin", "kv"], cwd=ROOT, check=True,
                   stdout=sys.stderr)
    work = tempfile.mkdtemp()
    port = 6400 + os.getpid() % 500
    servers = [("kv", port)]
    processes = [subprocess.Popen([os.path.join(ROOT, "target/release/kv"), "127.0.0.1:%d" % port,
                                   "127.0.0.1:%d" % (port + 1), os.path.join(work, "kv")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    if shutil.which("redis-server"):
        os.mkdir(os.path.join(work, "redis"))
        processes.append(subprocess.Popen(
            ["redis-server", "--port", str(port + 2), "--save", "", "--appendonly", "yes", "--appendfsync",
             "always", "--dir", os.path.join(work, "redis")], stdout=subprocess.DEVNULL))
        servers.append(("redis-server", port + 2))
    else:
        print("redis-server is not installed: kv alone", file=sys.stderr)
    try:
        for _, at in servers:
            wait_until_up(at)
            load(at)
        ratios = {name: ([], []) for name, _ in servers}
        print("| run | server | baseline p50 / p99 / max ms | rewrite s | during p99 / max ms "
              "| max during / baseline p99 | max during / baseline max |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for run in range(1, RUNS + 1):
            for name, at in servers:
                baseline, took, during = measure(at)
                p99 = percentile(baseline, 0.99)
                over_p99, over_max = max(during) / p99, max(during) / max(baseline)
                ratios[name][0].append(over_p99)
                ratios[name][1].append(over_max)
                print("| %d | %s | %.3f / %.3f / %.3f | %.2f | %.3f / %.3f | %.1f | %.2f |" % (
                    run, name, percentile(baseline, 0.5), p99, max(baseline), took,
                    percentile(during, 0.99), max(during), over_p99, over_max))
        print()
        for name, (over_p99, over_max) in ratios.items():
            print("%s, worst GET during a rewrite of %d keys: over the baseline p99 median %.1f "
                  "(%.1f-%.1f), over the baseline max median %.2f (%.2f-%.2f), %d runs"
                  % (name, KEYS, statistics.median(over_p99), min(over_p99), max(over_p99),
                     statistics.median(over_max), min(over_max), max(over_max), RUNS))
    finally:
        for process in processes:
            process.kill()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
