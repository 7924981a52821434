//! The C API's functions called from Rust as C would call them: token mode
//! (a token minted for the server's address connects, and its messages
//! arrive; a token sealed with another key is refused) and argument checks.
//! The insecure flow is tests/c/loopback.c, run by scripts/test.sh.
// The C boundary: these calls are the `unsafe` the crate exports.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_rudp_ffi::ffi::*;
use keel_rudp_proto::{TokenMinter, TokenSpec};

const CHANNELS: [u32; 1] = [KEEL_CHANNEL_RELIABLE_ORDERED];

fn cfg() -> keel_config {
    keel_config {
        channels: CHANNELS.as_ptr(),
        channel_count: CHANNELS.len(),
    }
}

fn empty() -> keel_event {
    keel_event {
        kind: KEEL_EVENT_NONE,
        connection: 0,
        channel: 0,
        data: ptr::null(),
        len: 0,
        disconnect: 0,
        code: 0,
        reason: ptr::null(),
        reason_len: 0,
    }
}

fn server(key: &[u8; 32]) -> (*mut keel_server, String) {
    let mut s = ptr::null_mut();
    let bind = CString::new("127.0.0.1:0").unwrap();
    // SAFETY: valid config, NUL-terminated address, 32-byte key, out slot.
    let rc = unsafe { keel_server_create_token(&cfg(), bind.as_ptr(), key.as_ptr(), &mut s) };
    assert_eq!(rc, KEEL_OK);
    let mut buf = [0 as c_char; 64];
    // SAFETY: live server, 64-byte buffer.
    let rc = unsafe { keel_server_local_addr(s, buf.as_mut_ptr(), buf.len()) };
    assert_eq!(rc, KEEL_OK);
    // SAFETY: keel_server_local_addr wrote a NUL-terminated string.
    let addr = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    (s, addr)
}

fn token_text(key: [u8; 32], addr: &str) -> CString {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t = TokenMinter::new(key)
        .mint(&TokenSpec {
            server_addrs: vec![addr.parse().unwrap()],
            expires_at: now + 60,
            client_id: 7,
            timeout_secs: 10,
            user_data: Vec::new(),
        })
        .unwrap();
    CString::new(t.to_text()).unwrap()
}

fn client_bytes(addr: &str, token: &[u8]) -> *mut keel_client {
    let mut c = ptr::null_mut();
    let a = CString::new(addr).unwrap();
    // SAFETY: valid config, NUL-terminated address, token bytes, out slot.
    let rc = unsafe {
        keel_client_connect_token_bytes(&cfg(), a.as_ptr(), token.as_ptr(), token.len(), &mut c)
    };
    assert_eq!(rc, KEEL_OK);
    c
}

fn client(addr: &str, token: &CString) -> *mut keel_client {
    let mut c = ptr::null_mut();
    let a = CString::new(addr).unwrap();
    // SAFETY: valid config, NUL-terminated strings, out slot.
    let rc = unsafe { keel_client_connect_token(&cfg(), a.as_ptr(), token.as_ptr(), &mut c) };
    assert_eq!(rc, KEEL_OK);
    c
}

/// Polls both until the client has an event (returned) or 5 s passed.
fn next_client_event(
    s: *mut keel_server,
    c: *mut keel_client,
    seen: &mut Vec<(u32, Vec<u8>)>,
) -> keel_event {
    let start = Instant::now();
    let mut ev = empty();
    while start.elapsed() < Duration::from_secs(5) {
        // SAFETY: live server, event slot; the event's data is copied
        // before the next poll.
        while unsafe { keel_server_poll(s, 0, &mut ev) } == 1 {
            let data = if ev.len == 0 {
                Vec::new()
            } else {
                // SAFETY: data/len of a MESSAGE, valid until the next poll.
                unsafe { std::slice::from_raw_parts(ev.data, ev.len) }.to_vec()
            };
            if ev.kind == KEEL_EVENT_MESSAGE {
                // Echo it.
                // SAFETY: live server, data of data.len() bytes.
                let rc =
                    unsafe { keel_server_send(s, ev.connection, 0, data.as_ptr(), data.len()) };
                assert_eq!(rc, KEEL_OK);
            }
            seen.push((ev.kind, data));
        }
        // SAFETY: live client, event slot.
        let rc = unsafe { keel_client_poll(c, 1, &mut ev) };
        assert!(rc >= 0, "client poll failed: {rc}");
        if rc == 1 {
            return ev;
        }
    }
    panic!("no client event within 5 s; server saw {seen:?}");
}

