"""keel-rudp from Python through ctypes: one file a game team drops in.

A binding of the C API in ``crates/rudp-ffi/include/keel_rudp.h`` (every
function, struct and constant of it), for bots and load-test tools. Load the shared library, then create
a :class:`Server` or a :class:`Client` and call ``poll()`` in a loop::

    import keel_rudp
    lib = keel_rudp.load()            # KEEL_RUDP_LIB, or load("path/to/libkeel_rudp_ffi.so")
    client = keel_rudp.Client.connect_insecure(lib, [keel_rudp.CHANNEL_RELIABLE_ORDERED],
                                               "127.0.0.1:4000")
    while True:
        ev = client.poll(timeout_ms=10)
        if ev is None:
            continue
        if ev.kind == keel_rudp.EVENT_CONNECTED:
            client.send(0, b"hello")
        elif ev.kind == keel_rudp.EVENT_MESSAGE:
            print(ev.channel, ev.data)        # bytes, copied out of the library
        elif ev.kind == keel_rudp.EVENT_DISCONNECTED:
            print(ev.disconnect, ev.code, ev.reason)
            break
    client.destroy()

Every call that fails raises :class:`KeelError` with the ``KEEL_ERR_*``
code and ``keel_error_message``'s text. ``poll()`` copies an event's bytes
and reason into Python objects before returning, since the library's
pointers are valid only until the next poll or destroy on that handle. A
handle is used from one thread at a time (the header's rule); this module
adds no locking.
"""

import ctypes
import os

# Error codes (KEEL_OK, KEEL_ERR_*).
OK = 0
ERR_NULL = -1
ERR_INVALID_ARGUMENT = -2
ERR_ADDRESS = -3
ERR_CONFIG = -4
ERR_IO = -5
ERR_TOKEN = -6
ERR_UNKNOWN_CHANNEL = -7
ERR_MESSAGE_TOO_LARGE = -8
ERR_BACKPRESSURE = -9
ERR_BUDGET_SPENT = -10
ERR_CLOSED = -11
ERR_UNKNOWN_CONNECTION = -12

# Channel kinds (KEEL_CHANNEL_*).
CHANNEL_RELIABLE_ORDERED = 0
CHANNEL_RELIABLE_UNORDERED = 1
CHANNEL_UNRELIABLE_SEQUENCED = 2
CHANNEL_UNRELIABLE = 3

# keel_event.kind (KEEL_EVENT_*).
EVENT_NONE = 0
EVENT_CONNECTED = 1
EVENT_MESSAGE = 2
EVENT_DISCONNECTED = 3
EVENT_STOPPED = 4  # server only, once after Server.stop(): every connection ended

# Server.connection_state() (KEEL_STATE_*).
STATE_HANDSHAKING = 0
STATE_CONNECTED = 1
STATE_CLOSING = 2  # closed by this side; queued reliable messages are flushed
STATE_DRAINING = 3  # closed by the peer
STATE_CLOSED = 4  # ended; its DISCONNECTED event is waiting to be polled

# keel's own close codes (KEEL_REFUSE_*, KEEL_CLOSE_*): Event.code of a
# refused handshake or a close by keel itself.
REFUSE_CONFIG_MISMATCH = 1  # the two ends configure different channels
REFUSE_FULL = 2  # the server was full (max_connections)
REFUSE_SECURITY_MISMATCH = 3  # a token to an insecure server, or none to one requiring tokens
REFUSE_TOKEN = 4  # the connect token was refused (the reason says why)
CLOSE_STOPPED = 5  # the peer stopped (Server.stop()'s usual code)
REFUSE_ADDRESS_LIMIT = 6  # the client's address holds the most connections one address may
REFUSE_RATE_LIMIT = 7  # the client's address made too many handshakes
CLOSE_REPLACED = 8  # a new connection with the same connect token replaced it
CLOSE_ACK_TIMEOUT = 17  # the peer acknowledged nothing for the ack timeout

# keel_event.disconnect (KEEL_DISCONNECT_*).
DISCONNECT_LOCAL = 1
DISCONNECT_REMOTE = 2
DISCONNECT_IDLE_TIMEOUT = 3
DISCONNECT_HANDSHAKE_TIMEOUT = 4
DISCONNECT_ACK_TIMEOUT = 5
DISCONNECT_OTHER = 6  # a cause this version does not name (a newer library)


