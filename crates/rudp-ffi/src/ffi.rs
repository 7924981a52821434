//! The C boundary: every `extern "C"` function of `include/keel_rudp.h`
//! (generated from this module by cbindgen), and the only `unsafe` of the
//! crate. Each function checks its pointers for NULL, converts, and calls
//! the safe [`Client`] and [`Server`]. A Rust panic cannot unwind into C:
//! it aborts the process (`extern "C"`).
#![allow(non_camel_case_types)]

use std::ffi::{c_char, CStr, CString};
use std::net::SocketAddr;
use std::time::Duration;

use keel_rudp_proto::{
    ChannelConfig, ChannelKind, ClientSecurity, Config, ConnectToken, DisconnectReason,
    EndpointStats, ServerSecurity, State, Stats,
};

use crate::driver::{Client, Error, Event, Polled, Server};

/// Success.
pub const KEEL_OK: i32 = 0;
/// A required pointer argument was NULL.
pub const KEEL_ERR_NULL: i32 = -1;
/// An argument is out of range: an unknown channel kind, text that is not
/// UTF-8, a buffer too small.
pub const KEEL_ERR_INVALID_ARGUMENT: i32 = -2;
/// The address text is not `IP:port` (`127.0.0.1:4000`, `[::1]:4000`).
pub const KEEL_ERR_ADDRESS: i32 = -3;
/// The configuration was refused (channels: 1 to 256).
pub const KEEL_ERR_CONFIG: i32 = -4;
/// A socket operation failed (bind, send, receive).
pub const KEEL_ERR_IO: i32 = -5;
/// The connect token could not be parsed.
pub const KEEL_ERR_TOKEN: i32 = -6;
/// No such channel.
pub const KEEL_ERR_UNKNOWN_CHANNEL: i32 = -7;
/// The message is over `max_message_size`.
pub const KEEL_ERR_MESSAGE_TOO_LARGE: i32 = -8;
/// The connection holds `max_send_buffer` bytes: poll, then send again.
pub const KEEL_ERR_BACKPRESSURE: i32 = -9;
/// The server's shared send budget is spent: poll, then send again.
pub const KEEL_ERR_BUDGET_SPENT: i32 = -10;
/// The connection is closing or closed.
pub const KEEL_ERR_CLOSED: i32 = -11;
/// No connection has this handle (it ended, or never existed).
pub const KEEL_ERR_UNKNOWN_CONNECTION: i32 = -12;

/// Channel kind: resent until acknowledged, delivered once, in order.
pub const KEEL_CHANNEL_RELIABLE_ORDERED: u32 = 0;
/// Channel kind: resent until acknowledged, delivered once, as soon as whole.
pub const KEEL_CHANNEL_RELIABLE_UNORDERED: u32 = 1;
/// Channel kind: never resent; older than one already delivered is dropped.
pub const KEEL_CHANNEL_UNRELIABLE_SEQUENCED: u32 = 2;
/// Channel kind: never resent; delivered at most once, as it arrives.
pub const KEEL_CHANNEL_UNRELIABLE: u32 = 3;

/// `keel_event.kind`: nothing happened within the timeout.
pub const KEEL_EVENT_NONE: u32 = 0;
/// `keel_event.kind`: the handshake finished (server: a new connection).
pub const KEEL_EVENT_CONNECTED: u32 = 1;
/// `keel_event.kind`: a message arrived (`channel`, `data`, `len`).
pub const KEEL_EVENT_MESSAGE: u32 = 2;
/// `keel_event.kind`: the connection ended (`disconnect`, `code`, `reason`).
pub const KEEL_EVENT_DISCONNECTED: u32 = 3;
/// `keel_event.kind`, server only, once after `keel_server_stop`: every
/// connection ended (or the stop's deadline passed); destroy the server.
pub const KEEL_EVENT_STOPPED: u32 = 4;

/// `keel_server_connection_state`: the handshake is not finished.
pub const KEEL_STATE_HANDSHAKING: u32 = 0;
/// `keel_server_connection_state`: messages flow.
pub const KEEL_STATE_CONNECTED: u32 = 1;
/// `keel_server_connection_state`: closed by this side; queued reliable
/// messages are flushed, the close repeated until acknowledged.
pub const KEEL_STATE_CLOSING: u32 = 2;
/// `keel_server_connection_state`: closed by the peer.
pub const KEEL_STATE_DRAINING: u32 = 3;
/// `keel_server_connection_state`: ended; its DISCONNECTED event is
/// waiting to be polled.
pub const KEEL_STATE_CLOSED: u32 = 4;

// The close codes below are keel-rudp-proto's (literals, so cbindgen
// writes them; a test checks they agree).

/// Close code of keel itself: the server refused the handshake, the two
/// ends configure different channels.
pub const KEEL_REFUSE_CONFIG_MISMATCH: u64 = 1;
/// Close code: the server was full (`max_connections`).
pub const KEEL_REFUSE_FULL: u64 = 2;
/// Close code: a token to an insecure server, or none to one requiring tokens.
pub const KEEL_REFUSE_SECURITY_MISMATCH: u64 = 3;
/// Close code: the connect token was refused (the reason says why).
pub const KEEL_REFUSE_TOKEN: u64 = 4;
/// Close code: the peer stopped (`keel_server_stop`'s usual code).
pub const KEEL_CLOSE_STOPPED: u64 = 5;
/// Close code: the client's address holds the most connections one
/// address may.
pub const KEEL_REFUSE_ADDRESS_LIMIT: u64 = 6;
/// Close code: the client's address made too many handshakes.
pub const KEEL_REFUSE_RATE_LIMIT: u64 = 7;
/// Close code: a new connection with the same connect token replaced it.
pub const KEEL_CLOSE_REPLACED: u64 = 8;
/// Close code: the peer acknowledged nothing for the ack timeout.
pub const KEEL_CLOSE_ACK_TIMEOUT: u64 = 17;