#[test]
fn token_mode_connects_and_echoes() {
    let key = [5u8; 32];
    let (s, addr) = server(&key);
    let c = client(&addr, &token_text(key, &addr));
    let mut seen = Vec::new();
    let ev = next_client_event(s, c, &mut seen);
    assert_eq!(ev.kind, KEEL_EVENT_CONNECTED);
    let msg = b"sealed hello";
    // SAFETY: live client, msg of msg.len() bytes.
    let rc = unsafe { keel_client_send(c, 0, msg.as_ptr(), msg.len()) };
    assert_eq!(rc, KEEL_OK);
    let ev = next_client_event(s, c, &mut seen);
    assert_eq!(ev.kind, KEEL_EVENT_MESSAGE);
    // SAFETY: data/len of a MESSAGE, valid until the next poll.
    assert_eq!(unsafe { std::slice::from_raw_parts(ev.data, ev.len) }, msg);
    assert_eq!(seen[0].0, KEEL_EVENT_CONNECTED);
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        keel_client_destroy(c);
        keel_server_destroy(s);
    }
}

#[test]
fn token_bytes_connect() {
    let key = [9u8; 32];
    let (s, addr) = server(&key);
    let text = token_text(key, &addr);
    let bytes = keel_rudp_proto::ConnectToken::from_text(text.to_str().unwrap())
        .unwrap()
        .to_bytes();
    let c = client_bytes(&addr, &bytes);
    let mut seen = Vec::new();
    let ev = next_client_event(s, c, &mut seen);
    assert_eq!(ev.kind, KEEL_EVENT_CONNECTED);
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        keel_client_destroy(c);
        keel_server_destroy(s);
    }
}

#[test]
fn a_token_of_another_key_is_refused() {
    let (s, addr) = server(&[5u8; 32]);
    let c = client(&addr, &token_text([6u8; 32], &addr));
    let mut seen = Vec::new();
    let ev = next_client_event(s, c, &mut seen);
    assert_eq!(ev.kind, KEEL_EVENT_DISCONNECTED, "refused, not connected");
    assert_eq!(ev.disconnect, KEEL_DISCONNECT_REMOTE);
    assert_eq!(ev.code, keel_rudp_proto::REFUSE_TOKEN);
    assert!(seen.is_empty(), "the server saw {seen:?}");
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        keel_client_destroy(c);
        keel_server_destroy(s);
    }
}

#[test]
fn bad_arguments_are_codes_with_messages() {
    let mut c = ptr::null_mut();
    let addr = CString::new("127.0.0.1:1").unwrap();
    let junk = CString::new("not a token").unwrap();
    // SAFETY: NUL-terminated strings, out slot; NULL config on purpose.
    unsafe {
        assert_eq!(
            keel_client_connect_insecure(ptr::null(), addr.as_ptr(), &mut c),
            KEEL_ERR_NULL
        );
        assert_eq!(
            keel_client_connect_token(&cfg(), addr.as_ptr(), junk.as_ptr(), &mut c),
            KEEL_ERR_TOKEN
        );
        assert_eq!(
            keel_client_send(ptr::null_mut(), 0, ptr::null(), 0),
            KEEL_ERR_NULL
        );
    }
    assert!(c.is_null());
    let none = keel_config {
        channels: CHANNELS.as_ptr(),
        channel_count: 0,
    };
    // SAFETY: valid config (0 channels on purpose), strings, out slot.
    let rc = unsafe { keel_client_connect_insecure(&none, addr.as_ptr(), &mut c) };
    assert_eq!(rc, KEEL_ERR_CONFIG);
    for code in [
        KEEL_OK,
        KEEL_ERR_NULL,
        KEEL_ERR_TOKEN,
        KEEL_ERR_UNKNOWN_CONNECTION,
        12345,
    ] {
        // SAFETY: keel_error_message returns a static NUL-terminated string.
        let m = unsafe { CStr::from_ptr(keel_error_message(code)) };
        assert!(!m.to_bytes().is_empty());
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(keel_error_message(12345)) };
    assert_eq!(unknown.to_str().unwrap(), "unknown error code");
}

