//! The link conditioner does what it is configured to do, on real loopback
//! sockets: loss and duplicate rates within 4 sigma of the configuration
//! (and exactly the decisions the pure `Conditioner` predicts for the
//! seed), delays never shorter than `delay - jitter`, reordering seen by
//! the receiver at about the configured rate, the receive path through a
//! server's sessions and a client's handler, the store's bound, and off
//! meaning off. Senders go in chunks and wait for the receiver, so the
//! kernel never drops anything and every difference is the conditioner's.

mod common;

use std::net::SocketAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use keel_impair::{Conditioner, Verdict};
use keel_reactor::{IoModel, Runtime};
use keel_udp::{
    Client, ClientConfig, ClientCtx, ClientHandler, CounterSnapshot, DatagramSocket,
    DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, Impairment, ServerConfig,
};

/// Every arrival at a recording datagram socket: (sequence number, when).
#[derive(Default)]
struct Arrivals {
    log: Mutex<Vec<(u32, Instant)>>,
    progress: Progress,
}

impl Arrivals {
    fn seqs(&self) -> Vec<u32> {
        self.log.lock().unwrap().iter().map(|(s, _)| *s).collect()
    }
}

struct Recorder(Arc<Arrivals>);

impl DatagramSocketHandler for Recorder {
    fn datagram(&mut self, _: &mut DatagramSocketCtx<'_>, _: SocketAddr, data: &[u8]) {
        let now = Instant::now();
        let seq = u32::from_be_bytes(data[..4].try_into().unwrap());
        self.0.log.lock().unwrap().push((seq, now));
        self.0.progress.add(1);
    }
}

struct Quiet;