/// `keel_event.disconnect`: this side called close (`code`, `reason` as given).
pub const KEEL_DISCONNECT_LOCAL: u32 = 1;
/// `keel_event.disconnect`: the peer closed, or the server refused (`code`, `reason` from the peer).
pub const KEEL_DISCONNECT_REMOTE: u32 = 2;
/// `keel_event.disconnect`: nothing arrived for the idle timeout.
pub const KEEL_DISCONNECT_IDLE_TIMEOUT: u32 = 3;
/// `keel_event.disconnect`: no answer to the handshake in time.
pub const KEEL_DISCONNECT_HANDSHAKE_TIMEOUT: u32 = 4;
/// `keel_event.disconnect`: the peer acknowledged nothing for the ack timeout.
pub const KEEL_DISCONNECT_ACK_TIMEOUT: u32 = 5;
/// `keel_event.disconnect`: a cause this version of the header does not
/// name (a newer library); `code` and `reason` may say more.
pub const KEEL_DISCONNECT_OTHER: u32 = 6;

/// The settings of a client or server. Both ends must configure the same
/// channels. Read only during the call it is passed to; the caller keeps
/// ownership of `channels`.
#[repr(C)]
pub struct keel_config {
    /// `channel_count` channel kinds (`KEEL_CHANNEL_*`), channel 0 first.
    pub channels: *const u32,
    /// 1 to 256.
    pub channel_count: usize,
}

/// One event from a poll call. Pointers in it point into the handle that
/// was polled and stay valid until the next poll or destroy call on that
/// handle; copy what you keep.
#[repr(C)]
pub struct keel_event {
    /// `KEEL_EVENT_*`.
    pub kind: u32,
    /// Server: the connection's handle (never 0). Client: 0.
    pub connection: u64,
    /// MESSAGE: the channel it came on.
    pub channel: u32,
    /// MESSAGE: the message's bytes (`len` of them; NULL when `len` is 0).
    pub data: *const u8,
    /// MESSAGE: its length.
    pub len: usize,
    /// DISCONNECTED: why (`KEEL_DISCONNECT_*`).
    pub disconnect: u32,
    /// DISCONNECTED, LOCAL or REMOTE: the close code.
    pub code: u64,
    /// DISCONNECTED: the reason, NUL-terminated UTF-8 (empty for the
    /// timeouts; a reason holding a NUL byte is cut there). Never NULL
    /// after a poll that returned an event.
    pub reason: *const c_char,
    /// The reason's length in bytes, without the NUL.
    pub reason_len: usize,
}

/// One connection's counters and estimates, from
/// `keel_client_get_stats` or `keel_server_get_connection_stats`. Fields
/// are only ever added at the end: a caller compiled against an older
/// header passes its smaller `sizeof` and gets the fields it knows.
#[repr(C)]
#[derive(Default)]
pub struct keel_connection_stats {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u64,
    /// Its variation, microseconds.
    pub rtt_var_us: u64,
    /// Least round-trip time seen, microseconds.
    pub rtt_min_us: u64,
    /// Latest sample, microseconds.
    pub rtt_latest_us: u64,
    /// Packets lost over packets acknowledged or lost (0 to 1).
    pub loss_rate: f64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets received and accepted.
    pub packets_received: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Message pieces sent again after a loss.
    pub retransmissions: u64,
    /// Bytes sent in datagrams.
    pub bytes_sent: u64,
    /// Bytes received in datagrams.
    pub bytes_received: u64,
    /// Messages delivered to this side.
    pub messages_delivered: u64,
    /// Bytes queued or unacknowledged, all channels.
    pub send_queued_bytes: u64,
    /// Bytes sent and not yet acknowledged or lost.
    pub bytes_in_flight: u64,
    /// The congestion window, bytes.
    pub congestion_window: u64,
    /// Datagrams dropped as malformed.
    pub malformed_packets: u64,
    /// Datagrams dropped as received twice.
    pub duplicate_packets: u64,
    /// Datagrams dropped: failed authentication.
    pub auth_failures: u64,
    /// Datagrams dropped: replayed.
    pub replayed_packets: u64,
    /// Datagrams not acknowledged for lack of receive memory or window
    /// (the peer resends).
    pub refused_packets: u64,
    /// Messages dropped as older than one delivered (sequenced channels).
    pub stale_messages: u64,
    /// Partly received unreliable messages dropped for newer ones.
    pub partials_evicted: u64,
    /// Client only: datagrams not sent because the socket buffer was full
    /// (reliable ones are resent). Server connections: 0 (see
    /// `keel_server_stats`).
    pub datagrams_unsent: u64,
    /// Client only: datagrams the kernel dropped because the client
    /// socket's receive buffer was full (Linux `SO_RXQ_OVFL`; 0 elsewhere).
    /// Server connections: 0 (see `keel_server_stats`). Added after 0.1.0:
    /// a caller passing the older `sizeof` (184) does not get it.
    pub kernel_drops: u64,
}