/// An event copied out of the library.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    kind: u32,
    connection: u64,
    data: Vec<u8>,
    disconnect: u32,
    code: u64,
    reason: String,
}

fn copy(ev: &keel_event) -> Seen {
    let data = if ev.len == 0 {
        Vec::new()
    } else {
        // SAFETY: data/len of a MESSAGE, valid until the next poll.
        unsafe { std::slice::from_raw_parts(ev.data, ev.len) }.to_vec()
    };
    let reason = if ev.reason.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated reason, valid until the next poll.
        unsafe { CStr::from_ptr(ev.reason) }
            .to_string_lossy()
            .into_owned()
    };
    Seen {
        kind: ev.kind,
        connection: ev.connection,
        data,
        disconnect: ev.disconnect,
        code: ev.code,
        reason,
    }
}

/// What a server and its clients saw.
#[derive(Default, Debug)]
struct Log {
    server: Vec<Seen>,
    clients: Vec<Vec<Seen>>,
}

/// Polls the server and every client until `done` holds (or fails after
/// 5 s).
fn pump(
    s: *mut keel_server,
    clients: &[*mut keel_client],
    log: &mut Log,
    mut done: impl FnMut(&Log) -> bool,
) {
    log.clients.resize(clients.len(), Vec::new());
    let start = Instant::now();
    let mut ev = empty();
    while !done(log) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not done within 5 s: {log:?}"
        );
        // SAFETY: live server, event slot; copied before the next poll.
        while unsafe { keel_server_poll(s, 0, &mut ev) } == 1 {
            log.server.push(copy(&ev));
        }
        for (i, &c) in clients.iter().enumerate() {
            // SAFETY: live client, event slot.
            while unsafe { keel_client_poll(c, 0, &mut ev) } == 1 {
                log.clients[i].push(copy(&ev));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn insecure_server() -> (*mut keel_server, String) {
    let mut s = ptr::null_mut();
    let bind = CString::new("127.0.0.1:0").unwrap();
    assert_eq!(
        // SAFETY: valid config, NUL-terminated address, out slot.
        unsafe { keel_server_create_insecure(&cfg(), bind.as_ptr(), &mut s) },
        KEEL_OK
    );
    let mut buf = [0 as c_char; 64];
    assert_eq!(
        // SAFETY: live server, 64-byte buffer.
        unsafe { keel_server_local_addr(s, buf.as_mut_ptr(), buf.len()) },
        KEEL_OK
    );
    // SAFETY: NUL-terminated by keel_server_local_addr.
    let addr = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    (s, addr)
}

fn insecure_client(addr: &str) -> *mut keel_client {
    let mut c = ptr::null_mut();
    let a = CString::new(addr).unwrap();
    assert_eq!(
        // SAFETY: valid config, NUL-terminated address, out slot.
        unsafe { keel_client_connect_insecure(&cfg(), a.as_ptr(), &mut c) },
        KEEL_OK
    );
    c
}

fn count(seen: &[Seen], kind: u32) -> usize {
    seen.iter().filter(|e| e.kind == kind).count()
}

fn connections(log: &Log) -> Vec<u64> {
    log.server
        .iter()
        .filter(|e| e.kind == KEEL_EVENT_CONNECTED)
        .map(|e| e.connection)
        .collect()
}

#[test]
fn stats_count_rtt_bytes_and_messages() {
    let (s, addr) = insecure_server();
    let c = insecure_client(&addr);
    let mut log = Log::default();
    pump(s, &[c], &mut log, |l| {
        count(&l.clients[0], KEEL_EVENT_CONNECTED) == 1
    });
    let msg = [1u8; 300];
    assert_eq!(
        // SAFETY: live client, 300 readable bytes.
        unsafe { keel_client_send(c, 0, msg.as_ptr(), msg.len()) },
        KEEL_OK
    );
    pump(s, &[c], &mut log, |l| {
        count(&l.server, KEEL_EVENT_MESSAGE) == 1
    });
    let conn = connections(&log)[0];

    let mut cs = keel_connection_stats::default();
    let size = std::mem::size_of::<keel_connection_stats>();
    // SAFETY: live client, a whole stats struct.
    assert_eq!(unsafe { keel_client_get_stats(c, &mut cs, size) }, KEEL_OK);
    assert!(
        cs.rtt_us > 0 && cs.rtt_us < 1_000_000,
        "rtt {} us",
        cs.rtt_us
    );
    assert!(cs.rtt_min_us > 0 && cs.rtt_min_us <= cs.rtt_us.max(cs.rtt_latest_us));
    assert!(
        cs.packets_sent >= 2,
        "hello and a message: {}",
        cs.packets_sent
    );
    assert!(
        cs.bytes_sent >= 1200 + 300,
        "the padded hello and the message: {}",
        cs.bytes_sent
    );
    assert!(cs.bytes_received > 0);
    assert_eq!(cs.packets_lost, 0);

    let mut ss = keel_connection_stats::default();
    assert_eq!(
        // SAFETY: live server, a whole stats struct.
        unsafe { keel_server_get_connection_stats(s, conn, &mut ss, size) },
        KEEL_OK
    );
    assert_eq!(ss.messages_delivered, 1);
    assert!(ss.bytes_received >= 300);

    let mut st = keel_server_stats::default();
    let ssize = std::mem::size_of::<keel_server_stats>();
    // SAFETY: live server, a whole stats struct.
    assert_eq!(unsafe { keel_server_get_stats(s, &mut st, ssize) }, KEEL_OK);
    assert_eq!((st.connections, st.connections_created), (1, 1));
    assert!(st.hellos >= 2, "a hello and its retry: {}", st.hellos);

    // A caller built against an older, shorter struct gets only the
    // fields it knows: the rest of its memory is not written.
    let mut old = keel_connection_stats {
        packets_sent: 777,
        ..Default::default()
    };
    // SAFETY: live client; 8 bytes of a whole struct.
    assert_eq!(unsafe { keel_client_get_stats(c, &mut old, 8) }, KEEL_OK);
    assert!(old.rtt_us > 0);
    assert_eq!(old.packets_sent, 777);
    // The sizes before kernel_drops (184 and 128 bytes) get every field
    // but it.
    let mut old = keel_connection_stats {
        kernel_drops: 777,
        ..Default::default()
    };
    // SAFETY: live client; 184 bytes of a whole struct.
    assert_eq!(unsafe { keel_client_get_stats(c, &mut old, 184) }, KEEL_OK);
    assert_eq!((old.kernel_drops, old.packets_sent > 0), (777, true));
    let mut old = keel_server_stats {
        kernel_drops: 777,
        ..Default::default()
    };
    // SAFETY: live server; 128 bytes of a whole struct.
    assert_eq!(unsafe { keel_server_get_stats(s, &mut old, 128) }, KEEL_OK);
    assert_eq!((old.kernel_drops, old.hellos > 0), (777, true));
    assert_eq!(ssize, 136, "keel_server_stats grew: update the bindings");
    assert_eq!(size, 192, "keel_connection_stats grew: update the bindings");
    // SAFETY: live server, NULL out on purpose; a handle never given out.
    unsafe {
        assert_eq!(
            keel_client_get_stats(c, ptr::null_mut(), size),
            KEEL_ERR_NULL
        );
        assert_eq!(
            keel_server_get_connection_stats(s, conn + (1 << 32), &mut ss, size),
            KEEL_ERR_UNKNOWN_CONNECTION
        );
        keel_client_destroy(c);
        keel_server_destroy(s);
    }
}

#[test]
fn broadcast_reaches_every_connected_client() {
    let (s, addr) = insecure_server();
    let clients: Vec<_> = (0..3).map(|_| insecure_client(&addr)).collect();
    let mut log = Log::default();
    pump(s, &clients, &mut log, |l| {
        count(&l.server, KEEL_EVENT_CONNECTED) == 3
    });
    let mut queued = 0usize;
    let msg = b"round starts";
    assert_eq!(
        // SAFETY: live server, msg bytes, out slot.
        unsafe { keel_server_broadcast(s, 0, msg.as_ptr(), msg.len(), &mut queued) },
        KEEL_OK
    );
    assert_eq!(queued, 3);
    pump(s, &clients, &mut log, |l| {
        l.clients.iter().all(|c| c.iter().any(|e| e.data == msg))
    });
    // An unknown channel queues nothing and says why.
    assert_eq!(
        // SAFETY: live server, msg bytes, NULL out allowed.
        unsafe { keel_server_broadcast(s, 9, msg.as_ptr(), msg.len(), ptr::null_mut()) },
        KEEL_ERR_UNKNOWN_CHANNEL
    );
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        for c in clients {
            keel_client_destroy(c);
        }
        keel_server_destroy(s);
    }
}

#[test]
fn stop_closes_every_connection_then_reports_stopped_once() {
    let (s, addr) = insecure_server();
    let clients: Vec<_> = (0..2).map(|_| insecure_client(&addr)).collect();
    let mut log = Log::default();
    pump(s, &clients, &mut log, |l| {
        count(&l.server, KEEL_EVENT_CONNECTED) == 2
    });
    let conn = connections(&log)[0];
    let mut state = 99;
    assert_eq!(
        // SAFETY: live server, out slot.
        unsafe { keel_server_connection_state(s, conn, &mut state) },
        KEEL_OK
    );
    assert_eq!(state, KEEL_STATE_CONNECTED);
    let why = CString::new("maintenance").unwrap();
    assert_eq!(
        // SAFETY: live server, NUL-terminated reason.
        unsafe { keel_server_stop(s, KEEL_CLOSE_STOPPED, why.as_ptr()) },
        KEEL_OK
    );
    assert_eq!(
        // SAFETY: as above.
        unsafe { keel_server_connection_state(s, conn, &mut state) },
        KEEL_OK
    );
    assert_eq!(state, KEEL_STATE_CLOSING);
    pump(s, &clients, &mut log, |l| {
        count(&l.server, KEEL_EVENT_STOPPED) == 1
    });
    for c in &log.clients {
        let d = c
            .iter()
            .find(|e| e.kind == KEEL_EVENT_DISCONNECTED)
            .expect("closed");
        assert_eq!(
            (d.disconnect, d.code, d.reason.as_str()),
            (KEEL_DISCONNECT_REMOTE, KEEL_CLOSE_STOPPED, "maintenance")
        );
    }
    let last = log.server.last().unwrap();
    assert_eq!(last.kind, KEEL_EVENT_STOPPED, "STOPPED comes last");
    assert_eq!(count(&log.server, KEEL_EVENT_DISCONNECTED), 2);
    // SAFETY: live server (NULL-safe count).
    assert_eq!(unsafe { keel_server_connection_count(s) }, 0);
    let mut ev = empty();
    assert_eq!(
        // SAFETY: live server, event slot.
        unsafe { keel_server_poll(s, 0, &mut ev) },
        0,
        "stopped: nothing more"
    );
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        for c in clients {
            keel_client_destroy(c);
        }
        keel_server_destroy(s);
    }
}