class keel_config(ctypes.Structure):
    """``struct keel_config``."""

    _fields_ = [
        ("channels", ctypes.POINTER(ctypes.c_uint32)),
        ("channel_count", ctypes.c_size_t),
    ]


class keel_event(ctypes.Structure):
    """``struct keel_event``."""

    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("connection", ctypes.c_uint64),
        ("channel", ctypes.c_uint32),
        ("data", ctypes.POINTER(ctypes.c_uint8)),
        ("len", ctypes.c_size_t),
        ("disconnect", ctypes.c_uint32),
        ("code", ctypes.c_uint64),
        ("reason", ctypes.POINTER(ctypes.c_char)),  # const char *, NUL-terminated
        ("reason_len", ctypes.c_size_t),
    ]


class keel_connection_stats(ctypes.Structure):
    """``struct keel_connection_stats`` (fields only ever added at the end)."""

    _fields_ = [
        ("rtt_us", ctypes.c_uint64),
        ("rtt_var_us", ctypes.c_uint64),
        ("rtt_min_us", ctypes.c_uint64),
        ("rtt_latest_us", ctypes.c_uint64),
        ("loss_rate", ctypes.c_double),
        ("packets_sent", ctypes.c_uint64),
        ("packets_received", ctypes.c_uint64),
        ("packets_lost", ctypes.c_uint64),
        ("retransmissions", ctypes.c_uint64),
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_received", ctypes.c_uint64),
        ("messages_delivered", ctypes.c_uint64),
        ("send_queued_bytes", ctypes.c_uint64),
        ("bytes_in_flight", ctypes.c_uint64),
        ("congestion_window", ctypes.c_uint64),
        ("malformed_packets", ctypes.c_uint64),
        ("duplicate_packets", ctypes.c_uint64),
        ("auth_failures", ctypes.c_uint64),
        ("replayed_packets", ctypes.c_uint64),
        ("refused_packets", ctypes.c_uint64),
        ("stale_messages", ctypes.c_uint64),
        ("partials_evicted", ctypes.c_uint64),
        ("datagrams_unsent", ctypes.c_uint64),
        # Added after 0.1.0 (the struct was 184 bytes).
        ("kernel_drops", ctypes.c_uint64),
    ]


class keel_server_stats(ctypes.Structure):
    """``struct keel_server_stats`` (fields only ever added at the end)."""

    _fields_ = [
        ("connections", ctypes.c_uint64),
        ("connections_created", ctypes.c_uint64),
        ("connections_removed", ctypes.c_uint64),
        ("hellos", ctypes.c_uint64),
        ("handshakes_refused", ctypes.c_uint64),
        ("tokens_refused", ctypes.c_uint64),
        ("refused_address_limit", ctypes.c_uint64),
        ("refused_rate_limit", ctypes.c_uint64),
        ("malformed", ctypes.c_uint64),
        ("unknown_connection", ctypes.c_uint64),
        ("datagrams_unsent", ctypes.c_uint64),
        ("budget_refused", ctypes.c_uint64),
        ("send_budget_refused", ctypes.c_uint64),
        ("broadcast_refused", ctypes.c_uint64),
        ("ack_timeouts", ctypes.c_uint64),
        ("undelivered_messages", ctypes.c_uint64),
        # Added after 0.1.0 (the struct was 128 bytes).
        ("kernel_drops", ctypes.c_uint64),
    ]


class keel_client(ctypes.Structure):
    """``keel_client`` (opaque)."""


class keel_server(ctypes.Structure):
    """``keel_server`` (opaque)."""


_client_p = ctypes.POINTER(keel_client)
_server_p = ctypes.POINTER(keel_server)
_u8_p = ctypes.POINTER(ctypes.c_uint8)
_i32 = ctypes.c_int32

