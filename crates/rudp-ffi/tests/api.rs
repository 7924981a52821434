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
