import json, statistics as st, sys
from collections import defaultdict
# usage: table.py results.jsonl...  (the medians table of the levels section)
rows = defaultdict(list)
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l)
        if not r.get("ok"):
            print("not ok", f, r.get("lib"), r.get("loss"), r.get("error"))
            continue
        name = r["lib"] + (f" L{r['keel_redundancy']}" if "keel_redundancy" in r else "")
        rows[(r["loss"], name)].append(r)
print("| loss | library | seeds | p99 ms (min-max) | wire (min-max) | server CPU µs/msg | client CPU µs/msg | lost |")
print("| --- | --- | ---: | --- | --- | ---: | ---: | ---: |")
for (loss, name) in sorted(rows):
    rs = rows[(loss, name)]
    p = [r["rtt_p99_us"] / 1000 for r in rs]
    w = [r["wire_bytes_per_payload_byte"] for r in rs]
    sc = st.median(r["server_cpu_us_per_message"] for r in rs)
    cc = st.median(r["cpu_us_per_message"] for r in rs)
    print(f"| {loss*100:g} % | {name} | {len(rs)} | {st.median(p):.1f} ({min(p):.1f}-{max(p):.1f}) | {st.median(w):.3f} ({min(w):.3f}-{max(w):.3f}) | {sc:.1f} | {cc:.1f} | {sum(r['lost'] for r in rs)} |")
