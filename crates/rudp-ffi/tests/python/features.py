"""The server calls beyond a single echo, and token mode, through the Python
binding (bindings/python/keel_rudp.py, ctypes) in one process over
loopback:

* the binding against include/keel_rudp.h: every KEEL_* constant has the
  header's value, every struct the header's fields in its order with the
  same C types, every function is declared with as many arguments;

* broadcast, stop, connection state and count (insecure mode): two clients
  connect; the server holds 2 connections, both CONNECTED; a broadcast
  reaches both and returns 2; after stop with a reason, both connections
  are CLOSING, a broadcast reaches none, both clients see REMOTE,
  KEEL_CLOSE_STOPPED and the reason, the server sees both DISCONNECTED
  (LOCAL, the same code) and then STOPPED last, after which it holds none,
  the handles name nothing and polls return nothing;
* token mode: a token server (keel_server_create_token with a random
  32-byte key) on 127.0.0.1:0; tokens for its address are minted with the
  Rust example mint_token (KEEL_TOKEN_KEY = the key in hex); a client
  connecting with the token's text, and one with its bytes (the text is
  base64url of them, without padding: docs/security.md), each get their
  message echoed; a token sealed with another key is refused (REMOTE,
  KEEL_REFUSE_TOKEN), the server sees no event and counts it in
  tokens_refused.

Prints each step; exits 1 with what failed, and gives up after 5 s.

Run by scripts/test.sh, after cargo build -p keel-rudp-ffi and
cargo build -p keel-rudp --example mint_token:
  python3 crates/rudp-ffi/tests/python/features.py target/debug/libkeel_rudp_ffi.so \\
      target/debug/examples/mint_token
"""

import base64
import ctypes
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
import keel_rudp as k  # noqa: E402

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                      "keel_rudp.h")
DEADLINE_S = 5.0
STOP_REASON = "server going down for maintenance"
CHANNELS = [k.CHANNEL_RELIABLE_ORDERED, k.CHANNEL_UNRELIABLE]


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def expect_error(code, fn, *args):
    try:
        fn(*args)
    except k.KeelError as e:
        check(e.code == code, f"{fn.__name__}: code {e.code}, wanted {code}")
        return e
    raise Failed(f"{fn.__name__}{args}: no KeelError (wanted {code})")


class Clock:
    def __init__(self):
        self.start = time.monotonic()

    def check(self, what):
        check(time.monotonic() - self.start < DEADLINE_S, f"gave up after {DEADLINE_S:.0f} s: {what}")


def pump(clock, server, clients, until, what):
    """Polls the server and every client (1 ms waits) until ``until()`` is
    true; returns the events as (who, Event) pairs, who being "server" or
    the client's index, in the order they came."""
    seen = []
    while not until(seen):
        clock.check(f"{what} (events so far: {seen})")
        while True:
            ev = server.poll(0)
            if ev is None:
                break
            seen.append(("server", ev))
        for i, c in enumerate(clients):
            if c is None:
                continue
            while True:
                ev = c.poll(1)
                if ev is None:
                    break
                seen.append((i, ev))
    return seen


def of(seen, who, kind):
    return [ev for w, ev in seen if w == who and ev.kind == kind]


