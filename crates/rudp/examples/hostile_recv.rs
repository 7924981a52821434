//! The receive side of keel-rudp against an attacker holding a valid
//! token (its packets are authentic, so everything it sends reaches the
//! connection's state), sans-IO, in one process:
//!
//! * memory: N connections of one [`Endpoint`] (insecure, so crafted
//!   packets need no sealing; what a sealed connection holds is the same)
//!   are fed unfinished fragments as fast as the loop goes; RSS (from
//!   `/proc/self/statm`) against the endpoint's receive budget and the
//!   bytes received;
//! * CPU: the worst single packet and the time per received byte of each
//!   attack shape, against well-behaved traffic (a real sender's packets).
//!
//! `cargo run --release -p keel-rudp --example hostile_recv -- cpu`, and
//! `... -- memory [CONNECTIONS [PACKETS [BUDGET_MIB]]]` (default 4,000
//! connections, 64 packets each, the default 256 MiB budget). Run each
//! memory case in a process of its own (RSS is not given back between).

use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use keel_rudp::{
    ChannelConfig, ChannelKind, ClientSecurity, Config, ConnectionId, RecvBudget, ServerSecurity,
    DEFAULT_RECV_BUDGET,
};
use keel_rudp_proto::wire::{Frame, Header, Writer};
use keel_rudp_proto::{Connection, Event, Side};
use keel_rudp_proto::{Endpoint, EndpointConfig, Handled};

static BYTES: [u8; 1200] = [7; 1200];
const CID: ConnectionId = ConnectionId([0, 1, 2, 3, 4, 5, 6, 7]);

fn cfg() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
        ChannelConfig::new(ChannelKind::Unreliable),
    ])
}

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn mib(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// A short packet (unsealed) from `cid` numbered `pn`: its header, then
/// what `body` writes in the rest of 1,200 bytes.
fn short_packet(cid: ConnectionId, pn: u64, body: impl FnOnce(&mut Writer<'_>)) -> Vec<u8> {
    let mut buf = vec![0u8; 1200];
    let mut w = Writer::new(&mut buf);
    Header::Short { cid, pn, pn_len: 4 }.encode(&mut w).unwrap();
    body(&mut w);
    let n = w.len();
    buf.truncate(n);
    buf
}

/// A short packet (unsealed) of `frames`, as many as fit in 1,200 bytes.
fn packet(cid: ConnectionId, pn: u64, frames: &[Frame<'_>]) -> Vec<u8> {
    short_packet(cid, pn, |w| {
        for f in frames {
            if f.encode(w).is_err() {
                break;
            }
        }
    })
}

/// Frames made by `next` until the packet is full.
fn fill<'a>(cid: ConnectionId, pn: u64, mut next: impl FnMut() -> Frame<'a>) -> Vec<u8> {
    short_packet(cid, pn, |w| while next().encode(w).is_ok() {})
}

/// One full packet of [`CID`] a number in `pns`, of the frames `next` makes
/// (given the packet number).
fn fills<'a>(pns: Range<u64>, mut next: impl FnMut(u64) -> Frame<'a>) -> Vec<Vec<u8>> {
    pns.map(|pn| fill(CID, pn, || next(pn))).collect()
}

/// `count` full packets from `first_pn` of the frames `next` makes, in
/// order: a frame that does not fit opens the next packet.
fn fill_all<'a>(first_pn: u64, count: usize, mut next: impl FnMut() -> Frame<'a>) -> Vec<Vec<u8>> {
    let mut carry = None;
    (first_pn..first_pn + count as u64)
        .map(|pn| {
            short_packet(CID, pn, |w| loop {
                let f = carry.take().unwrap_or_else(&mut next);
                if f.encode(w).is_err() {
                    carry = Some(f);
                    break;
                }
            })
        })
        .collect()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn connect(server: &mut Endpoint, now: Instant, addr: SocketAddr, n: u32) -> ConnectionId {
    let mut nonce = [0u8; 16];
    nonce[..4].copy_from_slice(&n.to_be_bytes());
    let mut client = Connection::connect(cfg(), ClientSecurity::Insecure, nonce, now).unwrap();
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    for _ in 0..2 {
        let len = client.poll_transmit(now, &mut buf).unwrap();
        match server.handle(now, addr, &buf[..len], &mut reply) {
            Handled::Reply(m) | Handled::Accepted(_, m) => client.handle_datagram(now, &reply[..m]),
            other => panic!("handshake: {other:?}"),
        }
    }
    assert_eq!(client.poll_event(), Some(Event::Connected));
    client.connection_id()
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, (i % 250) as u8 + 1], 1024 + (i / 250) as u16))
}

