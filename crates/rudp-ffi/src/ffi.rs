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
    ServerSecurity,
};

use crate::driver::{Client, Error, Event, Server};

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
/// 255 bytes are sent; NULL: empty). What was queued is flushed first; the
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
            let why = if reason.is_null() { "" } else { text(reason)? };
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

fn disconnect_fields(d: DisconnectReason) -> (u32, u64, String) {
    match d {
        DisconnectReason::Local { code, reason } => (KEEL_DISCONNECT_LOCAL, code, reason),
        DisconnectReason::Remote { code, reason } => (KEEL_DISCONNECT_REMOTE, code, reason),
        DisconnectReason::IdleTimeout => (KEEL_DISCONNECT_IDLE_TIMEOUT, 0, String::new()),
        DisconnectReason::HandshakeTimeout => (KEEL_DISCONNECT_HANDSHAKE_TIMEOUT, 0, String::new()),
        DisconnectReason::AckTimeout => (KEEL_DISCONNECT_ACK_TIMEOUT, 0, String::new()),
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
/// UTF-8, at most 255 bytes sent; NULL: empty). The client sees both; the
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
            let why = if reason.is_null() { "" } else { text(reason)? };
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

/// As `keel_client_poll`, for all of the server's connections: accepts
/// handshakes, and fills `*ev` with the next event of any connection
/// (`ev->connection` names it). A connection's handle is valid from its
/// CONNECTED event until its DISCONNECTED event has been returned; after
/// that the handle may be reused for a later connection.
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
        Ok(Some((conn, e))) => {
            s.msg_conn = conn;
            fill(ev, e, conn, &mut s.msg, &mut s.reason);
            1
        }
        Ok(None) => 0,
        Err(e) => code(e),
    }
}