#[test]
fn a_stale_handle_never_reaches_the_next_connection() {
    let (s, addr) = insecure_server();
    let first = insecure_client(&addr);
    let mut log = Log::default();
    pump(s, &[first], &mut log, |l| {
        count(&l.server, KEEL_EVENT_CONNECTED) == 1
    });
    let old = connections(&log)[0];
    let bye = CString::new("bye").unwrap();
    assert_eq!(
        // SAFETY: live client, NUL-terminated reason.
        unsafe { keel_client_close(first, 1, bye.as_ptr()) },
        KEEL_OK
    );
    pump(s, &[first], &mut log, |l| {
        count(&l.server, KEEL_EVENT_DISCONNECTED) == 1
            && count(&l.clients[0], KEEL_EVENT_DISCONNECTED) == 1
    });
    // The server waits out stray packets before it frees the slot.
    // SAFETY: live server.
    pump(
        s,
        &[first],
        &mut log,
        |_| unsafe { keel_server_connection_count(s) } == 0,
    );
    let second = insecure_client(&addr);
    let mut log2 = Log::default();
    pump(s, &[second], &mut log2, |l| {
        count(&l.server, KEEL_EVENT_CONNECTED) == 1
    });
    let new = connections(&log2)[0];
    assert_eq!(new & 0xffff_ffff, old & 0xffff_ffff, "the slot was reused");
    assert_ne!(new, old);
    let msg = b"for the first player only";
    // SAFETY: live server, msg bytes.
    unsafe {
        assert_eq!(
            keel_server_send(s, old, 0, msg.as_ptr(), msg.len()),
            KEEL_ERR_UNKNOWN_CONNECTION
        );
        let mut state = 0;
        assert_eq!(
            keel_server_connection_state(s, old, &mut state),
            KEEL_ERR_UNKNOWN_CONNECTION
        );
        assert_eq!(
            keel_server_send(s, new, 0, msg.as_ptr(), msg.len()),
            KEEL_OK
        );
    }
    pump(s, &[second], &mut log2, |l| {
        count(&l.clients[0], KEEL_EVENT_MESSAGE) == 1
    });
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        keel_client_destroy(first);
        keel_client_destroy(second);
        keel_server_destroy(s);
    }
}