# name: (restype, argtypes), exactly as in keel_rudp.h.
_SIGNATURES = {
    "keel_error_message": (ctypes.c_char_p, [_i32]),
    "keel_client_connect_insecure": (
        _i32,
        [ctypes.POINTER(keel_config), ctypes.c_char_p, ctypes.POINTER(_client_p)],
    ),
    "keel_client_connect_token": (
        _i32,
        [
            ctypes.POINTER(keel_config),
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.POINTER(_client_p),
        ],
    ),
    "keel_client_connect_token_bytes": (
        _i32,
        [
            ctypes.POINTER(keel_config),
            ctypes.c_char_p,
            _u8_p,
            ctypes.c_size_t,
            ctypes.POINTER(_client_p),
        ],
    ),
    "keel_client_destroy": (None, [_client_p]),
    "keel_client_send": (_i32, [_client_p, ctypes.c_uint8, _u8_p, ctypes.c_size_t]),
    "keel_client_close": (_i32, [_client_p, ctypes.c_uint64, ctypes.c_char_p]),
    "keel_client_get_stats": (
        _i32,
        [_client_p, ctypes.POINTER(keel_connection_stats), ctypes.c_size_t],
    ),
    "keel_client_poll": (_i32, [_client_p, ctypes.c_uint32, ctypes.POINTER(keel_event)]),
    "keel_server_create_insecure": (
        _i32,
        [ctypes.POINTER(keel_config), ctypes.c_char_p, ctypes.POINTER(_server_p)],
    ),
    "keel_server_create_token": (
        _i32,
        [
            ctypes.POINTER(keel_config),
            ctypes.c_char_p,
            _u8_p,
            ctypes.POINTER(_server_p),
        ],
    ),
    "keel_server_destroy": (None, [_server_p]),
    "keel_server_local_addr": (_i32, [_server_p, ctypes.c_char_p, ctypes.c_size_t]),
    "keel_server_send": (
        _i32,
        [_server_p, ctypes.c_uint64, ctypes.c_uint8, _u8_p, ctypes.c_size_t],
    ),
    "keel_server_close": (
        _i32,
        [_server_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p],
    ),
    "keel_server_get_stats": (
        _i32,
        [_server_p, ctypes.POINTER(keel_server_stats), ctypes.c_size_t],
    ),
    "keel_server_get_connection_stats": (
        _i32,
        [_server_p, ctypes.c_uint64, ctypes.POINTER(keel_connection_stats), ctypes.c_size_t],
    ),
    "keel_server_connection_count": (ctypes.c_size_t, [_server_p]),
    "keel_server_connection_state": (
        _i32,
        [_server_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint32)],
    ),
    "keel_server_broadcast": (
        _i32,
        [_server_p, ctypes.c_uint8, _u8_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)],
    ),
    "keel_server_stop": (_i32, [_server_p, ctypes.c_uint64, ctypes.c_char_p]),
    "keel_server_poll": (_i32, [_server_p, ctypes.c_uint32, ctypes.POINTER(keel_event)]),
}


def load(path=None):
    """Loads the keel-rudp-ffi shared library and declares its functions.

    ``path``: the library file (``libkeel_rudp_ffi.so``); when ``None``, the
    ``KEEL_RUDP_LIB`` environment variable, else ``libkeel_rudp_ffi.so`` by
    the system's search path. Returns the ``ctypes.CDLL``.
    """
    if path is None:
        path = os.environ.get("KEEL_RUDP_LIB", "libkeel_rudp_ffi.so")
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


class KeelError(Exception):
    """A ``KEEL_ERR_*`` code from the library, with its message."""

    def __init__(self, code, message, call=""):
        self.code = code
        self.message = message
        self.call = call
        super().__init__(f"{call}: {message} ({code})" if call else f"{message} ({code})")


def error_message(lib, code):
    """``keel_error_message(code)`` as a ``str``."""
    return lib.keel_error_message(code).decode("utf-8", "replace")


def _check(lib, rc, call):
    if rc < 0:
        raise KeelError(rc, error_message(lib, rc), call)
    return rc