/// A server's counters, from `keel_server_get_stats`. Fields are only
/// ever added at the end (see `keel_connection_stats`).
#[repr(C)]
#[derive(Default)]
pub struct keel_server_stats {
    /// Connections held now (closing ones included).
    pub connections: u64,
    /// Connections made.
    pub connections_created: u64,
    /// Connections removed after they ended.
    pub connections_removed: u64,
    /// Handshake packets received.
    pub hellos: u64,
    /// Handshakes refused, whatever the cause (config, full, token,
    /// security, admission limits).
    pub handshakes_refused: u64,
    /// Of those, for a token (forged, expired, another server or key, replayed).
    pub tokens_refused: u64,
    /// Of those, for the per-address connection limit.
    pub refused_address_limit: u64,
    /// Of those, for the per-address handshake rate.
    pub refused_rate_limit: u64,
    /// Datagrams dropped as malformed.
    pub malformed: u64,
    /// Datagrams dropped: for no known connection.
    pub unknown_connection: u64,
    /// Datagrams not sent because the socket buffer was full.
    pub datagrams_unsent: u64,
    /// Message pieces refused: the shared receive budget was spent.
    pub budget_refused: u64,
    /// Sends refused: the shared send budget was spent.
    pub send_budget_refused: u64,
    /// Broadcast copies not queued (a connection's send buffer or the send
    /// budget was full).
    pub broadcast_refused: u64,
    /// Connections ended because the peer acknowledged nothing.
    pub ack_timeouts: u64,
    /// Messages never acknowledged by connections that were removed.
    pub undelivered_messages: u64,
    /// Datagrams the kernel dropped because the server socket's receive
    /// buffer was full, before the server read them (Linux `SO_RXQ_OVFL`
    /// and the socket's drop counter, read at this call; 0 elsewhere).
    /// Counted until `keel_server_destroy`, also after STOPPED. Added
    /// after 0.1.0: a caller passing the older `sizeof` (128) does not get
    /// it.
    pub kernel_drops: u64,
}

/// A client: one connection to one server, and its socket. Opaque; created
/// by `keel_client_connect_*`, freed by `keel_client_destroy`. Use it from
/// one thread at a time (any thread, not two at once).
pub struct keel_client {
    inner: Client,
    msg: Vec<u8>,
    reason: CString,
}

/// A server: its socket and all its connections. Opaque; created by
/// `keel_server_create_*`, freed by `keel_server_destroy`. Use it from one
/// thread at a time (any thread, not two at once).
pub struct keel_server {
    inner: Server,
    msg: Vec<u8>,
    msg_conn: u64,
    reason: CString,
}

fn code(e: Error) -> i32 {
    match e {
        Error::Config => KEEL_ERR_CONFIG,
        Error::Io => KEEL_ERR_IO,
        Error::UnknownChannel => KEEL_ERR_UNKNOWN_CHANNEL,
        Error::MessageTooLarge => KEEL_ERR_MESSAGE_TOO_LARGE,
        Error::Backpressure => KEEL_ERR_BACKPRESSURE,
        Error::BudgetSpent => KEEL_ERR_BUDGET_SPENT,
        Error::Closed => KEEL_ERR_CLOSED,
        Error::UnknownConnection => KEEL_ERR_UNKNOWN_CONNECTION,
    }
}

/// A static, NUL-terminated English message for a `KEEL_OK` or `KEEL_ERR_*`
/// code ("unknown error code" for others). Never NULL; never free it.
#[no_mangle]
pub extern "C" fn keel_error_message(code: i32) -> *const c_char {
    let s: &'static [u8] = match code {
        KEEL_OK => b"ok\0",
        KEEL_ERR_NULL => b"a required pointer argument was NULL\0",
        KEEL_ERR_INVALID_ARGUMENT => {
            b"an argument is out of range (channel kind, text that is not UTF-8, buffer too small)\0"
        }
        KEEL_ERR_ADDRESS => b"the address is not IP:port (127.0.0.1:4000, [::1]:4000)\0",
        KEEL_ERR_CONFIG => b"the configuration was refused (channels: 1 to 256)\0",
        KEEL_ERR_IO => b"a socket operation failed\0",
        KEEL_ERR_TOKEN => b"the connect token could not be parsed\0",
        KEEL_ERR_UNKNOWN_CHANNEL => b"no such channel\0",
        KEEL_ERR_MESSAGE_TOO_LARGE => b"the message is over max_message_size\0",
        KEEL_ERR_BACKPRESSURE => {
            b"the connection holds max_send_buffer bytes; poll, then send again\0"
        }
        KEEL_ERR_BUDGET_SPENT => b"the server's send budget is spent; poll, then send again\0",
        KEEL_ERR_CLOSED => b"the connection is closing or closed\0",
        KEEL_ERR_UNKNOWN_CONNECTION => b"no connection has this handle\0",
        _ => b"unknown error code\0",
    };
    s.as_ptr().cast::<c_char>()
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for this call.
unsafe fn text<'a>(p: *const c_char) -> Result<&'a str, i32> {
    if p.is_null() {
        return Err(KEEL_ERR_NULL);
    }
    // SAFETY: p is non-NULL and, by the caller's contract, NUL-terminated
    // and valid for the duration of the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| KEEL_ERR_INVALID_ARGUMENT)
}

/// A close reason: NULL is the empty reason.
///
/// # Safety
/// As [`text`].
unsafe fn reason_text<'a>(p: *const c_char) -> Result<&'a str, i32> {
    if p.is_null() {
        return Ok("");
    }
    // SAFETY: forwarded contract of this function.
    unsafe { text(p) }
}

/// # Safety
/// `p` is NULL or points to `len` readable bytes valid for this call.
unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], i32> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(KEEL_ERR_NULL);
    }
    // SAFETY: p is non-NULL and, by the caller's contract, points to len
    // readable bytes that are not written during the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// # Safety
/// `cfg` is NULL or a valid `keel_config` whose `channels` points to
/// `channel_count` values.
unsafe fn config(cfg: *const keel_config) -> Result<Config, i32> {
    // SAFETY: by the caller's contract, cfg is NULL or valid for reads.
    let cfg = unsafe { cfg.as_ref() }.ok_or(KEEL_ERR_NULL)?;
    if cfg.channel_count == 0 || cfg.channel_count > 256 {
        return Err(KEEL_ERR_CONFIG);
    }
    if cfg.channels.is_null() {
        return Err(KEEL_ERR_NULL);
    }
    // SAFETY: non-NULL, and by the caller's contract channel_count values.
    let kinds = unsafe { std::slice::from_raw_parts(cfg.channels, cfg.channel_count) };
    let mut channels = Vec::with_capacity(kinds.len());
    for &k in kinds {
        let kind = match k {
            KEEL_CHANNEL_RELIABLE_ORDERED => ChannelKind::ReliableOrdered,
            KEEL_CHANNEL_RELIABLE_UNORDERED => ChannelKind::ReliableUnordered,
            KEEL_CHANNEL_UNRELIABLE_SEQUENCED => ChannelKind::UnreliableSequenced,
            KEEL_CHANNEL_UNRELIABLE => ChannelKind::Unreliable,
            _ => return Err(KEEL_ERR_INVALID_ARGUMENT),
        };
        channels.push(ChannelConfig::new(kind));
    }
    Ok(Config::new(channels))
}

