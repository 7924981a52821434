//! What one idle connection holds: a pair of sans-IO connections (both
//! ends, as the scale benchmark's RSS per connection counts them) after a
//! few echoes of 400-byte reliable-ordered messages at a tick, measured in
//! heap bytes by a counting global allocator, is at most
//! [`MAX_PAIR_BYTES`]. The only test in this binary, so no other test's
//! allocations interfere.

use std::time::{Duration, Instant};

use keel_rudp_proto::{ChannelConfig, ChannelKind, Config, Connection, ConnectionId, Event, Side};
use keel_testkit::{live_bytes, CountingAllocator};

/// The most heap an idle pair may hold (with its two structs): KCP's
/// whole process holds 23-24 KiB per connection in the scale benchmark;
/// keel-rudp's pair held 47 KiB on the heap before the scratch buffers
/// went per thread and the tables grew to use.
const MAX_PAIR_BYTES: usize = 12 * 1024;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Carries every datagram `from` has to `to` at `now`.
fn carry(from: &mut Connection, to: &mut Connection, now: Instant, buf: &mut [u8]) {
    for _ in 0..64 {
        let Some(n) = from.poll_transmit(now, buf) else {
            return;
        };
        to.handle_datagram(now, &buf[..n]);
    }
}

#[test]
fn idle_connection_pair_footprint() {
    let mut config = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
    // As keel-bench's scale case sets them (64 messages of 400 bytes, x4).
    config.max_send_buffer = config.max_send_buffer.max(4 * 64 * 400);
    config.max_recv_buffer = config.max_recv_buffer.max(4 * 64 * 400);
    let mut buf = vec![0u8; 1500];
    let msg = vec![7u8; 400];
    let mut now = Instant::now();
    const PAIRS: usize = 8;
    let before = live_bytes();
    let mut pairs = Vec::with_capacity(PAIRS);
    for i in 0..PAIRS {
        let cid = ConnectionId([i as u8, 1, 2, 3, 4, 5, 6, 7]);
        let a = Connection::established(config.clone(), Side::Client, cid, now).unwrap();
        let b = Connection::established(config.clone(), Side::Server, cid, now).unwrap();
        pairs.push((a, b));
    }
    let created = live_bytes();
    for _ in 0..100 {
        now += Duration::from_millis(50);
        for (a, b) in &mut pairs {
            a.send(0, &msg).unwrap();
            carry(a, b, now, &mut buf);
            while let Some(e) = b.poll_event() {
                if let Event::Message { channel, data } = e {
                    b.send(channel, &data).unwrap();
                }
            }
            carry(b, a, now, &mut buf);
            while a.poll_event().is_some() {}
            a.handle_timeout(now);
            b.handle_timeout(now);
            carry(a, b, now, &mut buf);
            carry(b, a, now, &mut buf);
        }
    }
    let after = live_bytes();
    let per_created = (created - before) as usize / PAIRS;
    let per_pair = (after - before) as usize / PAIRS;
    eprintln!(
        "size_of Connection {} B; a pair: {per_created} B created, {per_pair} B after 100 echoes",
        std::mem::size_of::<Connection>()
    );
    assert!(
        per_pair <= MAX_PAIR_BYTES,
        "an idle connection pair holds {per_pair} B on the heap, more than {MAX_PAIR_BYTES} B"
    );
    drop(pairs);
}