impl DatagramSocketHandler for Quiet {
    fn datagram(&mut self, _: &mut DatagramSocketCtx<'_>, _: SocketAddr, _: &[u8]) {}
}

/// A datagram carrying `seq` (32 bytes).
fn datagram(seq: u32) -> [u8; 32] {
    let mut d = [0u8; 32];
    d[..4].copy_from_slice(&seq.to_be_bytes());
    d
}

fn config(send: Option<Impairment>, recv: Option<Impairment>) -> EndpointConfig {
    EndpointConfig {
        socket: big_buffers(),
        send_impairment: send,
        recv_impairment: recv,
        ..EndpointConfig::default()
    }
}

/// A recording datagram socket and a sender with `send` on its send path.
fn pair(
    rt: &Runtime,
    send: Impairment,
) -> (
    DatagramSocket<Quiet>,
    DatagramSocket<Recorder>,
    Arc<Arrivals>,
) {
    let arrivals = Arc::new(Arrivals::default());
    let receiver = DatagramSocket::bind(
        rt.handle(),
        v4(),
        config(None, None),
        Recorder(arrivals.clone()),
    )
    .unwrap();
    let sender = DatagramSocket::bind(rt.handle(), v4(), config(Some(send), None), Quiet).unwrap();
    (sender, receiver, arrivals)
}

/// Runs an empty closure on the socket's lane and waits for it: what the lane
/// did before (flushes and counters included) is visible afterwards.
fn socket_barrier<H: DatagramSocketHandler>(socket: &DatagramSocket<H>) {
    let (tx, rx) = mpsc::channel();
    assert!(socket.post(move |_, _| tx.send(()).unwrap()).is_ok());
    recv_within(&rx, "a closure on the socket's lane");
}

/// Sends `0..n` in chunks, waiting after each until the receiver has
/// everything the sender handed to the kernel, so the receive buffer never
/// overflows.
fn send_chunked(sender: &DatagramSocket<Quiet>, to: SocketAddr, n: u32, arrivals: &Arrivals) {
    const CHUNK: u32 = 200;
    for start in (0..n).step_by(CHUNK as usize) {
        let end = (start + CHUNK).min(n);
        assert!(sender
            .post(move |_, ctx| {
                for seq in start..end {
                    ctx.send_to(to, &datagram(seq)).unwrap();
                }
            })
            .is_ok());
        socket_barrier(sender);
        let out = sender.counters().datagrams_out;
        arrivals
            .progress
            .wait_for(LIMIT, "the chunk at the receiver", |c| c >= out);
    }
}

/// Asserts `observed` is within `k` standard deviations of `n * p`.
#[track_caller]
fn within_sigmas(what: &str, observed: u64, n: u64, p: f64, k: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    eprintln!(
        "{what}: {observed} of {n} = {:.4} (configured {p}, expected {mean:.0} +/- {sd:.1})",
        observed as f64 / n as f64
    );
    assert!(
        (observed as f64 - mean).abs() <= k * sd.max(1.0),
        "{what}: {observed} of {n}, expected {mean:.1} within {k} sigma ({sd:.1})"
    );
}

fn conditioner_counters(c: &CounterSnapshot) -> [u64; 5] {
    [
        c.conditioner_dropped,
        c.conditioner_duplicated,
        c.conditioner_delayed,
        c.conditioner_reordered,
        c.conditioner_discarded,
    ]
}

#[test]
fn send_path_loss_and_duplicates_match_the_rates_and_the_seeds_decisions() {
    const N: u32 = 20_000;
    let imp = Impairment {
        loss: 0.05,
        duplicate: 0.02,
        seed: 7,
        ..Impairment::default()
    };
    // What seed 7 decides, datagram by datagram.
    let mut predicted = Vec::new();
    let mut c = Conditioner::new(&imp);
    for seq in 0..N {
        match c.decide() {
            Verdict::Drop => {}
            Verdict::Deliver { duplicate, .. } => {
                predicted.push(seq);
                if duplicate.is_some() {
                    predicted.push(seq);
                }
            }
        }
    }

    let rt = runtime(IoModel::Shared { threads: 2 });
    let (sender, receiver, arrivals) = pair(&rt, imp);
    send_chunked(&sender, receiver.local_addr(), N, &arrivals);
    arrivals
        .progress
        .wait_at_least(predicted.len() as u64, "every predicted datagram");
    socket_barrier(&receiver);

    let mut seen = arrivals.seqs();
    seen.sort_unstable();
    assert_eq!(seen, predicted, "exactly the seed's decisions");
    let mut distinct = seen.clone();
    distinct.dedup();
    let lost = u64::from(N) - distinct.len() as u64;
    let dups = (seen.len() - distinct.len()) as u64;
    let s = sender.counters();
    assert_eq!(s.conditioner_dropped, lost);
    assert_eq!(s.conditioner_duplicated, dups);
    assert_eq!(
        (
            s.conditioner_delayed,
            s.conditioner_reordered,
            s.conditioner_discarded
        ),
        (0, 0, 0)
    );
    // Every send is accounted for.
    assert_eq!(
        s.datagrams_out + s.conditioner_dropped - s.conditioner_duplicated,
        u64::from(N)
    );
    assert_eq!(receiver.counters().kernel_drops, 0);
    within_sigmas("send loss", lost, u64::from(N), 0.05, 4.0);
    within_sigmas("send duplicates", dups, u64::from(N) - lost, 0.02, 4.0);
    sender.close();
    receiver.close();
    rt.stop().unwrap();
}

#[test]
fn delayed_datagrams_never_arrive_before_delay_minus_jitter() {
    const N: u32 = 300;
    let delay = Duration::from_millis(20);
    let jitter = Duration::from_millis(5);
    let imp = Impairment {
        delay,
        jitter,
        seed: 11,
        ..Impairment::default()
    };
    let rt = runtime(IoModel::Shared { threads: 2 });
    let (sender, receiver, arrivals) = pair(&rt, imp);
    let to = receiver.local_addr();
    let sent_at = Arc::new(Mutex::new(vec![None; N as usize]));
    let log = sent_at.clone();
    // Three bursts, 7 ms apart, so later bursts are held while earlier ones
    // are released.
    for burst in 0..3 {
        let log = log.clone();
        assert!(sender
            .post(move |_, ctx| {
                for seq in (burst * N / 3)..((burst + 1) * N / 3) {
                    log.lock().unwrap()[seq as usize] = Some(Instant::now());
                    ctx.send_to(to, &datagram(seq)).unwrap();
                }
            })
            .is_ok());
        std::thread::sleep(Duration::from_millis(7));
    }
    arrivals
        .progress
        .wait_at_least(u64::from(N), "every delayed datagram");
    let sent = sent_at.lock().unwrap().clone();
    let mut shortest = Duration::MAX;
    for (seq, at) in arrivals.log.lock().unwrap().iter() {
        let took = at.duration_since(sent[*seq as usize].unwrap());
        shortest = shortest.min(took);
        assert!(
            took >= delay - jitter,
            "datagram {seq} took {took:?}, less than {:?}",
            delay - jitter
        );
    }
    eprintln!("shortest delay seen: {shortest:?} (configured 20ms +/- 5ms)");
    // The last datagrams can arrive before the sender's lane counts them
    // (it bumps `datagrams_out` after the call returns): read after it.
    socket_barrier(&sender);
    let s = sender.counters();
    assert_eq!(s.conditioner_delayed, u64::from(N));
    assert_eq!(s.datagrams_out, u64::from(N));
    assert_eq!(s.conditioner_discarded, 0);
    sender.close();
    receiver.close();
    rt.stop().unwrap();
}

#[test]
fn reordered_datagrams_are_overtaken_at_about_the_configured_rate() {
    const N: u32 = 20_000;
    let imp = Impairment {
        reorder: 0.1,
        reorder_delay: Duration::from_millis(5),
        seed: 3,
        ..Impairment::default()
    };
    let rt = runtime(IoModel::Shared { threads: 2 });
    let (sender, receiver, arrivals) = pair(&rt, imp);
    send_chunked(&sender, receiver.local_addr(), N, &arrivals);
    arrivals
        .progress
        .wait_at_least(u64::from(N), "every datagram, reordered or not");
    socket_barrier(&receiver);

    // A datagram is out of order if a later one arrived before it.
    let mut highest = None;
    let mut out_of_order = 0u64;
    for seq in arrivals.seqs() {
        match highest {
            Some(h) if seq < h => out_of_order += 1,
            _ => highest = Some(seq),
        }
    }
    let mut all = arrivals.seqs();
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>(), "nothing lost or doubled");
    let s = sender.counters();
    assert!(out_of_order <= s.conditioner_reordered);
    assert_eq!(s.conditioner_delayed, s.conditioner_reordered);
    within_sigmas(
        "reordered (decided)",
        s.conditioner_reordered,
        u64::from(N),
        0.1,
        4.0,
    );
    within_sigmas(
        "out of order at the receiver",
        out_of_order,
        u64::from(N),
        0.1,
        4.0,
    );
    sender.close();
    receiver.close();
    rt.stop().unwrap();
}