def broadcast_stop_state(lib, clock):
    server = k.Server.create_insecure(lib, CHANNELS, "127.0.0.1:0")
    clients = []
    try:
        addr = server.local_addr()
        clients = [k.Client.connect_insecure(lib, CHANNELS, addr) for _ in range(2)]
        seen = pump(clock, server, clients,
                    lambda s: len(of(s, "server", k.EVENT_CONNECTED)) == 2
                    and all(of(s, i, k.EVENT_CONNECTED) for i in range(2)),
                    "two clients connecting")
        conns = [ev.connection for ev in of(seen, "server", k.EVENT_CONNECTED)]
        check(len(set(conns)) == 2 and 0 not in conns, f"connection handles {conns}")
        check(server.connection_count() == 2, f"connection_count {server.connection_count()}")
        for c in conns:
            st = server.connection_state(c)
            check(st == k.STATE_CONNECTED, f"connection {c} state {st}, wanted CONNECTED")
        print(f"server: 2 connections {conns}, both CONNECTED")

        msg = b"to everyone"
        n = server.broadcast(0, msg)
        check(n == 2, f"broadcast returned {n}, wanted 2")
        seen = pump(clock, server, clients,
                    lambda s: all(of(s, i, k.EVENT_MESSAGE) for i in range(2)),
                    "the broadcast arriving")
        for i in range(2):
            got = of(seen, i, k.EVENT_MESSAGE)
            check(len(got) == 1 and got[0].data == msg and got[0].channel == 0,
                  f"client {i} got {got}")
        expect_error(k.ERR_UNKNOWN_CHANNEL, server.broadcast, 9, b"x")
        print(f"server: broadcast {msg!r} queued for {n}; both clients received it")

        server.stop(k.CLOSE_STOPPED, STOP_REASON)
        for c in conns:
            st = server.connection_state(c)
            check(st == k.STATE_CLOSING, f"connection {c} state {st} after stop, wanted CLOSING")
        n = server.broadcast(0, b"too late")
        check(n == 0, f"broadcast after stop returned {n}, wanted 0")
        server.stop(k.CLOSE_STOPPED, "a second stop changes nothing")
        print("server: stopped; both connections CLOSING, a broadcast now reaches 0")

        seen = pump(clock, server, clients,
                    lambda s: of(s, "server", k.EVENT_STOPPED)
                    and all(of(s, i, k.EVENT_DISCONNECTED) for i in range(2)),
                    "the stop reaching both clients and STOPPED")
        for i in range(2):
            d = of(seen, i, k.EVENT_DISCONNECTED)
            check(len(d) == 1, f"client {i}: {len(d)} DISCONNECTED events")
            d = d[0]
            check(d.disconnect == k.DISCONNECT_REMOTE, f"client {i} disconnect kind {d.disconnect}")
            check(d.code == k.CLOSE_STOPPED, f"client {i} close code {d.code}, wanted CLOSE_STOPPED")
            check(d.reason == STOP_REASON, f"client {i} reason {d.reason!r}")
            check(not [ev for w, ev in seen if w == i and ev.kind == k.EVENT_MESSAGE],
                  f"client {i} received the broadcast sent after stop")
        print(f"clients: both disconnected by the server (REMOTE, CLOSE_STOPPED, {STOP_REASON!r})")
        server_events = [ev for w, ev in seen if w == "server"]
        kinds = [ev.kind for ev in server_events]
        check(kinds == [k.EVENT_DISCONNECTED, k.EVENT_DISCONNECTED, k.EVENT_STOPPED],
              f"server events after stop: {server_events}, wanted 2 DISCONNECTED then STOPPED")
        for ev in server_events[:2]:
            check(ev.disconnect == k.DISCONNECT_LOCAL and ev.code == k.CLOSE_STOPPED,
                  f"server disconnect {ev}")
        check(sorted(ev.connection for ev in server_events[:2]) == sorted(conns),
              f"server disconnects {server_events[:2]} for connections {conns}")
        check(server_events[2].connection == 0, f"STOPPED names connection {server_events[2].connection}")
        print("server: both connections DISCONNECTED (LOCAL, CLOSE_STOPPED), then STOPPED last")

        check(server.connection_count() == 0, f"connection_count {server.connection_count()} after STOPPED")
        for c in conns:
            expect_error(k.ERR_UNKNOWN_CONNECTION, server.connection_state, c)
        for _ in range(3):
            ev = server.poll(1)
            check(ev is None, f"poll after STOPPED returned {ev}")
        print("server: holds no connection after STOPPED; handles name nothing; polls return nothing")
    finally:
        for c in clients:
            c.destroy()
        server.destroy()


_C_SCALARS = {"uint64_t": ctypes.c_uint64, "uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32,
              "uint8_t": ctypes.c_uint8, "double": ctypes.c_double, "size_t": ctypes.c_size_t}


def binding_matches_header():
    """Every constant, struct and function of keel_rudp.h, as the binding
    declares it."""
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    defines = re.findall(r"^#define KEEL_(\w+) (-?\d+)$", text, re.M)
    check(len(defines) > 40, f"{len(defines)} constants parsed from {HEADER}")
    for name, value in defines:
        got = getattr(k, name, None)
        check(got == int(value), f"keel_rudp.{name} is {got}, the header's KEEL_{name} is {value}")
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    structs = re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", code, re.S)
    check(len(structs) == 4, f"structs in the header: {[n for n, _ in structs]}")
    for name, body in structs:
        fields = [re.match(r"(.*?)(\w+)$", f.strip()).groups() for f in body.split(";") if f.strip()]
        ours = getattr(k, name)._fields_
        check([n for _t, n in fields] == [n for n, _t in ours],
              f"{name} fields: header {[n for _t, n in fields]}, binding {[n for n, _t in ours]}")
        for (ctype, fname), (_n, py) in zip(fields, ours):
            ctype = ctype.replace("const", "").strip()
            if ctype.endswith("*"):
                check(ctypes.sizeof(py) == ctypes.sizeof(ctypes.c_void_p)
                      and (issubclass(py, ctypes._Pointer) or py is ctypes.c_char_p),
                      f"{name}.{fname}: {ctype} is {py}")
            else:
                check(py is _C_SCALARS[ctype], f"{name}.{fname}: {ctype} is {py}")
    functions = re.findall(r"^[\w ]+?\**\s*\b(keel_\w+)\(([^)]*)\);", code, re.M)
    check(len(functions) > 20, f"{len(functions)} functions parsed from {HEADER}")
    for fname, args in functions:
        check(fname in k._SIGNATURES, f"{fname} is not bound")
        n = len([a for a in args.split(",") if a.strip()])
        got = len(k._SIGNATURES[fname][1])
        check(n == got, f"{fname}: {got} argument types, the header has {n}")
    extra = set(k._SIGNATURES) - {f for f, _ in functions}
    check(not extra, f"bound but not in the header: {extra}")
    print(f"binding vs keel_rudp.h: {len(defines)} constants, {len(structs)} structs"
          f" ({', '.join(f'{n} {ctypes.sizeof(getattr(k, n))} bytes' for n, _ in structs)}),"
          f" {len(functions)} functions: all match")