class Event:
    """One event, copied out of the library (valid after the next poll).

    ``kind``: ``EVENT_*``; ``connection``: the server's connection handle
    (0 on a client, and in a STOPPED event); MESSAGE: ``channel`` and
    ``data`` (``bytes``); DISCONNECTED: ``disconnect`` (``DISCONNECT_*``),
    ``code`` (the peer's, or keel's own ``REFUSE_*`` / ``CLOSE_*``),
    ``reason`` (``str``). STOPPED (server only): no fields.
    """

    __slots__ = ("kind", "connection", "channel", "data", "disconnect", "code", "reason")

    def __init__(self, ev):
        self.kind = ev.kind
        self.connection = ev.connection
        self.channel = ev.channel
        self.data = ctypes.string_at(ev.data, ev.len) if ev.len else b""
        self.disconnect = ev.disconnect
        self.code = ev.code
        raw = ctypes.string_at(ev.reason, ev.reason_len) if ev.reason else b""
        self.reason = raw.decode("utf-8", "replace")

    def __repr__(self):
        names = {EVENT_CONNECTED: "CONNECTED", EVENT_MESSAGE: "MESSAGE",
                 EVENT_DISCONNECTED: "DISCONNECTED", EVENT_STOPPED: "STOPPED"}
        kind = names.get(self.kind, str(self.kind))
        if self.kind == EVENT_MESSAGE:
            return f"Event({kind}, connection={self.connection}, channel={self.channel}, data={self.data!r})"
        if self.kind == EVENT_DISCONNECTED:
            return (f"Event({kind}, connection={self.connection}, disconnect={self.disconnect}, "
                    f"code={self.code}, reason={self.reason!r})")
        return f"Event({kind}, connection={self.connection})"


class _Counters:
    """Counters copied out of a ctypes stats struct: one attribute per
    field, named as in the header."""

    __slots__ = ()
    _struct = None

    def __init__(self, raw):
        for name, _t in self._struct._fields_:
            setattr(self, name, getattr(raw, name))

    def as_dict(self):
        """The fields as a ``dict`` (header order)."""
        return {name: getattr(self, name) for name, _t in self._struct._fields_}

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({fields})"


class ConnectionStats(_Counters):
    """One connection's counters and estimates (``keel_connection_stats``):
    ``rtt_us`` (smoothed), ``rtt_var_us``, ``rtt_min_us``, ``rtt_latest_us``
    (the initial estimate, 333 ms by default, until a first sample),
    ``loss_rate`` (0 to 1), ``packets_sent``, ``packets_received``,
    ``packets_lost``, ``retransmissions``, ``bytes_sent``, ``bytes_received``,
    ``messages_delivered``, ``send_queued_bytes``, ``bytes_in_flight``,
    ``congestion_window``, and the drops ``malformed_packets``,
    ``duplicate_packets``, ``auth_failures``, ``replayed_packets``,
    ``refused_packets``, ``stale_messages``, ``partials_evicted``,
    ``datagrams_unsent`` and ``kernel_drops`` (client only: datagrams the
    kernel dropped for the socket's full receive buffer, Linux)."""

    __slots__ = tuple(name for name, _t in keel_connection_stats._fields_)
    _struct = keel_connection_stats


class ServerStats(_Counters):
    """A server's counters (``keel_server_stats``): ``connections`` (held
    now), ``connections_created``, ``connections_removed``, ``hellos``,
    ``handshakes_refused`` and of those ``tokens_refused``,
    ``refused_address_limit``, ``refused_rate_limit``; the drops
    ``malformed``, ``unknown_connection``, ``datagrams_unsent``,
    ``budget_refused``, ``send_budget_refused``, ``broadcast_refused``;
    ``ack_timeouts``, ``undelivered_messages``; ``kernel_drops`` (datagrams
    the kernel dropped for the socket's full receive buffer before the
    server read them, Linux; counted also after STOPPED)."""

    __slots__ = tuple(name for name, _t in keel_server_stats._fields_)
    _struct = keel_server_stats


def _config(channels):
    arr = (ctypes.c_uint32 * len(channels))(*channels)
    cfg = keel_config(ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint32)), len(channels))
    return cfg, arr  # keep arr alive for the call


def _buf(data):
    data = bytes(data)
    if not data:
        return None, 0
    return (ctypes.c_uint8 * len(data)).from_buffer_copy(data), len(data)


def _text(s):
    if s is None:
        return None
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