/// # Safety
/// `addr` is NULL or a NUL-terminated string valid for this call.
unsafe fn address(addr: *const c_char) -> Result<SocketAddr, i32> {
    // SAFETY: forwarded contract of this function.
    let s = unsafe { text(addr) }?;
    s.parse().map_err(|_| KEEL_ERR_ADDRESS)
}

/// # Safety
/// `out` is NULL or valid for a write of one `T`.
unsafe fn put<T>(out: *mut T, v: T) -> i32 {
    if out.is_null() {
        return KEEL_ERR_NULL;
    }
    // SAFETY: non-NULL and, by the caller's contract, valid for a write.
    unsafe { out.write(v) };
    KEEL_OK
}

/// Writes the first `out_size` bytes of `v` (at most all of it) to `out`:
/// a caller built against an older header, with a shorter struct, gets
/// the fields it knows.
///
/// # Safety
/// `out` is NULL or valid for writes of `out_size` bytes (or of one `T`
/// if smaller); `T` has no padding (all its fields are 8 bytes).
unsafe fn put_sized<T>(out: *mut T, out_size: usize, v: &T) -> i32 {
    if out.is_null() {
        return KEEL_ERR_NULL;
    }
    let n = out_size.min(std::mem::size_of::<T>());
    // SAFETY: out is non-NULL and valid for n <= out_size bytes of writes
    // by the contract; v is a distinct, fully initialized T of at least n
    // bytes with no padding.
    unsafe {
        std::ptr::copy_nonoverlapping(std::ptr::from_ref(v).cast::<u8>(), out.cast::<u8>(), n);
    }
    KEEL_OK
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn connection_stats(s: &Stats, unsent: u64, kernel_drops: u64) -> keel_connection_stats {
    keel_connection_stats {
        rtt_us: micros(s.smoothed_rtt),
        rtt_var_us: micros(s.rttvar),
        rtt_min_us: micros(s.min_rtt),
        rtt_latest_us: micros(s.latest_rtt),
        loss_rate: s.loss_rate,
        packets_sent: s.packets_sent,
        packets_received: s.packets_received,
        packets_lost: s.packets_lost,
        retransmissions: s.retransmissions,
        bytes_sent: s.bytes_sent,
        bytes_received: s.bytes_received,
        messages_delivered: s.messages_delivered,
        send_queued_bytes: s.queued_bytes.iter().map(|&b| b as u64).sum(),
        bytes_in_flight: s.bytes_in_flight as u64,
        congestion_window: s.congestion_window as u64,
        malformed_packets: s.malformed_packets,
        duplicate_packets: s.duplicate_packets,
        auth_failures: s.auth_failures,
        replayed_packets: s.replayed_packets,
        refused_packets: s.refused_packets,
        stale_messages: s.stale_messages,
        partials_evicted: s.partials_evicted,
        datagrams_unsent: unsent,
        kernel_drops,
    }
}

fn server_stats(e: &EndpointStats, server: &Server) -> keel_server_stats {
    keel_server_stats {
        connections: server.connection_count() as u64,
        connections_created: e.connections_created,
        connections_removed: e.connections_removed,
        hellos: e.hellos,
        handshakes_refused: e.refused,
        tokens_refused: e.tokens_forged
            + e.tokens_expired
            + e.tokens_wrong_server
            + e.tokens_wrong_key
            + e.tokens_replayed,
        refused_address_limit: e.refused_address_limit,
        refused_rate_limit: e.refused_rate_limit,
        malformed: e.malformed,
        unknown_connection: e.unknown_connection,
        datagrams_unsent: server.send_dropped,
        budget_refused: e.budget_refused,
        send_budget_refused: e.send_budget_refused,
        broadcast_refused: server.broadcast_refused,
        ack_timeouts: e.ack_timeouts,
        undelivered_messages: e.undelivered_messages,
        kernel_drops: server.kernel_drops(),
    }
}

/// The common end of the `keel_client_connect_*` functions: `parsed` is
/// their arguments as read (config, address, and the token's form), then
/// `out` is checked, `security` makes the token (or none) and the client is
/// connected into `*out`. The order of the checks is the errors' order.
///
/// # Safety
/// `out` is NULL or valid for a write.
unsafe fn connect_into<T>(
    parsed: Result<(Config, SocketAddr, T), i32>,
    out: *mut *mut keel_client,
    security: impl FnOnce(T) -> Result<ClientSecurity, i32>,
) -> i32 {
    let (cfg, addr, tok) = match parsed {
        Ok(x) => x,
        Err(e) => return e,
    };
    if out.is_null() {
        return KEEL_ERR_NULL;
    }
    let security = match security(tok) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match Client::connect(cfg, addr, security).map_err(code) {
        Ok(inner) => {
            let c = Box::new(keel_client {
                inner,
                msg: Vec::new(),
                reason: CString::default(),
            });
            // SAFETY: out is non-NULL and valid for a write by the contract.
            unsafe { put(out, Box::into_raw(c)) }
        }
        Err(e) => e,
    }
}

/// Creates a client and starts connecting to `server_addr` (`IP:port`) in
/// insecure mode: no token, no encryption, no authentication (LAN tools and
/// tests only; a server requiring tokens refuses it). Nothing is sent until
/// the first `keel_client_poll`. On success `*out` is a new client the
/// caller owns (free it with `keel_client_destroy`); on error `*out` is
/// untouched.
///
/// # Safety
/// `cfg` and `server_addr` are valid for this call (or NULL: an error);
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn keel_client_connect_insecure(
    cfg: *const keel_config,
    server_addr: *const c_char,
    out: *mut *mut keel_client,
) -> i32 {
    // SAFETY: the caller's contract covers each pointer.
    unsafe {
        let parsed = config(cfg).and_then(|c| Ok((c, address(server_addr)?, ())));
        connect_into(parsed, out, |()| Ok(ClientSecurity::Insecure))
    }
}

/// As `keel_client_connect_insecure`, with a connect token from the game's
/// backend as text (`token_text`, NUL-terminated, base64url as the backend
/// hands it out): packets are sealed with its keys.
///
/// # Safety
/// As `keel_client_connect_insecure`; `token_text` is a NUL-terminated
/// string valid for this call.
#[no_mangle]
pub unsafe extern "C" fn keel_client_connect_token(
    cfg: *const keel_config,
    server_addr: *const c_char,
    token_text: *const c_char,
    out: *mut *mut keel_client,
) -> i32 {
    // SAFETY: the caller's contract covers each pointer.
    unsafe {
        let parsed = config(cfg).and_then(|c| Ok((c, address(server_addr)?, text(token_text)?)));
        connect_into(parsed, out, |tok| {
            let token = ConnectToken::from_text(tok).map_err(|_| KEEL_ERR_TOKEN)?;
            Ok(ClientSecurity::Token(token))
        })
    }
}

/// As `keel_client_connect_token`, with the token as the `len` bytes at
/// `token` (its binary form, as keel-rudp-proto's `ConnectToken::to_bytes`
/// writes it); the bytes are read during the call only.
///
/// # Safety
/// As `keel_client_connect_insecure`; `token` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn keel_client_connect_token_bytes(
    cfg: *const keel_config,
    server_addr: *const c_char,
    token: *const u8,
    len: usize,
    out: *mut *mut keel_client,
) -> i32 {
    // SAFETY: the caller's contract covers each pointer.
    unsafe {
        let parsed = config(cfg).and_then(|c| Ok((c, address(server_addr)?, bytes(token, len)?)));
        connect_into(parsed, out, |tok| {
            let token = ConnectToken::from_bytes(tok).map_err(|_| KEEL_ERR_TOKEN)?;
            Ok(ClientSecurity::Token(token))
        })
    }
}

