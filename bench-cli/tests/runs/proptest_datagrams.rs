//! Datagrams that are not keel-bench messages, against real sockets on
//! loopback: arbitrary bytes, short, wrong magic, wrong phase, wrong client,
//! stale or future sequence, truncated, corrupted, oversized and foreign.
//! Each is counted where the benchmark counts it, and neither the echo
//! server nor a client ever crashes: a legitimate message still completes
//! after every case, and the runtime stops without a handler failure.
//!
//! Case counts are modest (a few seconds in all); a failure is reported as
//! generated (no shrinking: the sockets carry state from case to case) and
//! not persisted to a file.

use std::cell::{Cell, RefCell};
use std::net::UdpSocket;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use keel_bench::client::{BenchClient, ClientTally, DrainLatch, Schedule};
use keel_bench::echo::{EchoMode, EchoStats};
use keel_bench::flags::IoModel;
use keel_bench::loopback::{runtime_for, start_server, EchoServerSpec, SessionPolicy};
use keel_bench::message::{
    decode_header, encode, sockperf_classify, Phase, SockperfVerdict, HEADER_LEN, MAGIC,
};
use keel_udp::{Client, ClientConfig, EndpointConfig};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Bound of every wait for a datagram (loopback answers in microseconds).
const WAIT: Duration = Duration::from_secs(5);

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        // The sockets and the client carry state from case to case, so a
        // shrunk replay would not mean what it says: report the failing
        // case as generated.
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    })
}

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// Bytes of any length up to `max`, mostly small.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => vec(any::<u8>(), 0..=1500),
        1 => vec(any::<u8>(), 0..=max),
    ]
}

/// Header-shaped garbage the server must refuse: short, wrong magic or an
/// unknown phase tag, with arbitrary bytes after it.
fn bad_header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..HEADER_LEN),
        (any::<[u8; 3]>(), vec(any::<u8>(), 13..200))
            .prop_filter("not the magic", |(m, _)| *m != MAGIC)
            .prop_map(|(m, rest)| [&m[..], &rest].concat()),
        (2u8..=255, vec(any::<u8>(), 12..200)).prop_map(|(tag, rest)| {
            let mut v = MAGIC.to_vec();
            v.push(tag);
            v.extend(rest);
            v
        }),
    ]
}

#[test]
fn echo_server_counts_every_invalid_datagram_and_keeps_echoing() {
    let rt = runtime_for(IoModel::Shared, 1).unwrap();
    let stats = Arc::new(EchoStats::default());
    let spec = EchoServerSpec {
        bind: "127.0.0.1:0".parse().unwrap(),
        lanes: 1,
        batch: 64,
        receive_buffer: None,
        work: 0,
        mode: EchoMode::Bench,
        steering: keel_udp::LaneSteering::KernelHash,
        sessions: SessionPolicy::default(),
        dont_fragment: false,
    };
    let server = start_server(&rt, &spec, stats.clone()).unwrap();
    let target = server.local_addr();
    let player = socket();
    let stranger = socket();
    let expected_invalid = Cell::new(0u64);
    let seq = Cell::new(0u64);
    let datagram = prop_oneof![
        3 => bytes(65_507),
        2 => bad_header(),
        // A valid header with garbage after it: the server checks only the
        // header (the client checks the fill), so this one is echoed.
        1 => (0u8..=1, any::<u32>(), any::<u64>(), vec(any::<u8>(), 0..300)).prop_map(
            |(phase, client, seq, rest)| {
                let mut v = MAGIC.to_vec();
                v.push(phase);
                v.extend(client.to_be_bytes());
                v.extend(seq.to_be_bytes());
                v.extend(rest);
                v
            }
        ),
    ];
    // Each case: a few datagrams, each from the player (an established
    // session) or a stranger (a new one), then a legitimate message.
    let case = vec((any::<bool>(), datagram), 1..4);
    let mut buf = vec![0u8; 65_536];
    let buf = RefCell::new(&mut buf);
    runner(64)
        .run(&case, |datagrams| {
            let mut buf = buf.borrow_mut();
            for (from_player, data) in &datagrams {
                let sock = if *from_player { &player } else { &stranger };
                sock.send_to(data, target).unwrap();
                if decode_header(data).is_err() {
                    expected_invalid.set(expected_invalid.get() + 1);
                } else {
                    // Echoed unchanged, to the sender, in order.
                    let (n, from) = sock
                        .recv_from(&mut buf[..])
                        .expect("echo of a valid header");
                    prop_assert_eq!(from, target);
                    prop_assert_eq!(&buf[..n], &data[..]);
                }
            }
            let mut msg = vec![0u8; 64];
            encode(&mut msg, Phase::Measured, 1, seq.get());
            seq.set(seq.get() + 1);
            player.send_to(&msg, target).unwrap();
            let (n, _) = player
                .recv_from(&mut buf[..])
                .expect("echo of the legitimate message");
            prop_assert_eq!(&buf[..n], &msg[..]);
            // The legitimate echo came after every datagram before it was
            // handled (one lane, in order): the count is settled.
            prop_assert_eq!(
                stats.invalid.load(Ordering::Relaxed),
                expected_invalid.get()
            );
            Ok(())
        })
        .unwrap();
    let k = server.counters();
    assert_eq!(k.truncated, 0, "{k:?}");
    assert_eq!(k.sessions_opened, 2, "{k:?}");
    assert!(expected_invalid.get() > 0);
    server.stop();
    rt.stop().expect("no handler failed");
}