/// A real client's first hello, caught by a plain socket standing in for
/// the server.
fn a_hello() -> Vec<u8> {
    let fake = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    fake.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let c = insecure_client(&fake.local_addr().unwrap().to_string());
    let mut ev = empty();
    // SAFETY: live client, event slot.
    assert!(unsafe { keel_client_poll(c, 0, &mut ev) } >= 0);
    let mut buf = [0u8; 2048];
    let (n, _) = fake.recv_from(&mut buf).expect("the client's hello");
    // SAFETY: from connect, destroyed once.
    unsafe { keel_client_destroy(c) };
    buf[..n].to_vec()
}

/// Connection attempts all through a stop: copies of a hello from four
/// sockets (up to 20,000, until the stop is over) and eight real clients
/// that connect after keel_server_stop. The stop still ends, once, by its
/// deadline (the first client, never polled again, holds it open until
/// then); every poll succeeds; the copies cost the server no connection
/// (each gets a stateless retry) but are counted as hellos (those the
/// kernel had room for: about half; the rest are in kernel_drops, see
/// every_hello_flooded_through_the_stop_is_read_or_counted_as_a_kernel_drop);
/// each late client is let in and
/// closed at once with the stop's code and reason, or refused; and after
/// STOPPED the server reads nothing more.
#[test]
fn a_flood_of_hellos_through_the_stop_is_counted_and_the_stop_ends() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const LATE: usize = 8;
    let hello = a_hello();
    let (s, addr) = insecure_server();
    let first = insecure_client(&addr);
    let mut log = Log::default();
    pump(s, &[first], &mut log, |l| {
        count(&l.server, KEEL_EVENT_CONNECTED) == 1
    });
    let done = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flood = {
        let (done, sent, to) = (done.clone(), sent.clone(), addr.clone());
        std::thread::spawn(move || {
            let socks: Vec<_> = (0..4)
                .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            let start = Instant::now();
            for i in 0..20_000 {
                if done.load(Ordering::Relaxed) || start.elapsed() > Duration::from_secs(8) {
                    break;
                }
                if socks[i % 4].send_to(&hello, &to).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                if i % 64 == 63 {
                    std::thread::yield_now();
                }
            }
        })
    };
    let why = CString::new("maintenance").unwrap();
    assert_eq!(
        // SAFETY: live server, NUL-terminated reason.
        unsafe { keel_server_stop(s, KEEL_CLOSE_STOPPED, why.as_ptr()) },
        KEEL_OK
    );
    let stopped_at = Instant::now();
    let late: Vec<_> = (0..LATE).map(|_| insecure_client(&addr)).collect();
    let mut server = Vec::new();
    let mut clients: Vec<Vec<Seen>> = vec![Vec::new(); LATE];
    let mut ev = empty();
    while count(&server, KEEL_EVENT_STOPPED) == 0 {
        // close_timeout (2 s) and the stop's second after it, and margin.
        assert!(
            stopped_at.elapsed() < Duration::from_secs(6),
            "no STOPPED: {server:?}"
        );
        loop {
            // SAFETY: live server, event slot; copied before the next poll.
            let rc = unsafe { keel_server_poll(s, 1, &mut ev) };
            assert!(rc >= 0, "server poll failed: {rc}");
            if rc == 0 {
                break;
            }
            server.push(copy(&ev));
        }
        for (i, &c) in late.iter().enumerate() {
            // SAFETY: live client, event slot.
            while unsafe { keel_client_poll(c, 0, &mut ev) } == 1 {
                clients[i].push(copy(&ev));
            }
        }
    }
    let mut st = keel_server_stats::default();
    let size = std::mem::size_of::<keel_server_stats>();
    // SAFETY: live server, a whole stats struct.
    assert_eq!(unsafe { keel_server_get_stats(s, &mut st, size) }, KEEL_OK);
    let show = |st: &keel_server_stats| {
        format!(
            "hellos {}, connections {} (created {}, removed {}), refused {} \
             (rate {}, address {})",
            st.hellos,
            st.connections,
            st.connections_created,
            st.connections_removed,
            st.handshakes_refused,
            st.refused_rate_limit,
            st.refused_address_limit
        )
    };
    println!(
        "{} copies sent, STOPPED after {:?}; {}; late clients: {clients:?}",
        sent.load(Ordering::Relaxed),
        stopped_at.elapsed(),
        show(&st)
    );
    assert_eq!(count(&server, KEEL_EVENT_STOPPED), 1);
    assert_eq!(server.last().unwrap().kind, KEEL_EVENT_STOPPED);
    // The copies made no connection: the first and the late ones only.
    assert!(
        (1..=1 + LATE as u64).contains(&st.connections_created),
        "{}",
        show(&st)
    );
    // Counted: more hellos than the real clients sent (2 each, a hello
    // and its retry, and a few resends at most).
    assert!(st.hellos > 4 * (1 + LATE as u64), "{}", show(&st));
    assert_eq!(
        st.connections,
        st.connections_created - st.connections_removed,
        "{}",
        show(&st)
    );
    // The late clients were let in and closed at once with the stop's code
    // and reason (or refused, by an admission limit): none is left waiting,
    // as the first client holds the stop open for its 2 s.
    for (i, c) in clients.iter().enumerate() {
        let d = c
            .iter()
            .find(|e| e.kind == KEEL_EVENT_DISCONNECTED)
            .unwrap_or_else(|| panic!("late client {i} never ended: {c:?}"));
        if d.code == KEEL_CLOSE_STOPPED {
            assert_eq!(d.reason, "maintenance", "late client {i}: {c:?}");
        }
        assert_eq!(
            d.disconnect, KEEL_DISCONNECT_REMOTE,
            "late client {i}: {c:?}"
        );
    }
    // Stopped: nothing more is read, however much arrives.
    let hellos = st.hellos;
    for _ in 0..3 {
        // SAFETY: live server, event slot.
        assert_eq!(unsafe { keel_server_poll(s, 10, &mut ev) }, 0);
    }
    // SAFETY: as above.
    assert_eq!(unsafe { keel_server_get_stats(s, &mut st, size) }, KEEL_OK);
    assert_eq!(st.hellos, hellos, "read after STOPPED");
    done.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        keel_client_destroy(first);
        for c in late {
            keel_client_destroy(c);
        }
        keel_server_destroy(s);
    }
}

