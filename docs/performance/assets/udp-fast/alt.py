#!/usr/bin/env python3
"""alt.py ROUNDS OUT.jsonl name=cmd ... : alternate fresh processes (each under
flock /tmp/keel-measure.lock), one per command per round; print medians
[min..max] of throughput and CPU us per echo, and per-round ratios to the
LAST command."""
import json, shlex, statistics, subprocess, sys
rounds = int(sys.argv[1]); out = open(sys.argv[2], "w"); cmds = [a.split("=", 1) for a in sys.argv[3:]]
res = {n: [] for n, _ in cmds}
for r in range(rounds):
    row = {}
    for n, c in cmds:
        p = subprocess.run(["flock", "/tmp/keel-measure.lock"] + shlex.split(c), capture_output=True, text=True, timeout=60)
        line = next((l for l in p.stdout.splitlines() if l.startswith("{")), None)
        if not line: print("no json", n, p.stderr[-200:]); continue
        d = json.loads(line)
        out.write(json.dumps({"round": r + 1, "name": n, "command": c, "result": d}) + "\n"); out.flush()
        if d.get("ok") is False: print("not ok", n, d.get("error")); continue
        if "roundtrips_per_second" in d:
            thr, cpu = d["roundtrips_per_second"], d["cpu_seconds"]
        else:
            thr, cpu = d["msgs_per_sec"], d["cpu"]["user_s"] + d["cpu"]["sys_s"]
        row[n] = (thr, cpu / d["messages"] * 1e6)
    for n in row: res[n].append((r, row[n]))
    print(f"round {r+1}: " + "  ".join(f"{n}={row[n][0]:.0f}" for n in row), flush=True)
ref = cmds[-1][0]
refby = {r: v for r, v in res[ref]}
def med(xs): return statistics.median(xs) if xs else float("nan")
mref = med([v[0] for _, v in res[ref]])
for n, _ in cmds:
    thr = [v[0] for _, v in res[n]]; cpu = [v[1] for _, v in res[n]]
    rr = [v[0] / refby[r][0] for r, v in res[n] if r in refby]
    print(f"{n}: runs {len(thr)}, rt/s median {med(thr):.0f} [{min(thr):.0f}..{max(thr):.0f}], ratio of medians {med(thr)/mref:.3f}, "
          f"per-round ratio median {med(rr):.3f} [{min(rr):.3f}..{max(rr):.3f}], CPU us/echo {med(cpu):.2f} [{min(cpu):.2f}..{max(cpu):.2f}]")
