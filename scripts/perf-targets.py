#!/usr/bin/env python3
"""Measure keel-bench against c-floor for the performance targets.

usage: scripts/perf-targets.py [--rounds N] [--bench PATH] [--cfloor PATH]
                               [--out-md FILE] [--out-jsonl FILE]

Every command below is one fresh process per run. A round runs each command
once, in order, so drift of a shared machine hits all of them alike; N
rounds (default 7) give N runs per command. Figures are medians with
min..max over the runs; ratios are ratios of medians. Runs that fail (no
JSON, or "ok": false) are reported and left out.

Each run is wrapped in `flock /tmp/keel-measure.lock` when flock exists, so
measurements on a shared machine never overlap each other.

The workload is the seed's: 1024 B, 16 clients, window 1, work 0, warm-up
0.25 s, 1 s. c-floor is built from ../shared/peers/c-floor.c if missing.

Exit status: 0 when every target holds, 1 when one does not, 2 on bad usage.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys

WORKLOAD = "--protocol udp --payload 1024 --clients 16 --window 1 --work 0 --warmup 0.25 --seconds 1"


def commands(bench, cfloor):
    k = f"{bench} {WORKLOAD}"
    return {
        "keel shared 1": f"{k} --io-model shared --io-threads 1",
        "keel shared 2": f"{k} --io-model shared --io-threads 2",
        "keel shared 4": f"{k} --io-model shared --io-threads 4",
        "keel sharded 2, 2 lanes": f"{k} --io-model sharded --io-threads 2 --server-lanes 2",
        "c-floor 1 thread, batch": f"{cfloor} --threads 1 --batch",
        "c-floor 1 thread, plain": f"{cfloor} --threads 1",
        "c-floor 2 threads": f"{cfloor} --threads 2",
    }


def figures(d):
    """throughput, p99 us, CPU us per echo, peak RSS bytes (None if absent)."""
    if "roundtrips_per_second" in d:
        thr, p99, cpu, rss = d["roundtrips_per_second"], d.get("rtt_p99_us"), d.get("cpu_seconds"), d.get("peak_rss_bytes")
    else:
        c = d.get("cpu", {})
        thr, p99 = d["msgs_per_sec"], d.get("rtt_us", {}).get("p99")
        cpu, rss = (c.get("user_s") or 0) + (c.get("sys_s") or 0), None
    msgs = d.get("messages") or 0
    return {
        "throughput": thr,
        "p99_us": p99,
        "cpu_us_per_echo": cpu / msgs * 1e6 if cpu is not None and msgs else None,
        "peak_rss_bytes": rss,
    }


def run(cmd):
    argv = shlex.split(cmd)
    if shutil.which("flock"):
        argv = ["flock", "/tmp/keel-measure.lock"] + argv
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    line = next((l for l in p.stdout.splitlines() if l.startswith("{")), None)
    if line is None:
        print(f"  no JSON (exit {p.returncode}): {cmd}\n  {p.stderr[-300:]}", file=sys.stderr)
        return None
    d = json.loads(line)
    if d.get("ok") is False:
        print(f"  not ok ({d.get('error')}): {cmd}", file=sys.stderr)
        return None
    return figures(d)


def stat(runs, key):
    xs = [r[key] for r in runs if r.get(key) is not None]
    if not xs:
        return None
    return statistics.median(xs), min(xs), max(xs)


def fmt(s, digits=1, scale=1.0):
    if s is None:
        return "–"
    m, lo, hi = (x / scale for x in s)
    return f"{m:,.{digits}f} [{lo:,.{digits}f} .. {hi:,.{digits}f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bench", default="target/release/keel-bench")
    ap.add_argument("--cfloor", default="target/c-floor")
    ap.add_argument("--out-md")
    ap.add_argument("--out-jsonl")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds: expected an integer >= 1")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(root)
    if not os.access(a.bench, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-p", "keel-bench"], check=True)
    if not os.access(a.cfloor, os.X_OK):
        src = "../shared/peers/c-floor.c"
        if not os.path.exists(src):
            sys.exit(f"perf-targets.py: {a.cfloor} missing and {src} not found")
        os.makedirs(os.path.dirname(a.cfloor) or ".", exist_ok=True)
        subprocess.run(["cc", "-O2", "-pthread", "-o", a.cfloor, src], check=True)

    cmds = commands(a.bench, a.cfloor)
    results = {name: [] for name in cmds}
    raw = []
    for r in range(a.rounds):
        for name, cmd in cmds.items():
            f = run(cmd)
            print(f"[round {r + 1}/{a.rounds}] {name}: " + ("failed" if f is None else
                  f"{f['throughput']:,.0f} rt/s, p99 {f['p99_us']:.0f} us"), file=sys.stderr)
            if f is not None:
                results[name].append(f)
                raw.append({"config": name, "command": cmd, "round": r + 1, **f})

    def med(name, key):
        s = stat(results[name], key)
        return s[0] if s else None

    def ratio(a_name, b_name, key):
        x, y = med(a_name, key), med(b_name, key)
        return x / y if x is not None and y else None

    targets = [
        ("shared 1 throughput >= 0.95 x c-floor --threads 1 --batch", ratio("keel shared 1", "c-floor 1 thread, batch", "throughput"), ">=", 0.95),
        ("shared 1 p99 <= 1.1 x c-floor --threads 1 --batch", ratio("keel shared 1", "c-floor 1 thread, batch", "p99_us"), "<=", 1.1),
        ("shared 2 throughput >= 1.4 x shared 1", ratio("keel shared 2", "keel shared 1", "throughput"), ">=", 1.4),
        ("shared 4 throughput >= 0.9 x shared 2", ratio("keel shared 4", "keel shared 2", "throughput"), ">=", 0.9),
        ("sharded 2 (2 lanes) throughput >= 1.0 x c-floor --threads 2", ratio("keel sharded 2, 2 lanes", "c-floor 2 threads", "throughput"), ">=", 1.0),
        ("shared 1 CPU per echo <= 1.0 x c-floor plain", ratio("keel shared 1", "c-floor 1 thread, plain", "cpu_us_per_echo"), "<=", 1.0),
    ]
    rss = med("keel shared 1", "peak_rss_bytes")
    lines = []
    lines.append(f"Runs per command: {a.rounds} fresh processes, interleaved round by round. Workload: `{WORKLOAD}`.\n")
    lines.append("| configuration | command | round trips/s median [min .. max] | p99 RTT us | CPU us per echo | peak RSS MiB |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, cmd in cmds.items():
        rs = results[name]
        lines.append(f"| {name} | `{cmd}` | {fmt(stat(rs, 'throughput'), 0)} | {fmt(stat(rs, 'p99_us'), 0)} | "
                     f"{fmt(stat(rs, 'cpu_us_per_echo'), 2)} | {fmt(stat(rs, 'peak_rss_bytes'), 2, 1048576.0)} |")
    lines.append("")
    lines.append("| target | measured ratio of medians | holds |")
    lines.append("| --- | ---: | :---: |")
    ok = True
    for label, value, op, bound in targets:
        holds = value is not None and (value >= bound if op == ">=" else value <= bound)
        ok &= holds
        lines.append(f"| {label} | {'–' if value is None else f'{value:.3f}'} | {'yes' if holds else 'NO'} |")
    rss_ok = rss is not None and rss <= 8 * 1048576
    ok &= rss_ok
    lines.append(f"| peak RSS at 16 clients (shared 1) <= 8 MiB | {'–' if rss is None else f'{rss / 1048576:.2f} MiB'} | {'yes' if rss_ok else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out_md:
        with open(a.out_md, "w") as f:
            f.write(text)
    if a.out_jsonl:
        with open(a.out_jsonl, "w") as f:
            for r in raw:
                f.write(json.dumps(r) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