/// Every copy of a hello flooded through a stop is counted: as a hello
/// when the server read it, in `kernel_drops` when the kernel dropped it
/// for the full receive buffer. The flood (up to 20,000 copies from four
/// sockets, while the first client holds the stop open) ends before
/// STOPPED, and the server reads all that is queued before it reports
/// STOPPED, so hellos + kernel_drops equal the copies sent exactly.
/// Before kernel_drops, about half the copies were counted nowhere.
#[cfg(target_os = "linux")]
#[test]
fn every_hello_flooded_through_the_stop_is_read_or_counted_as_a_kernel_drop() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let hello = a_hello();
    let (s, addr) = insecure_server();
    let first = insecure_client(&addr);
    let mut log = Log::default();
    pump(s, &[first], &mut log, |l| {
        count(&l.server, KEEL_EVENT_CONNECTED) == 1
    });
    let size = std::mem::size_of::<keel_server_stats>();
    let stats = || {
        let mut st = keel_server_stats::default();
        // SAFETY: live server, a whole stats struct.
        assert_eq!(unsafe { keel_server_get_stats(s, &mut st, size) }, KEEL_OK);
        st
    };
    let before = stats();
    // The first client is never polled again: it sends nothing more.
    let done = Arc::new(AtomicBool::new(false));
    let flood = {
        let (done, to) = (done.clone(), addr.clone());
        std::thread::spawn(move || {
            let socks: Vec<_> = (0..4)
                .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            let start = Instant::now();
            let mut sent = 0u64;
            for i in 0..20_000 {
                if done.load(Ordering::Relaxed) || start.elapsed() > Duration::from_secs(8) {
                    break;
                }
                if socks[i % 4].send_to(&hello, &to).is_ok() {
                    sent += 1;
                }
                if i % 64 == 63 {
                    std::thread::yield_now();
                }
            }
            sent
        })
    };
    let why = CString::new("maintenance").unwrap();
    assert_eq!(
        // SAFETY: live server, NUL-terminated reason.
        unsafe { keel_server_stop(s, KEEL_CLOSE_STOPPED, why.as_ptr()) },
        KEEL_OK
    );
    let stopped_at = Instant::now();
    let mut flood = Some(flood);
    let mut sent = 0;
    let mut stopped = 0;
    let mut ev = empty();
    while stopped == 0 {
        assert!(stopped_at.elapsed() < Duration::from_secs(6), "no STOPPED");
        // SAFETY: live server, event slot.
        let rc = unsafe { keel_server_poll(s, 1, &mut ev) };
        assert!(rc >= 0, "server poll failed: {rc}");
        if rc == 1 && ev.kind == KEEL_EVENT_STOPPED {
            stopped += 1;
        }
        // Half the stop (the first client holds it for close_timeout, 2 s):
        // the flood is over well before STOPPED.
        if flood.is_some() && stopped_at.elapsed() > Duration::from_millis(1000) {
            assert_eq!(stopped, 0, "STOPPED before the flood ended");
            done.store(true, Ordering::Relaxed);
            sent = flood.take().unwrap().join().unwrap();
        }
    }
    assert!(flood.is_none(), "STOPPED before the flood ended");
    let st = stats();
    let hellos = st.hellos - before.hellos;
    println!(
        "{sent} copies sent: {hellos} hellos, {} kernel drops",
        st.kernel_drops
    );
    assert!(st.kernel_drops > 0, "the flood never filled the buffer");
    assert_eq!(
        hellos + st.kernel_drops - before.kernel_drops,
        sent,
        "every copy read or counted ({hellos} hellos, {} kernel drops)",
        st.kernel_drops
    );
    // SAFETY: handles from create/connect, destroyed once.
    unsafe {
        keel_client_destroy(first);
        keel_server_destroy(s);
    }
}

