#!/usr/bin/env python3
"""A flood of one-off sources against `keel-bench serve`, then a new peer.

    scripts/serve-flood.py [--bench target/release/keel-bench] [--sources N]
                           [--kind garbage|valid] [--pings N] [--serve-arg A ...]

Starts `keel-bench serve --bind 127.0.0.1:0` (plus any --serve-arg), sends
one datagram from each of N distinct sources (default 70,000: every one its
own address in 127.0.0.0/8, 127.a.b.c with a >= 1, one socket at a time:
bind, send, close), either 7 bytes of garbage or a valid 16-byte keel-bench
message, and then a new peer (127.0.0.1) sends --pings messages (default
58), one at a time, waiting up to 100 ms for each echo. Prints one JSON
line: the flood, the new peer's echoes, and serve's own summary (after
SIGTERM). Loopback only; the flood is bounded in count (N) and time (60 s),
and kept at most 4,096 datagrams ahead of what the server has received, so
the kernel queue does not overflow and what is measured is serve's table.

Exit 0 when it ran (whatever the echoes), 1 when serve could not be run.
"""

import argparse
import json
import signal
import socket
import struct
import subprocess
import sys
import time


def message(client, seq):
    """A valid keel-bench message of 16 bytes (the header alone)."""
    return b"KEL" + bytes([1]) + struct.pack(">IQ", client, seq)


def source(k):
    """The k-th flood source address: 127.a.b.c, a >= 1 (127.0.0.1 is the peer's)."""
    k += 1 << 16
    return "127.%d.%d.%d" % ((k >> 16) & 255, (k >> 8) & 255, k & 255)


def proc_udp_queue(port):
    """Bytes queued on the UDP socket bound to port (rx_queue of /proc/net/udp)."""
    with open("/proc/net/udp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == port:
                return int(cols[4].split(":")[1], 16)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="target/release/keel-bench")
    ap.add_argument("--sources", type=int, default=70_000)
    ap.add_argument("--kind", choices=["garbage", "valid"], default="garbage")
    ap.add_argument("--pings", type=int, default=58)
    ap.add_argument("--serve-arg", action="append", default=[])
    a = ap.parse_args()
    if not 1 <= a.sources <= 1 << 22:
        sys.exit("--sources: expected 1..=4194304")
    try:
        serve = subprocess.Popen(
            [a.bench, "serve", "--bind", "127.0.0.1:0", "--seconds", "300"] + a.serve_arg,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        print(f"serve-flood: cannot run {a.bench}: {e}", file=sys.stderr)
        return 1
    line = serve.stderr.readline()
    try:
        port = int(line.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        print(f"serve-flood: no listening line from serve: {line!r}", file=sys.stderr)
        serve.kill()
        return 1
    to = ("127.0.0.1", port)
    payload = b"garbage" if a.kind == "garbage" else None
    started = time.monotonic()
    sent = 0
    for k in range(a.sources):
        if time.monotonic() - started > 60:
            break
        # Pacing: at most ~4,096 small datagrams queued on the server socket
        # (each is charged about 768 bytes of buffer).
        if k % 256 == 0:
            while proc_udp_queue(port) > 4096 * 768 and time.monotonic() - started < 60:
                time.sleep(0.001)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((source(k), 0))
        s.sendto(payload or message(1_000_000 + k, 0), to)
        s.close()
        sent += 1
    flood_seconds = time.monotonic() - started
    # Let the server take what is queued before the new peer speaks.
    deadline = time.monotonic() + 5
    while proc_udp_queue(port) > 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(0.1)
    echoes = 0
    for seq in range(a.pings):
        m = message(7, seq)
        peer.sendto(m, to)
        try:
            while True:
                data = peer.recv(2048)
                if data == m:
                    echoes += 1
                    break
        except socket.timeout:
            pass
    serve.send_signal(signal.SIGTERM)
    try:
        out, _ = serve.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        serve.kill()
        out, _ = serve.communicate()
    summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    print(json.dumps({
        "kind": a.kind, "sources": sent, "flood_bytes": sent * (7 if payload else 16),
        "flood_seconds": round(flood_seconds, 2), "serve_args": a.serve_arg,
        "new_peer_pings": a.pings, "new_peer_echoes": echoes, "serve": summary,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
