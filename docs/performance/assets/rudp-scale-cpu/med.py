# Medians and ranges of server_cpu_us_per_message by label in an ab.sh file, and
# each label against BASE (default "udp"): the ratio of medians and the
# median of the per-round ratios.  python3 med.py FILE [BASE]
import json,sys,statistics as st
rows=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base=sys.argv[2] if len(sys.argv)>2 else 'udp'
labels=[]
for r in rows:
    if r['label'] not in labels: labels.append(r['label'])
bm=st.median([r['server_cpu_us_per_message'] for r in rows if r['label']==base])
for l in labels:
    xs=[r['server_cpu_us_per_message'] for r in rows if r['label']==l]
    ok=sum(r['ok'] for r in rows if r['label']==l)
    # per-rep ratio to base in same rep
    rat=[]
    for r in rows:
        if r['label']!=l: continue
        b=[x['server_cpu_us_per_message'] for x in rows if x['label']==base and x['rep']==r['rep']]
        if b: rat.append(r['server_cpu_us_per_message']/b[0])
    print(f"{l:12s} n={len(xs)} ok={ok} median {st.median(xs):.2f} range {min(xs):.2f}-{max(xs):.2f}  vs {base} {st.median(xs)/bm:.2f} (per-rep median {st.median(rat):.2f}, {min(rat):.2f}-{max(rat):.2f})")
