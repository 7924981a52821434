#!/usr/bin/env python3
"""A quick sanity run of one keel-peer library: default and tuned rows
alternated (fresh server, relay and client processes each run), medians.

usage: bench-peers/sanity.py [--lib gns[,enet,...]] [--runs 3] [--loss P] [--relay BIN]
                             [--channel reliable-ordered|unreliable]
                             [-- extra client flags]

Without --loss the client talks to the server directly on 127.0.0.1; with
--loss P both directions go through `keel-bench relay --impair loss=P
--impair-server loss=P --seed RUN` (BIN: --relay, default
target/release/keel-bench). Client flags default to the issue's small case:
--clients 8 --rate 60 --payload 400 --seconds 3. Not the benchmark
(scripts/rudp-peers.sh is): a check that a peer works and a first look.
With several libraries (comma-separated), each run goes through all of
them, default and tuned, in turn (a baseline in the same run).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "target", "release", "keel-peer")


def wait_ready(proc, what):
    """Reads the child's stderr until `ready ADDR` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if line.startswith("ready "):
            return line.split()[1]
    raise RuntimeError(f"{what} did not print ready")


def stop(proc):
    proc.send_signal(2)
    out, _ = proc.communicate(timeout=15)
    return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}


def one(args, lib, tuned, seed):
    t = ["--tuned"] if tuned else []
    srv = subprocess.Popen([PEER, lib, "server", "--bind", "127.0.0.1:0", *t],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    relay = None
    try:
        addr = wait_ready(srv, "server")
        if args.loss is not None:
            spec = f"loss={args.loss}"
            relay = subprocess.Popen([args.relay, "relay", "--bind", "127.0.0.1:0",
                                      "--upstream", addr, "--impair", spec,
                                      "--impair-server", spec, "--seed", str(seed)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            addr = wait_ready(relay, "relay")
        extra = args.client or ["--clients", "8", "--rate", "60", "--payload", "400",
                                "--seconds", "3"]
        c = subprocess.run([PEER, lib, "client", "--connect", addr, "--channel",
                            args.channel, *t, *extra],
                           capture_output=True, text=True, timeout=120)
        client = json.loads(c.stdout.strip().splitlines()[-1])
    finally:
        r = stop(relay) if relay else None
        s = stop(srv)
    return client, s, r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default="gns")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--loss", type=float)
    p.add_argument("--channel", default="reliable-ordered")
    p.add_argument("--relay", default=os.path.join(HERE, "..", "target", "release", "keel-bench"))
    p.add_argument("client", nargs="*")
    args = p.parse_args()
    libs = args.lib.split(",")
    rows = {(lib, t): [] for lib in libs for t in (False, True)}
    for run in range(args.runs):
        for lib in libs:
            for tuned in (False, True):
                c, s, r = one(args, lib, tuned, run + 1)
                if not c.get("ok"):
                    print(f"run {run} {lib} tuned={tuned}: not ok: {c.get('error')}", file=sys.stderr)
                    continue
                wire = None
                if r:
                    # The relay counted the warmup's messages too.
                    delivered = c["messages_delivered"] + c.get("warmup_echoes", 0)
                    payload = 2 * delivered * c["payload_bytes"]
                    wire = (r["up_bytes"] + r["down_bytes"]) / payload if payload else None
                rows[(lib, tuned)].append({
                    "p50": c["rtt_p50_us"], "p99": c["rtt_p99_us"], "p999": c["rtt_p999_us"],
                    "max": c["rtt_max_us"], "lost": c["lost"], "sent": c["messages_sent"],
                    "cpu_c": c["cpu_us_per_message"], "cpu_s": s.get("cpu_us_per_message"),
                    "rss_conn": s.get("rss_bytes_per_connection"), "wire": wire,
                })
    loss = "loopback" if args.loss is None else f"relay loss {args.loss} each way"
    print(f"{args.channel}, {loss}, medians of {args.runs} alternated runs")
    for (lib, tuned), xs in rows.items():
        if not xs:
            print(f"  {lib} {'tuned' if tuned else 'default'}: no ok run")
            continue
        med = {k: statistics.median([x[k] for x in xs if x[k] is not None] or [0]) for k in xs[0]}
        print(f"  {lib} {'tuned  ' if tuned else 'default'}: p50 {med['p50']:.0f} us, p99 {med['p99']:.0f} "
              f"us, p99.9 {med['p999']:.0f} us, max {med['max']:.0f} us, lost {med['lost']:.0f} of "
              f"{med['sent']:.0f}, CPU/msg client {med['cpu_c']:.1f} us server {med['cpu_s']:.1f} us, "
              f"RSS/conn {med['rss_conn']:.0f} B" +
              (f", wire/payload {med['wire']:.2f}" if med['wire'] else ""))


if __name__ == "__main__":
    main()
