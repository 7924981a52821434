"""Medians per build and cell of matrix.sh's records, as a markdown table.

    python3 summary.py results.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cells = defaultdict(list)
for r in rows:
    cells[(r["role"], r["clients"], r["rate_hz"], r["payload_bytes"], r["build"])].append(r)
print("| process | clients x rate, payload | build | runs | instructions / message | I1 misses | D1 misses | misses past 512 KiB |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
for (role, n, rate, size, build), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][2], kv[0][4])):
    med = lambda k: statistics.median(r[k] for r in rs)
    ll = f"{med('lld_misses'):.1f}" if n >= 1000 else "–"
    ok = sum(r["ok"] for r in rs)
    print(f"| {role} | {n} x {rate} Hz, {size} B | {build} | {ok}/{len(rs)} | {med('ir'):,.0f} | {med('i1_misses'):.0f} | {med('d1_misses'):.0f} | {ll} |")