#[test]
fn sockperf_echo_mode_classifies_arbitrary_datagrams_without_crashing() {
    let rt = runtime_for(IoModel::Shared, 1).unwrap();
    let stats = Arc::new(EchoStats::default());
    let spec = EchoServerSpec {
        bind: "127.0.0.1:0".parse().unwrap(),
        lanes: 1,
        batch: 64,
        receive_buffer: None,
        work: 0,
        mode: EchoMode::Sockperf,
        steering: keel_udp::LaneSteering::KernelHash,
        sessions: SessionPolicy::default(),
        dont_fragment: false,
    };
    let server = start_server(&rt, &spec, stats.clone()).unwrap();
    let target = server.local_addr();
    let sock = socket();
    let expected_invalid = Cell::new(0u64);
    let seq = Cell::new(0u64);
    // Arbitrary bytes, and sockperf-shaped ones with arbitrary flags and
    // length fields (so every verdict comes up).
    let datagram = prop_oneof![
        bytes(2048),
        (
            any::<u64>(),
            0u16..8,
            any::<bool>(),
            vec(any::<u8>(), 0..100)
        )
            .prop_map(|(seq, flags, right_length, rest)| {
                let len = 14 + rest.len();
                let mut v = seq.to_be_bytes().to_vec();
                v.extend(flags.to_be_bytes());
                let field = if right_length {
                    len as u32
                } else {
                    len as u32 + 1
                };
                v.extend(field.to_be_bytes());
                v.extend(rest);
                v
            }),
    ];
    let mut buf = vec![0u8; 4096];
    let buf = RefCell::new(&mut buf);
    runner(64)
        .run(&vec(datagram, 1..4), |datagrams| {
            let mut buf = buf.borrow_mut();
            for data in &datagrams {
                sock.send_to(data, target).unwrap();
                match sockperf_classify(data) {
                    SockperfVerdict::Invalid => expected_invalid.set(expected_invalid.get() + 1),
                    SockperfVerdict::NoReply => {}
                    SockperfVerdict::Reply => {
                        let n = sock.recv(&mut buf[..]).expect("sockperf reply");
                        prop_assert_eq!(n, data.len());
                        // Same bytes but the client flag (bit 0 of byte 9).
                        prop_assert_eq!(buf[9], data[9] & !1);
                        prop_assert_eq!(&buf[..9], &data[..9]);
                        prop_assert_eq!(&buf[10..n], &data[10..]);
                    }
                }
            }
            // A ping that must be answered closes the case.
            let mut ping = seq.get().to_be_bytes().to_vec();
            seq.set(seq.get() + 1);
            ping.extend(3u16.to_be_bytes());
            ping.extend(64u32.to_be_bytes());
            ping.resize(64, 0xAB);
            sock.send_to(&ping, target).unwrap();
            let n = sock.recv(&mut buf[..]).expect("reply to a ping");
            prop_assert_eq!(n, 64);
            prop_assert_eq!(&buf[..8], &ping[..8]);
            prop_assert_eq!(
                stats.invalid.load(Ordering::Relaxed),
                expected_invalid.get()
            );
            Ok(())
        })
        .unwrap();
    server.stop();
    rt.stop().expect("no handler failed");
}

/// What a malicious or broken server sends a client instead of (or besides)
/// the echo it waits for.
#[derive(Clone)]
enum Bad {
    /// Arbitrary bytes (filtered: not a header of this client).
    Bytes(Vec<u8>),
    /// Shorter than the header.
    Short(Vec<u8>),
    /// The outstanding message with another magic.
    WrongMagic([u8; 3]),
    /// The outstanding message with an unknown phase tag.
    UnknownPhase(u8),
    /// A correct message of another client.
    WrongClient(u32),
    /// A correct message of this client, already completed.
    Stale,
    /// A correct message of this client, never sent (sequence ahead).
    Future(u64),
    /// Larger than the client's receive slot: cut by the kernel, dropped
    /// and counted by keel (`truncated`).
    Oversized(usize),
    /// From another socket: the client's socket is connected, so the kernel
    /// never delivers it.
    Foreign(Vec<u8>),
    /// The outstanding message cut to this length (>= the header): a
    /// content error that completes the message.
    Truncated(usize),
    /// The outstanding message with one fill byte changed: a content error.
    Corrupted(usize, u8),
    /// The outstanding message with the warm-up phase tag: a content error.
    WrongPhase,
}