def mint(mint_token, key, addr, client_id):
    """A token text for ``addr`` sealed with ``key``, from the mint_token example."""
    env = dict(os.environ, KEEL_TOKEN_KEY=key.hex())
    r = subprocess.run([mint_token, addr, str(client_id), "30"], env=env, capture_output=True,
                       text=True, timeout=DEADLINE_S)
    check(r.returncode == 0, f"mint_token exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout.strip()


def token_bytes(text):
    """The token's binary form: its text is base64url without padding."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def echo(clock, server, client, msg, what):
    """Polls until ``client`` connected, sent ``msg``, and got it echoed."""
    state = {"sent": False}

    def until(seen):
        for w, ev in seen:
            if w == "server" and ev.kind == k.EVENT_MESSAGE and ev.data == msg:
                if not state.get("echoed"):
                    server.send(ev.connection, ev.channel, ev.data)
                    state["echoed"] = True
            if w == 0 and ev.kind == k.EVENT_CONNECTED and not state["sent"]:
                client.send(0, msg)
                state["sent"] = True
            if w == 0 and ev.kind == k.EVENT_DISCONNECTED:
                raise Failed(f"{what}: client disconnected: {ev}")
        return any(w == 0 and ev.kind == k.EVENT_MESSAGE for w, ev in seen)

    seen = pump(clock, server, [client], until, what)
    got = of(seen, 0, k.EVENT_MESSAGE)
    check(len(got) == 1 and got[0].data == msg, f"{what}: echo {got}")


def token_mode(lib, clock, mint_token):
    key = os.urandom(32)
    other = bytes(b ^ 0xFF for b in key)
    server = k.Server.create_token(lib, CHANNELS, "127.0.0.1:0", key)
    clients = []
    try:
        addr = server.local_addr()
        print(f"token server bound to {addr}")

        text = mint(mint_token, key, addr, 1001)
        clients.append(k.Client.connect_token(lib, CHANNELS, addr, text))
        echo(clock, server, clients[-1], b"sealed, from a token's text", "token text")
        print(f"client (token text, {len(text)} characters): connected, message echoed")

        raw = token_bytes(mint(mint_token, key, addr, 1002))
        check(raw[:4] == b"KRT\x01", f"token bytes start {raw[:4]!r}, wanted KRT 1")
        clients.append(k.Client.connect_token_bytes(lib, CHANNELS, addr, raw))
        echo(clock, server, clients[-1], b"sealed, from a token's bytes", "token bytes")
        print(f"client (token bytes, {len(raw)} bytes): connected, message echoed")

        refused_before = server.stats().tokens_refused
        check(refused_before == 0, f"tokens_refused {refused_before} before the forged token")
        forged = k.Client.connect_token(lib, CHANNELS, addr, mint(mint_token, other, addr, 1003))
        clients.append(forged)
        seen = pump(clock, server, [forged], lambda s: of(s, 0, k.EVENT_DISCONNECTED),
                    "the token of another key being refused")
        d = of(seen, 0, k.EVENT_DISCONNECTED)[0]
        check(not of(seen, 0, k.EVENT_CONNECTED), "client with another key's token connected")
        check(d.disconnect == k.DISCONNECT_REMOTE, f"refused: disconnect kind {d.disconnect}")
        check(d.code == k.REFUSE_TOKEN, f"refused: code {d.code}, wanted REFUSE_TOKEN ({k.REFUSE_TOKEN})")
        server_events = [ev for w, ev in seen if w == "server"]
        check(not server_events, f"the server saw {server_events} for a refused token")
        st = server.stats()
        check(st.tokens_refused == 1, f"tokens_refused {st.tokens_refused}, wanted 1")
        check(st.connections == 2, f"server holds {st.connections} connections, wanted 2")
        print(f"client (another key's token): refused, REMOTE, REFUSE_TOKEN, {d.reason!r};"
              f" the server saw no event and counted it (tokens_refused {st.tokens_refused})")

        expect_error(k.ERR_TOKEN, k.Client.connect_token, lib, CHANNELS, addr, "not a token")
        expect_error(k.ERR_TOKEN, k.Client.connect_token_bytes, lib, CHANNELS, addr, raw[:20])
        print("bad token text and bytes: ERR_TOKEN")
    finally:
        for c in clients:
            c.destroy()
        server.destroy()


def main():
    lib = k.load(sys.argv[1] if len(sys.argv) > 1 else None)
    mint_token = sys.argv[2] if len(sys.argv) > 2 else os.environ.get(
        "KEEL_MINT_TOKEN", "target/debug/examples/mint_token")
    clock = Clock()
    binding_matches_header()
    broadcast_stop_state(lib, clock)
    token_mode(lib, clock, mint_token)
    print(f"features.py: all passed in {(time.monotonic() - clock.start) * 1000:.0f} ms")


if __name__ == "__main__":
    try:
        main()
    except (Failed, k.KeelError, OSError, subprocess.SubprocessError) as e:
        print(f"features.py: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