/// N connections fed unfinished fragments: RSS against the budget.
fn memory(n: usize, budget: usize, packets_per_conn: u64) {
    let now = Instant::now();
    let mut ec = EndpointConfig::new(0, [9; 32], cfg(), ServerSecurity::Insecure);
    ec.max_connections = n;
    ec.recv_budget = RecvBudget::new(budget);
    let shared = ec.recv_budget.clone();
    let mut server = Endpoint::new(ec, now).unwrap();
    let base = rss();
    let cids: Vec<ConnectionId> = (0..n)
        .map(|i| connect(&mut server, now, addr(i), i as u32))
        .collect();
    let fixed = rss().saturating_sub(base);
    let mut reply = [0u8; 1500];
    let mut received = 0usize;
    let started = Instant::now();
    // Round-robin, as thousands of attackers sending together would:
    // each packet opens a message of 1 MiB it never finishes (on the
    // ordered and the unordered channel, two 560-byte fragments each).
    for pn in 1..=packets_per_conn {
        for (i, cid) in cids.iter().enumerate() {
            let seq = pn;
            let p = packet(
                *cid,
                pn,
                &[
                    Frame::Fragment {
                        channel: 0,
                        seq,
                        total: 1 << 20,
                        offset: 0,
                        payload: &BYTES[..560],
                    },
                    Frame::Fragment {
                        channel: 1,
                        seq,
                        total: 1 << 20,
                        offset: 4096,
                        payload: &BYTES[..560],
                    },
                ],
            );
            received += p.len();
            server.handle(now, addr(i), &p, &mut reply);
        }
    }
    let took = started.elapsed();
    let grown = rss().saturating_sub(base + fixed);
    let st = server.stats();
    println!(
        "memory: {n} connections, {packets_per_conn} packets each: {:.1} MiB received in {:.2} s; \
         budget {:.0} MiB, used {:.1} MiB; RSS: {:.1} MiB for the connections ({:.1} KiB each), \
         +{:.1} MiB for what they hold ({:.2} per byte received); {} frames refused for the budget",
        mib(received),
        took.as_secs_f64(),
        mib(shared.limit()),
        mib(shared.used()),
        mib(fixed),
        fixed as f64 / n as f64 / 1024.0,
        mib(grown),
        grown as f64 / received as f64,
        st.budget_refused,
    );
}

/// The size of an attack shape's frames, which sets the well-behaved
/// traffic it is compared with (tiny frames cost more per byte than large
/// ones whoever sends them).
#[derive(Clone, Copy)]
enum Frames {
    /// Under 64 bytes: compared with 1-byte messages.
    Small,
    /// Compared with 64-byte and 64 KiB messages.
    Large,
}
use Frames::{Large, Small};

struct Shape {
    name: &'static str,
    bytes: usize,
    time: Duration,
    worst: Duration,
    packets: usize,
    frames: Frames,
}

/// Feeds `packets` to connections made by `setup`, [`REPS`] times; a
/// packet's cost is the least of its runs (a preempted run does not
/// count), the worst packet the largest of those.
fn run(
    name: &'static str,
    frames: Frames,
    setup: &dyn Fn() -> Connection,
    packets: &[Vec<u8>],
) -> Shape {
    let now = Instant::now();
    let mut best = vec![Duration::MAX; packets.len()];
    let mut buf = [0u8; 1500];
    for _ in 0..REPS {
        let mut conn = setup();
        for (i, p) in packets.iter().enumerate() {
            let t = Instant::now();
            conn.handle_datagram(now, p);
            best[i] = best[i].min(t.elapsed());
            // Keep the event queue from growing (what a handler does).
            while let Some(e) = conn.poll_event() {
                if let Event::Message { data, .. } = e {
                    conn.recycle(data);
                }
            }
        }
        // Acknowledgements go out (not timed).
        while conn.poll_transmit(now, &mut buf).is_some() {}
    }
    Shape {
        name,
        bytes: packets.iter().map(Vec::len).sum(),
        time: best.iter().sum(),
        worst: best.iter().copied().max().unwrap_or_default(),
        packets: packets.len(),
        frames,
    }
}

