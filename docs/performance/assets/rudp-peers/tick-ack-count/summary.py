"""Medians of results.jsonl (keel and ikcp, before and after the tick ack
count, 3 rounds x 3 seeds): per case, loss, binary and library; for keel
also the paired ratio to ikcp's run of the same round and seed.
python3 summary.py  (in this directory)"""
import collections
import json
import statistics as st

runs = collections.defaultdict(list)
pairs = collections.defaultdict(dict)
for line in open("results.jsonl"):
    r = json.loads(line)
    if r["library"] not in ("keel", "ikcp"):
        continue
    v = r["ab_binary"]
    runs[(r["case"], r["loss"], v, r["library"])].append(r)
    pairs[(r["case"], r["loss"], v, r["ab_round"], r["seed"])][r["library"]] = r
for k in sorted(runs):
    rs = runs[k]

    def med(key):
        return st.median(r[key] for r in rs)

    up = st.median(r["relay_up_datagrams"] / r["server_messages_echoed"] for r in rs)
    line = (
        f"{k} runs={len(rs)} ok={sum(r['ok'] and r['server_ok'] for r in rs)} "
        f"client_us={med('cpu_us_per_message'):.1f} server_us={med('server_cpu_us_per_message'):.1f} "
        f"p99_ms={med('rtt_p99_us') / 1000:.1f} wire={med('wire_bytes_per_payload_byte'):.3f} "
        f"client_datagrams_per_msg={up:.3f}"
    )
    if k[3] == "keel":
        ps = [x for kk, x in pairs.items() if kk[:3] == k[:3] and len(x) == 2]
        c = [x["keel"]["cpu_us_per_message"] / x["ikcp"]["cpu_us_per_message"] for x in ps]
        s = [x["keel"]["server_cpu_us_per_message"] / x["ikcp"]["server_cpu_us_per_message"] for x in ps]
        line += (
            f" | client/ikcp {st.median(c):.3f} [{min(c):.2f}-{max(c):.2f}]"
            f" server/ikcp {st.median(s):.3f} [{min(s):.2f}-{max(s):.2f}]"
        )
    print(line)