class Client:
    """A ``keel_client``: one connection to one server. Create it with
    :meth:`connect_insecure`, :meth:`connect_token` or
    :meth:`connect_token_bytes`; free it with :meth:`destroy` (or ``with``)."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._h = handle
        self._ev = keel_event()

    @classmethod
    def connect_insecure(cls, lib, channels, server_addr):
        """Insecure mode: no token, no encryption (LAN tools and tests)."""
        cfg, _keep = _config(channels)
        out = _client_p()
        _check(lib, lib.keel_client_connect_insecure(ctypes.byref(cfg), _text(server_addr),
                                                     ctypes.byref(out)),
               "keel_client_connect_insecure")
        return cls(lib, out)

    @classmethod
    def connect_token(cls, lib, channels, server_addr, token_text):
        """With a connect token's text form (base64url) from the backend."""
        cfg, _keep = _config(channels)
        out = _client_p()
        _check(lib, lib.keel_client_connect_token(ctypes.byref(cfg), _text(server_addr),
                                                  _text(token_text), ctypes.byref(out)),
               "keel_client_connect_token")
        return cls(lib, out)

    @classmethod
    def connect_token_bytes(cls, lib, channels, server_addr, token):
        """With a connect token's binary form (``bytes``)."""
        cfg, _keep = _config(channels)
        out = _client_p()
        ptr, n = _buf(token)
        _check(lib, lib.keel_client_connect_token_bytes(ctypes.byref(cfg), _text(server_addr),
                                                        ptr, n, ctypes.byref(out)),
               "keel_client_connect_token_bytes")
        return cls(lib, out)

    def _handle(self):
        if not self._h:
            raise KeelError(ERR_NULL, error_message(self._lib, ERR_NULL), "destroyed client")
        return self._h

    def send(self, channel, data):
        """Queues ``data`` (bytes) on ``channel``; it goes out on the next poll."""
        ptr, n = _buf(data)
        _check(self._lib, self._lib.keel_client_send(self._handle(), channel, ptr, n),
               "keel_client_send")

    def close(self, code, reason=""):
        """Starts closing with ``code`` and ``reason``; poll until DISCONNECTED."""
        _check(self._lib, self._lib.keel_client_close(self._handle(), code, _text(reason)),
               "keel_client_close")

    def stats(self):
        """The connection's counters and estimates, a :class:`ConnectionStats`."""
        raw = keel_connection_stats()
        _check(self._lib, self._lib.keel_client_get_stats(self._handle(), ctypes.byref(raw),
                                                          ctypes.sizeof(raw)),
               "keel_client_get_stats")
        return ConnectionStats(raw)

    def poll(self, timeout_ms=0):
        """The next :class:`Event`, or ``None`` if none came within ``timeout_ms``."""
        rc = _check(self._lib, self._lib.keel_client_poll(self._handle(), timeout_ms,
                                                          ctypes.byref(self._ev)),
                    "keel_client_poll")
        return Event(self._ev) if rc == 1 else None

    def destroy(self):
        """Frees the client (no close is sent); safe to call twice."""
        if self._h:
            self._lib.keel_client_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()