/// Frees a client and its socket; NULL is ignored. Does not send a close:
/// call `keel_client_close` and poll until DISCONNECTED first for the
/// server to learn why. Pointers from its events become invalid.
///
/// # Safety
/// `client` is NULL or a pointer from `keel_client_connect_*` not yet
/// destroyed, not in use on another thread.
#[no_mangle]
pub unsafe extern "C" fn keel_client_destroy(client: *mut keel_client) {
    if !client.is_null() {
        // SAFETY: by the contract it came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(client) });
    }
}

/// # Safety
/// `client` is NULL or a live client used by this thread only.
unsafe fn client_mut<'a>(client: *mut keel_client) -> Result<&'a mut keel_client, i32> {
    // SAFETY: by the contract, NULL or a live, unaliased client.
    unsafe { client.as_mut() }.ok_or(KEEL_ERR_NULL)
}

/// Queues `len` bytes at `data` on `channel`; they go out on the next poll.
/// The bytes are copied: the caller keeps `data`. `KEEL_ERR_BACKPRESSURE`:
/// nothing was queued; poll and send again.
///
/// # Safety
/// `client` is a live client; `data` points to `len` readable bytes (may
/// be NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn keel_client_send(
    client: *mut keel_client,
    channel: u8,
    data: *const u8,
    len: usize,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe { client_mut(client).and_then(|c| Ok((c, bytes(data, len)?))) };
    match r {
        Ok((c, d)) => c.inner.send(channel, d).map_or_else(code, |()| KEEL_OK),
        Err(e) => e,
    }
}

/// Starts closing with `code` and `reason` (NUL-terminated UTF-8; at most
/// 128 bytes are sent; NULL: empty). What was queued is flushed first; the
/// server sees the code and reason. Poll until the DISCONNECTED event
/// (LOCAL) before destroying.
///
/// # Safety
/// `client` is a live client; `reason` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn keel_client_close(
    client: *mut keel_client,
    code: u64,
    reason: *const c_char,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe {
        client_mut(client).and_then(|c| {
            let why = reason_text(reason)?;
            Ok((c, why))
        })
    };
    match r {
        Ok((c, why)) => {
            c.inner.close(code, why);
            KEEL_OK
        }
        Err(e) => e,
    }
}

/// Fills `*out` with the client's counters and estimates: RTT, loss,
/// bytes, drops. Pass `sizeof(keel_connection_stats)` as `out_size`.
///
/// # Safety
/// `client` is a live client; `out` is valid for `out_size` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn keel_client_get_stats(
    client: *const keel_client,
    out: *mut keel_connection_stats,
    out_size: usize,
) -> i32 {
    // SAFETY: by the contract, NULL or a live client not used elsewhere now.
    let Some(c) = (unsafe { client.as_ref() }) else {
        return KEEL_ERR_NULL;
    };
    let st = connection_stats(
        &c.inner.stats(),
        c.inner.send_dropped,
        c.inner.kernel_drops(),
    );
    // SAFETY: the caller's contract covers out.
    unsafe { put_sized(out, out_size, &st) }
}

fn disconnect_fields(d: DisconnectReason) -> (u32, u64, String) {
    match d {
        DisconnectReason::Local { code, reason } => (KEEL_DISCONNECT_LOCAL, code, reason),
        DisconnectReason::Remote { code, reason } => (KEEL_DISCONNECT_REMOTE, code, reason),
        DisconnectReason::IdleTimeout => (KEEL_DISCONNECT_IDLE_TIMEOUT, 0, String::new()),
        DisconnectReason::HandshakeTimeout => (KEEL_DISCONNECT_HANDSHAKE_TIMEOUT, 0, String::new()),
        DisconnectReason::AckTimeout => (KEEL_DISCONNECT_ACK_TIMEOUT, 0, String::new()),
        _ => (KEEL_DISCONNECT_OTHER, 0, String::new()),
    }
}