/// Byte vectors shown by length and first bytes, so a failure stays
/// readable.
impl std::fmt::Debug for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |v: &Vec<u8>| format!("{} bytes {:02x?}..", v.len(), &v[..v.len().min(24)]);
        match self {
            Bad::Bytes(v) => write!(f, "Bytes({})", short(v)),
            Bad::Short(v) => write!(f, "Short({})", short(v)),
            Bad::Foreign(v) => write!(f, "Foreign({})", short(v)),
            Bad::WrongMagic(m) => write!(f, "WrongMagic({m:02x?})"),
            Bad::UnknownPhase(t) => write!(f, "UnknownPhase({t})"),
            Bad::WrongClient(c) => write!(f, "WrongClient({c})"),
            Bad::Stale => write!(f, "Stale"),
            Bad::Future(a) => write!(f, "Future(+{a})"),
            Bad::Oversized(n) => write!(f, "Oversized({n})"),
            Bad::Truncated(n) => write!(f, "Truncated({n})"),
            Bad::Corrupted(i, x) => write!(f, "Corrupted(byte {i} ^ {x:#04x})"),
            Bad::WrongPhase => write!(f, "WrongPhase"),
        }
    }
}

const CLIENT_ID: u32 = 7;
const PAYLOAD: usize = 64;
/// The client's receive slot, as loopback.rs sizes it for this payload.
const SLOT: usize = 2048;

fn bad() -> impl Strategy<Value = Bad> {
    prop_oneof![
        4 => bytes(SLOT)
            .prop_filter("not a header of this client", |b| {
                decode_header(b).map_or(true, |h| h.client != CLIENT_ID)
            })
            .prop_map(Bad::Bytes),
        1 => vec(any::<u8>(), 0..HEADER_LEN).prop_map(Bad::Short),
        1 => any::<[u8; 3]>()
            .prop_filter("not the magic", |m| *m != MAGIC)
            .prop_map(Bad::WrongMagic),
        1 => (2u8..=255).prop_map(Bad::UnknownPhase),
        1 => any::<u32>()
            .prop_filter("another client", |c| *c != CLIENT_ID)
            .prop_map(Bad::WrongClient),
        1 => Just(Bad::Stale),
        1 => (1u64..1_000_000).prop_map(Bad::Future),
        1 => (SLOT + 1..=65_507).prop_map(Bad::Oversized),
        1 => bytes(256).prop_map(Bad::Foreign),
        1 => (HEADER_LEN..PAYLOAD).prop_map(Bad::Truncated),
        1 => (HEADER_LEN..PAYLOAD, 1u8..=255).prop_map(|(i, x)| Bad::Corrupted(i, x)),
        1 => Just(Bad::WrongPhase),
    ]
}