class Server:
    """A ``keel_server``: a socket and all its connections. Create it with
    :meth:`create_insecure` or :meth:`create_token`; free it with
    :meth:`destroy` (or ``with``)."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._h = handle
        self._ev = keel_event()

    @classmethod
    def create_insecure(cls, lib, channels, bind_addr):
        """Insecure mode: no tokens, no encryption (LAN tools and tests)."""
        cfg, _keep = _config(channels)
        out = _server_p()
        _check(lib, lib.keel_server_create_insecure(ctypes.byref(cfg), _text(bind_addr),
                                                    ctypes.byref(out)),
               "keel_server_create_insecure")
        return cls(lib, out)

    @classmethod
    def create_token(cls, lib, channels, bind_addr, token_key):
        """Requiring tokens sealed with ``token_key`` (32 bytes)."""
        key = bytes(token_key)
        if len(key) != 32:
            raise KeelError(ERR_INVALID_ARGUMENT, error_message(lib, ERR_INVALID_ARGUMENT),
                            "keel_server_create_token: token_key must be 32 bytes")
        cfg, _keep = _config(channels)
        out = _server_p()
        ptr, _n = _buf(key)
        _check(lib, lib.keel_server_create_token(ctypes.byref(cfg), _text(bind_addr), ptr,
                                                 ctypes.byref(out)),
               "keel_server_create_token")
        return cls(lib, out)

    def _handle(self):
        if not self._h:
            raise KeelError(ERR_NULL, error_message(self._lib, ERR_NULL), "destroyed server")
        return self._h

    def local_addr(self):
        """The bound address as text (``127.0.0.1:40123``)."""
        buf = ctypes.create_string_buffer(64)
        _check(self._lib, self._lib.keel_server_local_addr(self._handle(), buf, len(buf)),
               "keel_server_local_addr")
        return buf.value.decode("utf-8")

    def send(self, connection, channel, data):
        """Queues ``data`` on ``channel`` of ``connection`` (a handle from an event)."""
        ptr, n = _buf(data)
        _check(self._lib, self._lib.keel_server_send(self._handle(), connection, channel, ptr, n),
               "keel_server_send")

    def close(self, connection, code, reason=""):
        """Starts closing ``connection`` with ``code`` and ``reason``."""
        _check(self._lib, self._lib.keel_server_close(self._handle(), connection, code,
                                                      _text(reason)),
               "keel_server_close")

    def broadcast(self, channel, data):
        """Queues ``data`` on ``channel`` of every connected connection (not
        those handshaking or closing); returns how many got it. One whose
        send buffer or the send budget is full is skipped and counted in
        ``stats().broadcast_refused``."""
        ptr, n = _buf(data)
        queued = ctypes.c_size_t(0)
        _check(self._lib, self._lib.keel_server_broadcast(self._handle(), channel, ptr, n,
                                                          ctypes.byref(queued)),
               "keel_server_broadcast")
        return queued.value

    def stop(self, code=CLOSE_STOPPED, reason=""):
        """Closes every connection with ``code`` and ``reason`` (and those that
        finish a handshake from now on). Keep polling: each connection's
        DISCONNECTED (LOCAL) event comes, then one ``EVENT_STOPPED`` last
        (at most about 3 s later); then destroy. A second call changes nothing."""
        _check(self._lib, self._lib.keel_server_stop(self._handle(), code, _text(reason)),
               "keel_server_stop")

    def stats(self):
        """The server's counters, a :class:`ServerStats`."""
        raw = keel_server_stats()
        _check(self._lib, self._lib.keel_server_get_stats(self._handle(), ctypes.byref(raw),
                                                          ctypes.sizeof(raw)),
               "keel_server_get_stats")
        return ServerStats(raw)

    def connection_stats(self, connection):
        """``connection``'s counters and estimates, a :class:`ConnectionStats`
        (``KeelError`` ``ERR_UNKNOWN_CONNECTION`` once its DISCONNECTED
        event was returned)."""
        raw = keel_connection_stats()
        _check(self._lib, self._lib.keel_server_get_connection_stats(
            self._handle(), connection, ctypes.byref(raw), ctypes.sizeof(raw)),
            "keel_server_get_connection_stats")
        return ConnectionStats(raw)

    def connection_state(self, connection):
        """``connection``'s state, a ``STATE_*`` (``KeelError``
        ``ERR_UNKNOWN_CONNECTION`` once its DISCONNECTED event was returned)."""
        state = ctypes.c_uint32(0)
        _check(self._lib, self._lib.keel_server_connection_state(self._handle(), connection,
                                                                 ctypes.byref(state)),
               "keel_server_connection_state")
        return state.value

    def connection_count(self):
        """Connections the server holds now, closing ones included."""
        return self._lib.keel_server_connection_count(self._handle())

    def poll(self, timeout_ms=0):
        """The next :class:`Event` of any connection, or ``None``. After
        :meth:`stop`, an ``EVENT_STOPPED`` comes last; later polls return
        ``None``."""
        rc = _check(self._lib, self._lib.keel_server_poll(self._handle(), timeout_ms,
                                                          ctypes.byref(self._ev)),
                    "keel_server_poll")
        return Event(self._ev) if rc == 1 else None

    def destroy(self):
        """Frees the server and its connections (none is closed); safe twice."""
        if self._h:
            self._lib.keel_server_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
