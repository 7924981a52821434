"""Medians per clients and name of ab.sh records; with REF, the median of each round's client CPU over REF's in that round.

    python3 summary.py fec-tick100.jsonl ikcp
"""
import json,sys,statistics as st,collections
rows=[json.loads(l) for l in open(sys.argv[1])]
ref=sys.argv[2] if len(sys.argv)>2 else None
by=collections.defaultdict(list)
for r in rows: by[(r['clients'],r['name'])].append(r)
for (cl,n),rs in sorted(by.items()):
    cc=[r['client_cpu'] for r in rs]; sc=[r['server_cpu'] for r in rs if r['server_cpu']]
    line=f"{cl:4} {n:10} n={len(rs)} client {st.median(cc):7.2f} [{min(cc):.1f}-{max(cc):.1f}] server {st.median(sc) if sc else 0:7.2f} p99 {st.median([r['p99'] for r in rs])/1000:.1f} ok {sum(1 for r in rs if r['ok'])}"
    if ref:
        rr={r['round']:r for r in by[(cl,ref)]}
        ratios=[r['client_cpu']/rr[r['round']]['client_cpu'] for r in rs if r['round'] in rr]
        if ratios: line+=f" client/{ref} {st.median(ratios):.3f}"
    print(line)