/// Runs of each shape.
const REPS: usize = 5;

fn server(config: Config, now: Instant) -> Connection {
    Connection::established(config, Side::Server, CID, now).unwrap()
}

/// The shapes measured so far, in the order they are printed.
struct Shapes {
    now: Instant,
    done: Vec<Shape>,
}

impl Shapes {
    /// Measures `packets` against a fresh server connection of [`cfg`].
    fn measure(&mut self, name: &'static str, frames: Frames, packets: &[Vec<u8>]) {
        let now = self.now;
        self.measure_on(name, frames, &|| server(cfg(), now), packets);
    }

    /// Measures `packets` against connections made by `setup`.
    fn measure_on(
        &mut self,
        name: &'static str,
        frames: Frames,
        setup: &dyn Fn() -> Connection,
        packets: &[Vec<u8>],
    ) {
        self.done.push(run(name, frames, setup, packets));
    }
}

/// A real sender's packets for `msgs` messages of `size` bytes on `channel`.
fn sent_by_a_peer(config: &Config, channel: u8, size: usize, msgs: usize) -> Vec<Vec<u8>> {
    let now = Instant::now();
    let mut a = Connection::established(config.clone(), Side::Client, CID, now).unwrap();
    let msg = vec![5u8; size];
    for _ in 0..msgs {
        a.send(channel, &msg).expect("fits max_send_buffer");
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 1500];
    while let Some(n) = a.poll_transmit(now, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// How many of the first shapes are the well-behaved traffic of large
/// frames, and how many after them that of small ones.
const WELL_BEHAVED_LARGE: usize = 3;
const WELL_BEHAVED_SMALL: usize = 2;

fn cpu() {
    let now = Instant::now();
    let mut shapes = Shapes {
        now,
        done: Vec::new(),
    };

    // Well-behaved: small reliable messages, and 64 KiB ones in fragments
    // (large frames, then 1-byte messages (small)).
    let c = cfg();
    for (name, channel, size, msgs, frames) in [
        ("well-behaved: 64 B ordered messages", 0, 64, 60_000, Large),
        (
            "well-behaved: 64 KiB messages (fragments)",
            0,
            64 << 10,
            60,
            Large,
        ),
        (
            "well-behaved: 64 B unordered messages",
            1,
            64,
            60_000,
            Large,
        ),
        ("well-behaved: 1 B ordered messages", 0, 1, 200_000, Small),
        ("well-behaved: 1 B unordered messages", 1, 1, 200_000, Small),
    ] {
        let pk = sent_by_a_peer(&c, channel, size, msgs);
        shapes.measure(name, frames, &pk);
    }

    // 1-byte fragments at alternating offsets of one 1 MiB message.
    let mut pn = 0;
    let mut pk = vec![packet(
        CID,
        pn,
        &[Frame::Fragment {
            channel: 0,
            seq: 1,
            total: 1 << 20,
            offset: 0,
            payload: &BYTES[..600],
        }],
    )];
    let mut off = 600u32;
    for _ in 0..5000 {
        pn += 1;
        pk.push(fill(CID, pn, || {
            off = (off + 2) % (1 << 20);
            Frame::Fragment {
                channel: 0,
                seq: 1,
                total: 1 << 20,
                offset: off,
                payload: &BYTES[..1],
            }
        }));
    }
    shapes.measure("1-byte fragments, alternating offsets", Small, &pk);

    // 1-byte fragments extending the received prefix (valid), many messages.
    let mut pk = Vec::new();
    let mut offs = vec![0u32; 1000];
    for seq in 1..1000u64 {
        pk.push(packet(
            CID,
            seq,
            &[Frame::Fragment {
                channel: 0,
                seq,
                total: 1 << 20,
                offset: 0,
                payload: &BYTES[..600],
            }],
        ));
        offs[seq as usize] = 600;
    }
    let mut rng = Rng(7);
    pk.extend(fill_all(1000, 5000, || {
        let seq = 1 + rng.next() % 999;
        let o = offs[seq as usize];
        offs[seq as usize] += 1;
        Frame::Fragment {
            channel: 0,
            seq,
            total: 1 << 20,
            offset: o,
            payload: &BYTES[..1],
        }
    }));
    shapes.measure(
        "1-byte fragments in order, 1,000 partial messages",
        Small,
        &pk,
    );

    // 512-byte pieces at random offsets of 2,000 messages (cap-bound).
    let mut rng = Rng(11);
    let pk = fills(0..20_000, |_| {
        let seq = 1 + rng.next() % 2000;
        let offset = (rng.next() % 2040) as u32 * 512;
        Frame::Fragment {
            channel: 1,
            seq,
            total: 1 << 20,
            offset,
            payload: &BYTES[..512],
        }
    });
    shapes.measure("512 B pieces, random offsets and seqs", Large, &pk);

    // Random sequence numbers on the unordered channel (in and past the window).
    let mut rng = Rng(3);
    let pk = fills(0..20_000, |_| Frame::Message {
        channel: 1,
        seq: 1 + rng.next() % 8192,
        payload: &BYTES[..1],
    });
    shapes.measure("random seqs, unordered, 1 B messages", Small, &pk);
    let mut rng = Rng(5);
    let pk = fills(0..5_000, |_| Frame::Message {
        channel: 1,
        seq: rng.next() >> 3,
        payload: &BYTES[..1],
    });
    shapes.measure("random 61-bit seqs, unordered", Small, &pk);

    // Sparse sequence numbers on the ordered channel (held back to the cap).
    let mut rng = Rng(9);
    let pk = fills(0..20_000, |_| Frame::Message {
        channel: 0,
        seq: 1 + rng.next() % 65_535,
        payload: &BYTES[..1],
    });
    shapes.measure("sparse seqs, ordered, 1 B messages", Small, &pk);

    // The message a full ordered channel waits for, last: it releases
    // every held-back one (each delivered once, paid for when it came).
    let mut seq = 0u64;
    let mut pk = fill_all(0, 250, || {
        seq += 1;
        Frame::Message {
            channel: 0,
            seq,
            payload: &BYTES[..1],
        }
    });
    pk.push(packet(
        CID,
        250,
        &[Frame::Message {
            channel: 0,
            seq: 0,
            payload: &BYTES[..1],
        }],
    ));
    shapes.measure("ordered: the gap filled after 16,384 held back", Small, &pk);

    // Sparse packet numbers: 1,024 ranges of received packets, then the holes.
    let mut pk: Vec<Vec<u8>> = (0..4096u64)
        .map(|i| packet(CID, 2 * i, &[Frame::Ping]))
        .collect();
    let mut rng = Rng(13);
    pk.extend((0..4096u64).map(|_| packet(CID, 2 * (rng.next() % 4096) + 1, &[Frame::Ping])));
    shapes.measure("sparse packet numbers (PING)", Small, &pk);

    // Maximal ACK ranges against 4,000 packets in flight.
    let in_flight = || {
        let mut conn = server(cfg(), now);
        let mut buf = [0u8; 1500];
        for _ in 0..4000 {
            let _ = conn.send(0, &BYTES[..1000]);
            while conn.poll_transmit(now, &mut buf).is_some() {}
        }
        conn
    };
    let sent = in_flight().stats().packets_sent;
    let mut rng = Rng(17);
    let pk: Vec<Vec<u8>> = (0..2000u64)
        .map(|pn| {
            // Several ACK frames a packet, each with as many ranges as fit:
            // every other packet of a random stretch below the largest sent.
            short_packet(CID, pn, |w| loop {
                let top = sent - 1 - rng.next() % (sent / 2);
                let ranges: Vec<(u64, u64)> = (0..300u64)
                    .take_while(|i| top >= 2 * i + 2)
                    .map(|i| (top - 2 * i, top - 2 * i))
                    .collect();
                let before = w.len();
                if Frame::encode_ack(w, 0, &ranges).is_err()
                    || w.remaining() < 16
                    || w.len() == before
                {
                    break;
                }
            })
        })
        .collect();
    shapes.measure_on(
        "maximal ACK ranges, 4,000 packets in flight",
        Small,
        &in_flight,
        &pk,
    );

    // Each frame type at its limits.
    let pk: Vec<Vec<u8>> = (0..5000u64)
        .map(|pn| {
            let mut b = packet(CID, pn, &[Frame::Ping]);
            b.resize(1200, 0); // PADDING to the end
            b
        })
        .collect();
    shapes.measure("PADDING, 1,200 B packets", Large, &pk);
    let pk = fills(5000..10_000, |_| Frame::Ping);
    shapes.measure("PING, 1,187 a packet", Small, &pk);
    let pk = fills(10_000..15_000, |pn| Frame::Fragment {
        channel: 2,
        seq: pn,
        total: u32::MAX,
        offset: 0,
        payload: &BYTES[..1],
    });
    shapes.measure("FRAGMENT claiming 4 GiB (refused as malformed)", Small, &pk);
    let mut rng = Rng(19);
    let pk = fills(15_000..20_000, |_| Frame::Message {
        channel: 2,
        seq: rng.next() >> 3,
        payload: &BYTES[..0],
    });
    shapes.measure("empty unreliable MESSAGEs", Small, &pk);
    let mut rng = Rng(23);
    let pk = fills(20_000..25_000, |_| Frame::Fragment {
        channel: 2,
        seq: rng.next() >> 3,
        total: 1 << 20,
        offset: 0,
        payload: &BYTES[..520],
    });
    shapes.measure("unreliable partials, random seqs", Large, &pk);

    // 256 channels, frames spread over all of them.
    let many = Config::new(
        (0..256)
            .map(|i| {
                ChannelConfig::new(if i % 2 == 0 {
                    ChannelKind::ReliableOrdered
                } else {
                    ChannelKind::ReliableUnordered
                })
            })
            .collect(),
    );

    let mut rng = Rng(29);
    let pk = fills(0..10_000, |_| Frame::Message {
        channel: (rng.next() % 256) as u8,
        seq: 1 + rng.next() % 4000,
        payload: &BYTES[..1],
    });
    shapes.measure_on(
        "256 channels, random seqs",
        Small,
        &|| server(many.clone(), now),
        &pk,
    );

    let shapes = shapes.done;
    let per_byte = |s: &Shape| s.time.as_nanos() as f64 / s.bytes as f64;
    // Tiny frames cost more per byte than large ones whoever sends them:
    // each shape is set against the well-behaved traffic of its frame
    // sizes' order (1-byte messages for frames under 64 bytes).
    let large = shapes[..WELL_BEHAVED_LARGE]
        .iter()
        .map(per_byte)
        .fold(0.0, f64::max);
    let small = shapes[WELL_BEHAVED_LARGE..WELL_BEHAVED_LARGE + WELL_BEHAVED_SMALL]
        .iter()
        .map(per_byte)
        .fold(0.0, f64::max);
    println!(
        "cpu: shape | packets | worst packet (us) | ns per byte | x well-behaved of its frame size"
    );
    for s in &shapes {
        let against = match s.frames {
            Small => small,
            Large => large,
        };
        println!(
            "  {:<50} {:>6} {:>9.1} {:>8.2} {:>6.2}",
            s.name,
            s.packets,
            s.worst.as_secs_f64() * 1e6,
            per_byte(s),
            per_byte(s) / against
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| args.get(i).map_or(d, |a| a.parse().expect("a number"));
    match args.first().map(String::as_str) {
        Some("memory") => memory(
            arg(1, 4000),
            arg(3, DEFAULT_RECV_BUDGET >> 20) << 20,
            arg(2, 64) as u64,
        ),
        Some("cpu") | None => cpu(),
        Some(other) => {
            panic!("{other}: expected cpu or memory [CONNECTIONS [PACKETS [BUDGET_MIB]]]")
        }
    }
}
