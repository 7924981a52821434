#!/usr/bin/env python3
"""The C API's CPU per message against the Rust client's, at the game tick.

8 clients (by default) each send a 400-byte reliable message at 60 Hz to
a keel-rudp echo server (crates/rudp-ffi/examples/tick_bench.rs `server`),
once as keel_rudp::Client (`tick_bench rust`) and once through the C API
(crates/rudp-ffi/bench/tick_clients.c: a 60 Hz frame loop polling every
client with timeout 0). Each run is a fresh process; the two alternate,
ROUNDS times. CPU is the client process's user + system time (wait4),
divided by the echoes it received. Prints the medians, the spread and the
ratio C / Rust; writes every run to OUT/results.jsonl.

Usage: scripts/c-api-bench.py [--rounds 5] [--seconds 10] [--clients 8]
                              [--out out/c-api-bench] [--overwrite]
Exit: 0 done; 1 a run failed; 2 bad arguments, or OUT holds results and
--overwrite was not given.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def build():
    run = lambda *a: subprocess.run(a, cwd=ROOT, check=True)
    run("cargo", "build", "--release", "-q", "-p", "keel-rudp-ffi")
    run("cargo", "build", "--release", "-q", "-p", "keel-rudp-ffi", "--example", "tick_bench")
    os.makedirs(os.path.join(ROOT, "target", "c-api"), exist_ok=True)
    run("cc", "-std=c99", "-D_POSIX_C_SOURCE=200809L", "-O2", "-Wall", "-Wextra", "-Werror",
        "-Icrates/rudp-ffi/include", "-o", "target/c-api/tick_clients",
        "crates/rudp-ffi/bench/tick_clients.c", "target/release/libkeel_rudp_ffi.a",
        "-lpthread", "-ldl", "-lm")


def one(cmd):
    """Runs cmd; returns its JSON line and its CPU seconds (user + system)."""
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited with {p.returncode}")
    rec = json.loads(out.strip().splitlines()[-1])
    rec["cpu_s"] = ru.ru_utime + ru.ru_stime
    rec["cpu_us_per_msg"] = rec["cpu_s"] * 1e6 / max(rec["echoed"], 1)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="runs of each client (default 5)")
    ap.add_argument("--seconds", type=int, default=10, help="seconds per run (default 10)")
    ap.add_argument("--clients", type=int, default=8, help="clients per run (default 8)")
    ap.add_argument("--out", default="out/c-api-bench", help="results directory")
    ap.add_argument("--overwrite", action="store_true", help="replace earlier results in --out")
    a = ap.parse_args()
    for name in ("rounds", "seconds", "clients"):
        v = getattr(a, name)
        if not 1 <= v <= 1000:
            ap.error(f"--{name}: expected 1 to 1000, got {v}")
    out = os.path.join(ROOT, a.out)
    results = os.path.join(out, "results.jsonl")
    if os.path.exists(results) and not a.overwrite:
        print(f"c-api-bench: {results} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    build()
    os.makedirs(out, exist_ok=True)
    server = subprocess.Popen(
        ["target/release/examples/tick_bench", "server", "127.0.0.1:0",
         str(2 * a.rounds * (a.seconds + 2) + 30)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            print(f"c-api-bench: the server said {line}", file=sys.stderr)
            return 1
        addr = line[1]
        cmds = {
            "rust": ["target/release/examples/tick_bench", "rust", addr, str(a.clients), str(a.seconds)],
            "c": ["target/c-api/tick_clients", addr, str(a.clients), str(a.seconds)],
        }
        recs = []
        with open(results, "w") as f:
            for r in range(a.rounds):
                for name in (("rust", "c") if r % 2 == 0 else ("c", "rust")):
                    rec = one(cmds[name])
                    rec["round"] = r
                    recs.append(rec)
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    print(f"round {r + 1}/{a.rounds} {name:4}: {rec['echoed']} echoes of "
                          f"{rec['sent']}, {rec['cpu_s'] * 1e3:.0f} ms CPU, "
                          f"{rec['cpu_us_per_msg']:.1f} us/message", file=sys.stderr)
    except (RuntimeError, json.JSONDecodeError) as e:
        print(f"c-api-bench: {e}", file=sys.stderr)
        return 1
    finally:
        server.kill()
        server.wait()
    med = {}
    for name in ("rust", "c"):
        v = [x["cpu_us_per_msg"] for x in recs if x["client"] == name]
        med[name] = statistics.median(v)
        print(f"{name:4}: median {med[name]:.1f} us CPU per message "
              f"(min {min(v):.1f}, max {max(v):.1f}, {len(v)} runs)")
    print(f"ratio c / rust: {med['c'] / med['rust']:.2f} "
          f"({a.clients} clients, 400 B at 60 Hz, {a.seconds} s per run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