fn reason_cstring(mut s: String) -> CString {
    if let Some(i) = s.find('\0') {
        s.truncate(i);
    }
    CString::new(s).unwrap_or_default()
}

/// Fills `ev` from `e`, keeping its buffers in `msg` and `reason`.
fn fill(ev: &mut keel_event, e: Event, conn: u64, msg: &mut Vec<u8>, reason: &mut CString) {
    *ev = keel_event {
        kind: KEEL_EVENT_NONE,
        connection: conn,
        channel: 0,
        data: std::ptr::null(),
        len: 0,
        disconnect: 0,
        code: 0,
        reason: reason.as_ptr(),
        reason_len: 0,
    };
    match e {
        Event::Connected => ev.kind = KEEL_EVENT_CONNECTED,
        Event::Message { channel, data } => {
            *msg = data;
            ev.kind = KEEL_EVENT_MESSAGE;
            ev.channel = u32::from(channel);
            ev.len = msg.len();
            if !msg.is_empty() {
                ev.data = msg.as_ptr();
            }
        }
        Event::Disconnected(d) => {
            let (kind, code, why) = disconnect_fields(d);
            *reason = reason_cstring(why);
            ev.kind = KEEL_EVENT_DISCONNECTED;
            ev.disconnect = kind;
            ev.code = code;
            ev.reason = reason.as_ptr();
            ev.reason_len = reason.as_bytes().len();
        }
        // The driver passes on only the three events above.
        _ => {}
    }
}

fn empty_event(ev: &mut keel_event, reason: &CString) {
    *ev = keel_event {
        kind: KEEL_EVENT_NONE,
        connection: 0,
        channel: 0,
        data: std::ptr::null(),
        len: 0,
        disconnect: 0,
        code: 0,
        reason: reason.as_ptr(),
        reason_len: 0,
    };
}

/// Does the client's work on the calling thread: reads what arrived, runs
/// due timers, sends what is queued, and fills `*ev` with the next event,
/// waiting up to `timeout_ms` milliseconds for one (0: do not wait, for a
/// game loop polling each frame). Returns 1 with an event, 0 with none
/// (`ev->kind` is `KEEL_EVENT_NONE`), or a `KEEL_ERR_*` code. Call it in a
/// loop until it returns 0: more events may be waiting. The previous
/// event's `data` and `reason` become invalid at this call.
///
/// # Safety
/// `client` is a live client; `ev` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn keel_client_poll(
    client: *mut keel_client,
    timeout_ms: u32,
    ev: *mut keel_event,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe { client_mut(client).and_then(|c| Ok((c, ev.as_mut().ok_or(KEEL_ERR_NULL)?))) };
    let (c, ev) = match r {
        Ok(x) => x,
        Err(e) => return e,
    };
    let old = std::mem::take(&mut c.msg);
    if old.capacity() > 0 {
        c.inner.recycle(old);
    }
    empty_event(ev, &c.reason);
    match c.inner.poll(Duration::from_millis(u64::from(timeout_ms))) {
        Ok(Some(e)) => {
            fill(ev, e, 0, &mut c.msg, &mut c.reason);
            1
        }
        Ok(None) => 0,
        Err(e) => code(e),
    }
}

/// Creates a server bound to `bind_addr` (`IP:port`; port 0 picks one, see
/// `keel_server_local_addr`) in insecure mode: no tokens, no encryption
/// (LAN tools and tests only; a client presenting a token is refused). On
/// success `*out` is a new server the caller owns (free it with
/// `keel_server_destroy`).
///
/// # Safety
/// `cfg` and `bind_addr` are valid for this call; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn keel_server_create_insecure(
    cfg: *const keel_config,
    bind_addr: *const c_char,
    out: *mut *mut keel_server,
) -> i32 {
    // SAFETY: the caller's contract covers each pointer.
    unsafe { server_create(cfg, bind_addr, ServerSecurity::Insecure, out) }
}

/// As `keel_server_create_insecure`, requiring connect tokens sealed with
/// the 32 bytes at `token_key` (shared with the game's backend) and sealing
/// every packet. Clients are expected to reach it at the bound address (the
/// address tokens must name); binding 0.0.0.0 or a port of 0 therefore
/// only suits tests.
///
/// # Safety
/// As `keel_server_create_insecure`; `token_key` points to 32 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn keel_server_create_token(
    cfg: *const keel_config,
    bind_addr: *const c_char,
    token_key: *const u8,
    out: *mut *mut keel_server,
) -> i32 {
    // SAFETY: by the contract token_key is NULL or 32 readable bytes.
    let key = match unsafe { bytes(token_key, 32) } {
        Ok(k) => k,
        Err(e) => return e,
    };
    let mut k = [0u8; 32];
    k.copy_from_slice(key);
    let security = ServerSecurity::Tokens {
        key: k,
        public_addrs: Vec::new(),
    };
    // SAFETY: the caller's contract covers each pointer.
    unsafe { server_create(cfg, bind_addr, security, out) }
}

/// # Safety
/// As `keel_server_create_insecure`.
unsafe fn server_create(
    cfg: *const keel_config,
    bind_addr: *const c_char,
    security: ServerSecurity,
    out: *mut *mut keel_server,
) -> i32 {
    // SAFETY: forwarded contract.
    let r = unsafe { config(cfg).and_then(|c| Ok((c, address(bind_addr)?))) };
    let (cfg, addr) = match r {
        Ok(x) => x,
        Err(e) => return e,
    };
    if out.is_null() {
        return KEEL_ERR_NULL;
    }
    match Server::bind(cfg, addr, security) {
        Ok(inner) => {
            let s = Box::new(keel_server {
                inner,
                msg: Vec::new(),
                msg_conn: 0,
                reason: CString::default(),
            });
            // SAFETY: out is non-NULL and valid for a write by the contract.
            unsafe { put(out, Box::into_raw(s)) }
        }
        Err(e) => code(e),
    }
}