/// A client's socket counts what the kernel dropped for its full receive
/// buffer too: 5,000 datagrams from the server's address while the client
/// is not polled overflow it, and `kernel_drops` counts the overflow (read
/// from the socket's counter before any poll; unchanged by the polls that
/// drain the rest). Without the counter: 0.
#[cfg(target_os = "linux")]
#[test]
fn a_client_counts_the_datagrams_its_full_receive_buffer_dropped() {
    const SENT: u64 = 5_000;
    let fake = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    fake.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let c = insecure_client(&fake.local_addr().unwrap().to_string());
    let mut ev = empty();
    // SAFETY: live client, event slot.
    assert!(unsafe { keel_client_poll(c, 0, &mut ev) } >= 0);
    let mut buf = [0u8; 2048];
    let (_, client) = fake.recv_from(&mut buf).expect("the client's hello");
    let junk = [0xa5u8; 1000];
    for _ in 0..SENT {
        fake.send_to(&junk, client).unwrap();
    }
    let size = std::mem::size_of::<keel_connection_stats>();
    let stats = || {
        let mut st = keel_connection_stats::default();
        // SAFETY: live client, a whole stats struct.
        assert_eq!(unsafe { keel_client_get_stats(c, &mut st, size) }, KEEL_OK);
        st
    };
    let dropped = stats().kernel_drops;
    println!("{SENT} sent to the client: {dropped} kernel drops");
    assert!(
        dropped > 0 && dropped < SENT,
        "{dropped} of {SENT} counted as kernel drops"
    );
    for _ in 0..3 {
        // SAFETY: live client, event slot.
        assert!(unsafe { keel_client_poll(c, 0, &mut ev) } >= 0);
    }
    assert_eq!(stats().kernel_drops, dropped, "drops after the flood ended");
    // SAFETY: from connect, destroyed once.
    unsafe { keel_client_destroy(c) };
}