#[test]
fn server_receive_path_goes_through_sessions_with_loss_duplicates_and_delay() {
    const N: u32 = 4_000;
    const CHUNK: u32 = 250;
    let floor = Duration::from_millis(3);
    let imp = Impairment {
        loss: 0.1,
        duplicate: 0.05,
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(2),
        seed: 5,
        ..Impairment::default()
    };
    let rt = runtime(IoModel::Shared { threads: 2 });
    let (server, seen) = echo_server(
        &rt,
        v4(),
        ServerConfig {
            endpoint: config(None, Some(imp)),
            ..ServerConfig::default()
        },
    );
    let to = server.local_addr();
    let client = std_client(to);
    let mut sent_at = Vec::with_capacity(N as usize);
    let mut echoes = 0u64;
    let mut buf = [0u8; 64];
    for start in (0..N).step_by(CHUNK as usize) {
        for seq in start..(start + CHUNK).min(N) {
            sent_at.push(Instant::now());
            client.send_to(&datagram(seq), to).unwrap();
        }
        // Once the server has read the chunk, its decisions are made:
        // every copy not dropped comes back, some after the delay.
        let sent = u64::from((start + CHUNK).min(N));
        let deadline = Instant::now() + LIMIT;
        let c = loop {
            // Read on the lane: a batch being handled on another thread
            // would show its datagrams_in without its conditioner drops.
            let c = settled_counters(&server);
            if c.datagrams_in >= sent {
                break c;
            }
            assert!(
                Instant::now() < deadline,
                "the server read {}",
                c.datagrams_in
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        let expected = c.datagrams_in - c.conditioner_dropped + c.conditioner_duplicated;
        while echoes < expected {
            let (n, _) = recv_from(&client, &mut buf, "an echo");
            assert_eq!(n, 32);
            let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
            let took = sent_at[seq as usize].elapsed();
            assert!(took >= floor, "echo of {seq} after {took:?}");
            echoes += 1;
        }
    }
    let c = server.counters();
    assert_eq!(
        seen.get(),
        echoes,
        "every delivery went through the handler"
    );
    assert_eq!(c.sessions_opened, 1);
    assert_eq!(c.conditioner_discarded, 0);
    assert_eq!(
        c.conditioner_delayed,
        u64::from(N) - c.conditioner_dropped + c.conditioner_duplicated
    );
    within_sigmas(
        "server receive loss",
        c.conditioner_dropped,
        u64::from(N),
        0.1,
        4.0,
    );
    within_sigmas(
        "server receive duplicates",
        c.conditioner_duplicated,
        u64::from(N) - c.conditioner_dropped,
        0.05,
        4.0,
    );
    server.stop();
    rt.stop().unwrap();
}

/// Counts datagrams; sends `0..n` in chunks when asked.
struct Counting(Arc<Progress>);

impl ClientHandler for Counting {
    fn datagram(&mut self, _: &mut ClientCtx<'_>, _: &[u8]) {
        self.0.add(1);
    }
}

#[test]
fn client_send_loss_and_receive_duplicates_with_delay() {
    const N: u32 = 3_000;
    let send = Impairment {
        loss: 0.1,
        seed: 21,
        ..Impairment::default()
    };
    let recv = Impairment {
        duplicate: 0.1,
        delay: Duration::from_millis(2),
        seed: 22,
        ..Impairment::default()
    };
    let kept = {
        let mut c = Conditioner::new(&send);
        (0..N).filter(|_| c.decide() != Verdict::Drop).count() as u64
    };
    let rt = runtime(IoModel::Shared { threads: 2 });
    let (server, seen) = echo_server(
        &rt,
        v4(),
        ServerConfig {
            endpoint: config(None, None),
            ..ServerConfig::default()
        },
    );
    let got = Arc::new(Progress::default());
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig {
            local: None,
            endpoint: config(Some(send), Some(recv)),
        },
        Counting(got.clone()),
    )
    .unwrap();
    const CHUNK: u32 = 200;
    for start in (0..N).step_by(CHUNK as usize) {
        let end = (start + CHUNK).min(N);
        assert!(client
            .post(move |_, ctx| {
                for seq in start..end {
                    ctx.send(&datagram(seq)).unwrap();
                }
            })
            .is_ok());
        let (tx, rx) = mpsc::channel();
        assert!(client.post(move |_, _| tx.send(()).unwrap()).is_ok());
        recv_within(&rx, "the client's lane");
        let out = client.counters().datagrams_out;
        seen.wait_for(LIMIT, "the chunk at the server", |c| c >= out);
    }
    // The client's send path kept exactly what the seed decides.
    seen.wait_at_least(kept, "every kept datagram at the server");
    barrier(&server);
    assert_eq!(seen.get(), kept);
    // Every echo reaches the client, plus its receive path's duplicates.
    let deadline = Instant::now() + LIMIT;
    let c = loop {
        let (tx, rx) = mpsc::channel();
        assert!(client.post(move |_, _| tx.send(()).unwrap()).is_ok());
        recv_within(&rx, "the client's lane");
        let c = client.counters();
        if c.datagrams_in >= kept {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "the client read {}",
            c.datagrams_in
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    got.wait_at_least(kept + c.conditioner_duplicated, "echoes and duplicates");
    // A datagram counts as delayed when its hold ends: read the counters
    // again on the lane until the last held one (a duplicate, say) is out.
    let c = loop {
        let (tx, rx) = mpsc::channel();
        assert!(client.post(move |_, _| tx.send(()).unwrap()).is_ok());
        recv_within(&rx, "the client's lane");
        let c = client.counters();
        if c.conditioner_delayed >= kept + c.conditioner_duplicated {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "delayed {} of {} kept and {} duplicated",
            c.conditioner_delayed,
            kept,
            c.conditioner_duplicated
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(c.conditioner_dropped, u64::from(N) - kept);
    assert_eq!(c.conditioner_delayed, kept + c.conditioner_duplicated);
    within_sigmas(
        "client send loss",
        u64::from(N) - kept,
        u64::from(N),
        0.1,
        4.0,
    );
    within_sigmas(
        "client receive duplicates",
        c.conditioner_duplicated,
        kept,
        0.1,
        4.0,
    );
    client.close();
    server.stop();
    rt.stop().unwrap();
}

#[test]
fn the_store_is_bounded_and_what_it_refuses_is_counted() {
    let imp = Impairment {
        delay: Duration::from_millis(30),
        limit: 10,
        ..Impairment::default()
    };
    let rt = runtime(IoModel::Shared { threads: 1 });
    let (sender, receiver, arrivals) = pair(&rt, imp);
    let to = receiver.local_addr();
    assert!(sender
        .post(move |_, ctx| {
            for seq in 0..100 {
                ctx.send_to(to, &datagram(seq)).unwrap();
            }
        })
        .is_ok());
    arrivals
        .progress
        .wait_at_least(10, "the ten held datagrams");
    socket_barrier(&sender);
    let s = sender.counters();
    assert_eq!((s.conditioner_delayed, s.conditioner_discarded), (10, 90));
    assert_eq!(s.datagrams_out, 10);
    let mut seqs = arrivals.seqs();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    sender.close();
    receiver.close();
    rt.stop().unwrap();
}

#[test]
fn off_is_off_counters_stay_zero_and_order_is_kept() {
    let rt = runtime(IoModel::Shared { threads: 2 });
    for send in [
        None,
        Some(Impairment::default()),
        Some("off".parse().unwrap()),
    ] {
        let (sender, receiver, arrivals) = {
            let arrivals = Arc::new(Arrivals::default());
            let receiver = DatagramSocket::bind(
                rt.handle(),
                v4(),
                config(None, send.clone()),
                Recorder(arrivals.clone()),
            )
            .unwrap();
            let sender =
                DatagramSocket::bind(rt.handle(), v4(), config(send.clone(), send.clone()), Quiet)
                    .unwrap();
            (sender, receiver, arrivals)
        };
        send_chunked(&sender, receiver.local_addr(), 2_000, &arrivals);
        socket_barrier(&receiver);
        assert_eq!(arrivals.seqs(), (0..2_000).collect::<Vec<_>>(), "{send:?}");
        assert_eq!(conditioner_counters(&sender.counters()), [0; 5]);
        assert_eq!(conditioner_counters(&receiver.counters()), [0; 5]);
        sender.close();
        receiver.close();
    }
    rt.stop().unwrap();
}

#[test]
fn a_bad_impairment_is_refused_naming_the_field_and_key() {
    let rt = runtime(IoModel::Shared { threads: 1 });
    let bad = Impairment {
        loss: 1.5,
        ..Impairment::default()
    };
    let err = DatagramSocket::bind(rt.handle(), v4(), config(Some(bad), None), Quiet).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        err.to_string()
            .starts_with("send_impairment.loss: expected a probability"),
        "{err}"
    );
    let bad = Impairment {
        delay: Duration::from_millis(1),
        jitter: Duration::from_millis(2),
        ..Impairment::default()
    };
    let err = keel_udp::Server::bind(
        rt.handles(),
        v4(),
        ServerConfig {
            endpoint: config(None, Some(bad)),
            ..ServerConfig::default()
        },
        |_| Echo {
            seen: Arc::new(Progress::default()),
        },
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("recv_impairment.jitter: expected at most delay (1ms)"),
        "{err}"
    );
    rt.stop().unwrap();
}