/// The client side: the peer knows the message the client has outstanding
/// (window 1), sends bad datagrams, then echoes the outstanding message;
/// the client's next message proves it handled everything before.
#[test]
fn bench_client_counts_every_bad_datagram_and_keeps_its_window() {
    let rt = runtime_for(IoModel::Shared, 1).unwrap();
    let peer = socket();
    let foreign = socket();
    let latch = Arc::new(DrainLatch::default());
    let last_words = Arc::new(Mutex::new(None));
    let rtt = Arc::new(keel_bench::stats::RttShards::new(1));
    let handler = BenchClient::new(CLIENT_ID, PAYLOAD, 1, latch, rtt, last_words.clone());
    // The endpoint loopback.rs gives a client of this payload.
    let config = ClientConfig {
        local: None,
        endpoint: EndpointConfig {
            max_datagram: SLOT,
            ..EndpointConfig::default()
        },
    };
    let client = Client::connect(
        rt.next_reactor(),
        peer.local_addr().unwrap(),
        config,
        handler,
    )
    .unwrap();
    let now = Instant::now();
    let schedule = Schedule {
        measure_start: now,
        measure_end: now + Duration::from_secs(600),
        loss_timeout: None,
    };
    let _ = client.post(move |h, ctx| h.start(ctx, schedule));

    let mut first = vec![0u8; 4096];
    let (n, client_addr) = peer
        .recv_from(&mut first)
        .expect("the client's first message");
    let outstanding = RefCell::new(first[..n].to_vec());
    let completed = RefCell::new(Vec::<Vec<u8>>::new());
    let expected = RefCell::new(ClientTally::default());
    let expected_truncated = Cell::new(0u64);

    let tally = |client: &Client<BenchClient>| -> ClientTally {
        let (tx, rx) = mpsc::channel();
        assert!(client
            .post(move |h, _| {
                let _ = tx.send(h.tally.clone());
            })
            .is_ok());
        rx.recv_timeout(WAIT).expect("the client answers")
    };
    // Receives the client's next message (it sends one per completion).
    let next = |what: &str| -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = peer
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("the client's next message after {what}: {e}"));
        buf.truncate(n);
        buf
    };

    runner(96)
        .run(&vec(bad(), 1..4), |case| {
            for b in &case {
                let cur = outstanding.borrow().clone();
                let h = decode_header(&cur).unwrap();
                let mut e = expected.borrow_mut();
                let mut consumed = false;
                match b {
                    Bad::Bytes(v) | Bad::Short(v) => {
                        peer.send_to(v, client_addr).unwrap();
                        e.unexpected += 1;
                    }
                    Bad::WrongMagic(m) => {
                        let mut v = cur.clone();
                        v[..3].copy_from_slice(m);
                        peer.send_to(&v, client_addr).unwrap();
                        e.unexpected += 1;
                    }
                    Bad::UnknownPhase(tag) => {
                        let mut v = cur.clone();
                        v[3] = *tag;
                        peer.send_to(&v, client_addr).unwrap();
                        e.unexpected += 1;
                    }
                    Bad::WrongClient(c) => {
                        let mut v = vec![0u8; PAYLOAD];
                        encode(&mut v, Phase::Measured, *c, h.seq);
                        peer.send_to(&v, client_addr).unwrap();
                        e.unexpected += 1;
                    }
                    Bad::Stale => {
                        // Before any completion there is nothing stale yet:
                        // sequence 0 is outstanding, so replay a future one.
                        let v = completed.borrow().last().cloned().unwrap_or_else(|| {
                            let mut v = vec![0u8; PAYLOAD];
                            encode(&mut v, Phase::Measured, CLIENT_ID, h.seq + 1);
                            v
                        });
                        peer.send_to(&v, client_addr).unwrap();
                        e.unexpected += 1;
                    }
                    Bad::Future(ahead) => {
                        let mut v = vec![0u8; PAYLOAD];
                        encode(&mut v, Phase::Measured, CLIENT_ID, h.seq + ahead);
                        peer.send_to(&v, client_addr).unwrap();
                        e.unexpected += 1;
                    }
                    Bad::Oversized(len) => {
                        peer.send_to(&vec![0xEE; *len], client_addr).unwrap();
                        expected_truncated.set(expected_truncated.get() + 1);
                    }
                    Bad::Foreign(v) => {
                        foreign.send_to(v, client_addr).unwrap();
                    }
                    Bad::Truncated(len) => {
                        peer.send_to(&cur[..*len], client_addr).unwrap();
                        e.content_errors += 1;
                        consumed = true;
                    }
                    Bad::Corrupted(i, x) => {
                        let mut v = cur.clone();
                        v[*i] ^= x;
                        peer.send_to(&v, client_addr).unwrap();
                        e.content_errors += 1;
                        consumed = true;
                    }
                    Bad::WrongPhase => {
                        let mut v = cur.clone();
                        v[3] = Phase::Warmup.tag();
                        peer.send_to(&v, client_addr).unwrap();
                        e.content_errors += 1;
                        consumed = true;
                    }
                }
                if consumed {
                    // The slot was released: the client sent its next message.
                    e.messages_sent += 1;
                    completed.borrow_mut().push(cur);
                    *outstanding.borrow_mut() = next("a content error");
                }
            }
            // The real echo completes the outstanding message.
            let cur = outstanding.borrow().clone();
            peer.send_to(&cur, client_addr).unwrap();
            {
                let mut e = expected.borrow_mut();
                e.messages += 1;
                e.messages_sent += 1;
            }
            completed.borrow_mut().push(cur);
            *outstanding.borrow_mut() = next("an echo");
            let got = tally(&client);
            let e = expected.borrow();
            prop_assert_eq!(got.messages, e.messages);
            // The first message (sent at start) is counted too.
            prop_assert_eq!(got.messages_sent, e.messages_sent + 1);
            prop_assert_eq!(got.unexpected, e.unexpected);
            prop_assert_eq!(got.content_errors, e.content_errors);
            prop_assert_eq!(got.order_errors, 0);
            prop_assert_eq!(got.lost, 0);
            prop_assert_eq!(got.disconnects, 0);
            prop_assert_eq!(client.counters().truncated, expected_truncated.get());
            Ok(())
        })
        .unwrap();
    assert!(!client.is_closed());
    assert!(
        last_words.lock().unwrap().is_none(),
        "the client never ended"
    );
    client.close();
    rt.stop().expect("no handler failed");
}