/// Frees a server, its socket and all its connections (without closing
/// them: close each and poll first for clients to learn why); NULL is
/// ignored. Pointers from its events become invalid.
///
/// # Safety
/// `server` is NULL or a pointer from `keel_server_create_*` not yet
/// destroyed, not in use on another thread.
#[no_mangle]
pub unsafe extern "C" fn keel_server_destroy(server: *mut keel_server) {
    if !server.is_null() {
        // SAFETY: by the contract it came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(server) });
    }
}

/// # Safety
/// `server` is NULL or a live server used by this thread only.
unsafe fn server_mut<'a>(server: *mut keel_server) -> Result<&'a mut keel_server, i32> {
    // SAFETY: by the contract, NULL or a live, unaliased server.
    unsafe { server.as_mut() }.ok_or(KEEL_ERR_NULL)
}

/// Writes the bound address as NUL-terminated text (`127.0.0.1:40123`)
/// into `buf` of `len` bytes (64 is always enough).
/// `KEEL_ERR_INVALID_ARGUMENT` if it does not fit.
///
/// # Safety
/// `server` is a live server; `buf` is valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn keel_server_local_addr(
    server: *mut keel_server,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    // SAFETY: the caller's contract covers server.
    let s = match unsafe { server_mut(server) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    if buf.is_null() {
        return KEEL_ERR_NULL;
    }
    let addr = match s.inner.local_addr() {
        Ok(a) => a.to_string(),
        Err(e) => return code(e),
    };
    if addr.len() + 1 > len {
        return KEEL_ERR_INVALID_ARGUMENT;
    }
    // SAFETY: buf is non-NULL and valid for len >= addr.len() + 1 bytes of
    // writes; the source is a distinct Rust allocation.
    unsafe {
        std::ptr::copy_nonoverlapping(addr.as_ptr(), buf.cast::<u8>(), addr.len());
        buf.add(addr.len()).write(0);
    }
    KEEL_OK
}

/// Queues `len` bytes at `data` on `channel` of `connection` (a handle from
/// an event); they go out on the next poll. The bytes are copied.
///
/// # Safety
/// `server` is a live server; `data` points to `len` readable bytes (may
/// be NULL when `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn keel_server_send(
    server: *mut keel_server,
    connection: u64,
    channel: u8,
    data: *const u8,
    len: usize,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe { server_mut(server).and_then(|s| Ok((s, bytes(data, len)?))) };
    match r {
        Ok((s, d)) => s
            .inner
            .send(connection, channel, d)
            .map_or_else(code, |()| KEEL_OK),
        Err(e) => e,
    }
}

/// Starts closing `connection` with `code` and `reason` (NUL-terminated
/// UTF-8, at most 128 bytes sent; NULL: empty). The client sees both; the
/// server gets the connection's DISCONNECTED event (LOCAL) once it ends.
///
/// # Safety
/// `server` is a live server; `reason` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn keel_server_close(
    server: *mut keel_server,
    connection: u64,
    code: u64,
    reason: *const c_char,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe {
        server_mut(server).and_then(|s| {
            let why = reason_text(reason)?;
            Ok((s, why))
        })
    };
    match r {
        Ok((s, why)) => s
            .inner
            .close(connection, code, why)
            .map_or_else(self::code, |()| KEEL_OK),
        Err(e) => e,
    }
}

/// # Safety
/// `server` is NULL or a live server not used elsewhere now.
unsafe fn server_ref<'a>(server: *const keel_server) -> Result<&'a keel_server, i32> {
    // SAFETY: by the contract, NULL or a live server.
    unsafe { server.as_ref() }.ok_or(KEEL_ERR_NULL)
}

/// Fills `*out` with the server's counters: connections, handshakes and
/// their refusals, drops. Pass `sizeof(keel_server_stats)` as `out_size`.
///
/// # Safety
/// `server` is a live server; `out` is valid for `out_size` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn keel_server_get_stats(
    server: *const keel_server,
    out: *mut keel_server_stats,
    out_size: usize,
) -> i32 {
    // SAFETY: the caller's contract covers server.
    let s = match unsafe { server_ref(server) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    let st = server_stats(&s.inner.stats(), &s.inner);
    // SAFETY: the caller's contract covers out.
    unsafe { put_sized(out, out_size, &st) }
}

/// Fills `*out` with `connection`'s counters and estimates (RTT, loss,
/// bytes, drops). Pass `sizeof(keel_connection_stats)` as `out_size`.
/// `KEEL_ERR_UNKNOWN_CONNECTION` once its DISCONNECTED event was returned.
///
/// # Safety
/// `server` is a live server; `out` is valid for `out_size` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn keel_server_get_connection_stats(
    server: *const keel_server,
    connection: u64,
    out: *mut keel_connection_stats,
    out_size: usize,
) -> i32 {
    // SAFETY: the caller's contract covers server.
    let s = match unsafe { server_ref(server) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    match s.inner.connection_stats(connection) {
        // SAFETY: the caller's contract covers out.
        Ok(st) => unsafe { put_sized(out, out_size, &connection_stats(&st, 0, 0)) },
        Err(e) => code(e),
    }
}

/// Connections the server holds now, closing ones included.
///
/// # Safety
/// `server` is NULL (0 is returned) or a live server.
#[no_mangle]
pub unsafe extern "C" fn keel_server_connection_count(server: *const keel_server) -> usize {
    // SAFETY: the caller's contract covers server.
    unsafe { server_ref(server) }.map_or(0, |s| s.inner.connection_count())
}

/// Writes `connection`'s state (`KEEL_STATE_*`) to `*state`: whether it is
/// still handshaking, connected (sends are accepted), or closing.
/// `KEEL_ERR_UNKNOWN_CONNECTION` once its DISCONNECTED event was returned.
///
/// # Safety
/// `server` is a live server; `state` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn keel_server_connection_state(
    server: *const keel_server,
    connection: u64,
    state: *mut u32,
) -> i32 {
    // SAFETY: the caller's contract covers server.
    let s = match unsafe { server_ref(server) } {
        Ok(s) => s,
        Err(e) => return e,
    };
    let st = match s.inner.connection_state(connection) {
        Ok(State::Handshaking) => KEEL_STATE_HANDSHAKING,
        Ok(State::Connected) => KEEL_STATE_CONNECTED,
        Ok(State::Closing) => KEEL_STATE_CLOSING,
        Ok(State::Draining) => KEEL_STATE_DRAINING,
        Ok(State::Closed) => KEEL_STATE_CLOSED,
        Err(e) => return code(e),
    };
    // SAFETY: the caller's contract covers state.
    unsafe { put(state, st) }
}

