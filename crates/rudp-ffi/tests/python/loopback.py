"""A server and a client of the keel-rudp C API through the Python binding
(bindings/python/keel_rudp.py, ctypes) in one process, over loopback,
insecure mode: the client connects and sends a reliable message, the server
echoes it, the client receives it, the server closes the connection with a
code and reason, and the client sees both. After the echo, the stats of
the client, of the server's connection and of the server: an RTT sample
was taken, bytes went both ways, one message was delivered each way, one
connection was made (and removed after its close). Also: errors raise KeelError
with the code and keel_error_message's text, and an event's bytes stay
intact after later polls (they are copied out). Prints each step; exits 1
with what failed, and gives up after 5 s.

Run by scripts/test.sh: python3 crates/rudp-ffi/tests/python/loopback.py
target/debug/libkeel_rudp_ffi.so (or with KEEL_RUDP_LIB set).

Insecure mode; tests/python/features.py covers token mode, broadcast, stop
and connection states.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
import keel_rudp as k  # noqa: E402

CLOSE_CODE = 4242
CLOSE_REASON = "server shutting down"
MESSAGE = b"hello from Python\x00with a NUL byte"
DEADLINE_S = 5.0
INITIAL_RTT_US = 333_000  # Config::initial_rtt's default: the estimate before a sample


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
        check(bool(e.message), f"{fn.__name__}: empty message")
        return e
    raise Failed(f"{fn.__name__}{args[1:]}: no KeelError (wanted {code})")


def check_stats_after_echo(client, server, conn):
    """The client just received the echo: both ends measured an RTT, sent
    bytes, and delivered the one message."""
    cs = client.stats()
    check(isinstance(cs, k.ConnectionStats), f"client stats: {type(cs)}")
    check(cs.rtt_us > 0, f"client stats: rtt_us {cs.rtt_us}")
    check(cs.rtt_latest_us != INITIAL_RTT_US, "client stats: no RTT sample (latest is the initial 333 ms)")
    check(cs.bytes_sent > len(MESSAGE), f"client stats: bytes_sent {cs.bytes_sent}")
    check(cs.bytes_received > len(MESSAGE), f"client stats: bytes_received {cs.bytes_received}")
    check(cs.messages_delivered == 1, f"client stats: messages_delivered {cs.messages_delivered}")
    check(cs.packets_sent > 0 and cs.packets_received > 0,
          f"client stats: packets {cs.packets_sent} sent, {cs.packets_received} received")
    check(0.0 <= cs.loss_rate <= 1.0, f"client stats: loss_rate {cs.loss_rate}")
    check(cs.malformed_packets == 0 and cs.auth_failures == 0,
          f"client stats: drops {cs.as_dict()}")
    ss = server.connection_stats(conn)
    check(ss.rtt_us > 0, f"server connection stats: rtt_us {ss.rtt_us}")
    check(ss.bytes_sent > len(MESSAGE), f"server connection stats: bytes_sent {ss.bytes_sent}")
    check(ss.messages_delivered == 1, f"server connection stats: messages_delivered {ss.messages_delivered}")
    check(ss.datagrams_unsent == 0, f"server connection stats: datagrams_unsent {ss.datagrams_unsent}")
    check(ss.kernel_drops == 0, f"server connection stats: kernel_drops {ss.kernel_drops}")
    print(f"client stats: rtt {cs.rtt_us} us (latest {cs.rtt_latest_us}), {cs.bytes_sent} bytes sent,"
          f" {cs.bytes_received} received, {cs.messages_delivered} message delivered;"
          f" server's connection: rtt {ss.rtt_us} us, {ss.bytes_sent} bytes sent,"
          f" {ss.messages_delivered} delivered")


def main():
    lib = k.load(sys.argv[1] if len(sys.argv) > 1 else None)
    start = time.monotonic()
    channels = [k.CHANNEL_RELIABLE_ORDERED, k.CHANNEL_UNRELIABLE]

    # Errors: codes plus keel_error_message's text.
    check(k.error_message(lib, k.OK) == "ok", f"message of KEEL_OK: {k.error_message(lib, k.OK)!r}")
    e = expect_error(k.ERR_ADDRESS, k.Client.connect_insecure, lib, channels, "not an address")
    check(e.message == k.error_message(lib, k.ERR_ADDRESS), f"message {e.message!r}")
    expect_error(k.ERR_INVALID_ARGUMENT, k.Server.create_insecure, lib, [99], "127.0.0.1:0")
    print(f"error codes: ok (e.g. {e})")

    server = k.Server.create_insecure(lib, channels, "127.0.0.1:0")
    client = None
    try:
        addr = server.local_addr()
        print(f"server bound to {addr}")
        client = k.Client.connect_insecure(lib, channels, addr)

        conn = 0
        state = {"server_connected": False, "client_connected": False, "echoed": False,
                 "got_echo": False}
        echo = None
        closing = client_closed = server_closed = False
        while not (client_closed and server_closed):
            check(time.monotonic() - start < DEADLINE_S, f"gave up after {DEADLINE_S:.0f} s ({state})")

            while True:
                ev = server.poll(0)
                if ev is None:
                    break
                if ev.kind == k.EVENT_CONNECTED:
                    check(ev.connection != 0, "connection handle 0")
                    conn = ev.connection
                    state["server_connected"] = True
                    print(f"server: connection {conn} connected")
                elif ev.kind == k.EVENT_MESSAGE:
                    check(ev.connection == conn, "message from an unknown connection")
                    print(f"server: {len(ev.data)} bytes on channel {ev.channel}, echoing")
                    server.send(ev.connection, ev.channel, ev.data)
                    state["echoed"] = True
                elif ev.kind == k.EVENT_DISCONNECTED:
                    check(ev.disconnect == k.DISCONNECT_LOCAL, f"server disconnect kind {ev.disconnect}")
                    check(ev.code == CLOSE_CODE, f"server close code {ev.code}")
                    print(f"server: connection {ev.connection} ended (local close, code {ev.code},"
                          f" {ev.reason!r})")
                    server_closed = True
                else:
                    raise Failed(f"unexpected server event {ev!r}")

            while not client_closed:
                ev = client.poll(1)
                if ev is None:
                    break
                if ev.kind == k.EVENT_CONNECTED:
                    state["client_connected"] = True
                    print(f"client: connected, sending {MESSAGE!r} on channel 0")
                    client.send(0, MESSAGE)
                    expect_error(k.ERR_UNKNOWN_CHANNEL, client.send, 7, b"x")
                elif ev.kind == k.EVENT_MESSAGE:
                    check(ev.channel == 0, f"echo on channel {ev.channel}")
                    check(ev.data == MESSAGE, f"echo differs: {ev.data!r}")
                    print(f"client: echo received ({len(ev.data)} bytes): {ev.data!r}")
                    echo = ev
                    state["got_echo"] = True
                    check_stats_after_echo(client, server, conn)
                elif ev.kind == k.EVENT_DISCONNECTED:
                    check(state["got_echo"], "disconnected before the echo")
                    check(ev.disconnect == k.DISCONNECT_REMOTE, f"client disconnect kind {ev.disconnect}")
                    check(ev.code == CLOSE_CODE, f"client close code {ev.code}")
                    check(ev.reason == CLOSE_REASON, f"client close reason {ev.reason!r}")
                    print(f"client: disconnected by the server, code {ev.code}, reason {ev.reason!r}")
                    client_closed = True
                else:
                    raise Failed(f"unexpected client event {ev!r}")

            if state["got_echo"] and not closing:
                server.close(conn, CLOSE_CODE, CLOSE_REASON)
                print(f"server: closing connection {conn} (code {CLOSE_CODE}, {CLOSE_REASON!r})")
                closing = True

        st = server.stats()
        check(st.connections_created == 1, f"server stats: connections_created {st.connections_created}")
        check(st.connections == 0 and server.connection_count() == 0,
              f"server stats: {st.connections} connections after the close")
        check(st.connections_removed == 1, f"server stats: connections_removed {st.connections_removed}")
        check(st.hellos >= 1 and st.handshakes_refused == 0,
              f"server stats: hellos {st.hellos}, refused {st.handshakes_refused}")
        print(f"server stats: {st.connections_created} connection made, {st.connections_removed}"
              f" removed, {st.hellos} hello(s), none refused")
        expect_error(k.ERR_UNKNOWN_CONNECTION, server.connection_stats, conn)

        # The echo was copied out: later polls did not change it.
        check(echo is not None and echo.data == MESSAGE, "the echo's bytes changed after later polls")
        try:
            server.send(conn, 0, b"x")
            raise Failed("send after close: no KeelError")
        except k.KeelError as e:
            check(e.code in (k.ERR_UNKNOWN_CONNECTION, k.ERR_CLOSED), f"send after close: {e}")
    finally:
        if client is not None:
            client.destroy()
        server.destroy()
    print(f"loopback.py: all passed in {(time.monotonic() - start) * 1000:.0f} ms")


if __name__ == "__main__":
    try:
        main()
    except (Failed, k.KeelError) as e:
        print(f"loopback.py: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