/// Queues the `len` bytes at `data` on `channel` of every connected
/// connection (not those handshaking or closing); they go out on the next
/// poll. The bytes are copied. `*queued` (if not NULL) is how many
/// connections got it; a connection whose send buffer or the send budget
/// is full is skipped and counted in `keel_server_stats.broadcast_refused`.
/// An unknown channel or a message over `max_message_size` is an error
/// and nothing is queued.
///
/// # Safety
/// `server` is a live server; `data` points to `len` readable bytes (may
/// be NULL when `len` is 0); `queued` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn keel_server_broadcast(
    server: *mut keel_server,
    channel: u8,
    data: *const u8,
    len: usize,
    queued: *mut usize,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe { server_mut(server).and_then(|s| Ok((s, bytes(data, len)?))) };
    let (s, d) = match r {
        Ok(x) => x,
        Err(e) => return e,
    };
    match s.inner.broadcast(channel, d) {
        Ok(n) => {
            if !queued.is_null() {
                // SAFETY: non-NULL, and valid for a write by the contract.
                unsafe { queued.write(n) };
            }
            KEEL_OK
        }
        Err(e) => code(e),
    }
}

/// Stops the server: closes every connection with `code` (usually
/// `KEEL_CLOSE_STOPPED`) and `reason` (NUL-terminated UTF-8, at most 128
/// bytes sent; NULL: empty), flushing what each has queued first, and
/// closes connections that finish a handshake from now on the same way.
/// Keep polling: each connection's DISCONNECTED (LOCAL) event comes, then
/// one `KEEL_EVENT_STOPPED` when none is left, or at most `close_timeout`
/// (2 s) plus 1 s later for clients that never acknowledge; then destroy
/// the server. A second call changes nothing.
///
/// # Safety
/// `server` is a live server; `reason` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn keel_server_stop(
    server: *mut keel_server,
    code: u64,
    reason: *const c_char,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe {
        server_mut(server).and_then(|s| {
            let why = reason_text(reason)?;
            Ok((s, why))
        })
    };
    match r {
        Ok((s, why)) => {
            s.inner.stop(code, why);
            KEEL_OK
        }
        Err(e) => e,
    }
}

/// As `keel_client_poll`, for all of the server's connections: accepts
/// handshakes, and fills `*ev` with the next event of any connection
/// (`ev->connection` names it). A connection's handle is valid from its
/// CONNECTED event until its DISCONNECTED event has been returned; after
/// that it names nothing (`KEEL_ERR_UNKNOWN_CONNECTION`), even when a
/// later connection takes its slot: handles carry a generation. After
/// `keel_server_stop`, one `KEEL_EVENT_STOPPED` comes last; polls after
/// it return 0 and do nothing.
///
/// # Safety
/// `server` is a live server; `ev` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn keel_server_poll(
    server: *mut keel_server,
    timeout_ms: u32,
    ev: *mut keel_event,
) -> i32 {
    // SAFETY: the caller's contract covers both pointers.
    let r = unsafe { server_mut(server).and_then(|s| Ok((s, ev.as_mut().ok_or(KEEL_ERR_NULL)?))) };
    let (s, ev) = match r {
        Ok(x) => x,
        Err(e) => return e,
    };
    let old = std::mem::take(&mut s.msg);
    if old.capacity() > 0 {
        s.inner.recycle(s.msg_conn, old);
    }
    empty_event(ev, &s.reason);
    match s.inner.poll(Duration::from_millis(u64::from(timeout_ms))) {
        Ok(Some(Polled::Connection(conn, e))) => {
            s.msg_conn = conn;
            fill(ev, e, conn, &mut s.msg, &mut s.reason);
            1
        }
        Ok(Some(Polled::Stopped)) => {
            ev.kind = KEEL_EVENT_STOPPED;
            1
        }
        Ok(None) => 0,
        Err(e) => code(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_are_the_protocols() {
        use keel_rudp_proto as p;
        assert_eq!(KEEL_REFUSE_CONFIG_MISMATCH, p::REFUSE_CONFIG_MISMATCH);
        assert_eq!(KEEL_REFUSE_FULL, p::REFUSE_FULL);
        assert_eq!(KEEL_REFUSE_SECURITY_MISMATCH, p::REFUSE_SECURITY_MISMATCH);
        assert_eq!(KEEL_REFUSE_TOKEN, p::REFUSE_TOKEN);
        assert_eq!(KEEL_CLOSE_STOPPED, p::CLOSE_STOPPED);
        assert_eq!(KEEL_REFUSE_ADDRESS_LIMIT, p::REFUSE_ADDRESS_LIMIT);
        assert_eq!(KEEL_REFUSE_RATE_LIMIT, p::REFUSE_RATE_LIMIT);
        assert_eq!(KEEL_CLOSE_REPLACED, p::CLOSE_REPLACED);
        assert_eq!(KEEL_CLOSE_ACK_TIMEOUT, p::CLOSE_ACK_TIMEOUT);
    }
}
