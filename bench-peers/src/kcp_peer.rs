//! KCP over its own UDP sockets (mio), not keel-udp: one socket and one
//! KCP per client; the server one socket and one KCP per peer address (its
//! conv from the peer's first packet). Two implementations behind one
//! pump ([`Arq`]): `kcp`, the `kcp` crate (a Rust port of ikcp.c), and
//! `ikcp`, the C ikcp.c itself ([`crate::ikcp`]), so that the two rows
//! differ only in the library.
//!
//! Pump: one thread; `mio::Poll` on the sockets, woken for datagrams and
//! for the earliest KCP `update` due. Each KCP's next `update` comes from
//! its `check` (KCP's documented way to drive many connections) after
//! every `update`, `input` and `send`, kept in a heap; `update` runs
//! before each `input` too (it only moves KCP's clock there unless a flush
//! is due), so acks are timed on the current clock. KCP sends at its
//! flushes (every `interval`), as it is built to; nothing flushes early.
//!
//! KCP has one delivery mode, reliable and ordered: `--channel unreliable`
//! is refused.
//!
//! Defaults (both): ikcp.c's: nodelay 0, interval 100 ms, resend 0,
//! congestion window on, windows 32 send / 128 receive, min RTO 100 ms.
//! Tuned: the "fast" mode of KCP's test.cpp, `ikcp_nodelay(kcp, 2, 10, 2,
//! 1)`, `rx_minrto = 10`, `fastresend = 1`, windows 128/128 (test.cpp sets
//! the last two on one side only; here on both). The `kcp` crate's nodelay
//! is a bool: nodelay 2 (whose RTO backoff adds half the connection's RTO
//! per resend instead of half the segment's, so it does not double) is not
//! expressible there, and its row runs nodelay 1; the `ikcp` row runs
//! nodelay 2, as asked.
//!
//! Bounds: a KCP holding more than [`MAX_QUEUED`] messages to send refuses
//! more (the message is lost, counted by the harness); the server holds at
//! most [`MAX_PEERS`] peers and ignores datagrams of others (and those
//! too short for a KCP header); how many goes to stderr at exit.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};

use crate::{Channel, ClientArgs, Clients, Description, EchoServer, ServerArgs, Tally};

/// Messages a KCP may hold to send before `send` is refused.
pub const MAX_QUEUED: usize = 1_024;
/// Peers the server holds at most.
pub const MAX_PEERS: usize = 16_384;
/// Largest datagram read (KCP's MTU is 1,400).
const RECV_BUF: usize = 65_536;

/// Writes KCP's packets to a socket (a full socket buffer drops the
/// packet, as the kernel would; KCP resends).
pub struct Out {
    socket: Rc<UdpSocket>,
    to: SocketAddr,
}

impl Write for Out {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let _ = self.socket.send_to(data, self.to);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What the pump needs of a KCP implementation.
pub trait Arq: Sized {
    /// The library's `LIB` name (for errors).
    const NAME: &'static str;
    /// A KCP of conversation `conv` writing to `out`, configured (tuned or
    /// defaults). `None` if it could not be created.
    fn create(conv: u32, out: Out, tuned: bool) -> Option<Self>;
    /// `ikcp_update` at `now` (ms).
    fn update(&mut self, now: u32);
    /// Milliseconds from `now` until `update` is due (`ikcp_check`).
    fn check(&self, now: u32) -> u32;
    /// `ikcp_input`; false if the datagram was refused.
    fn input(&mut self, data: &[u8]) -> bool;
    /// `ikcp_recv` into `buf`: a whole message's length, or `None`.
    fn recv(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// `ikcp_send`; false if refused.
    fn send(&mut self, msg: &[u8]) -> bool;
    /// `ikcp_waitsnd`: segments queued or in flight.
    fn wait_snd(&self) -> usize;
    /// The settings in words.
    fn settings(tuned: bool) -> String;
}

/// The `kcp` crate's KCP.
pub struct CrateKcp(kcp::Kcp<Out>);

impl Arq for CrateKcp {
    const NAME: &'static str = "kcp";

    fn create(conv: u32, out: Out, tuned: bool) -> Option<Self> {
        let mut k = kcp::Kcp::new(conv, out);
        if tuned {
            k.set_nodelay(true, 10, 2, true);
            k.set_rx_minrto(10);
            k.set_fast_resend(1);
            k.set_wndsize(128, 128);
        }
        Some(CrateKcp(k))
    }

    fn update(&mut self, now: u32) {
        let _ = self.0.update(now);
    }

    fn check(&self, now: u32) -> u32 {
        self.0.check(now)
    }

    fn input(&mut self, data: &[u8]) -> bool {
        self.0.input(data).is_ok()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.0.recv(buf).ok()
    }

    fn send(&mut self, msg: &[u8]) -> bool {
        self.0.send(msg).is_ok()
    }

    fn wait_snd(&self) -> usize {
        self.0.wait_snd()
    }

    fn settings(tuned: bool) -> String {
        if tuned {
            "kcp crate 0.6: fast (KCP test.cpp) but nodelay 1 (the crate's nodelay is a bool; \
             C's 2 is not expressible), interval 10, resend 2 then fastresend 1, nc 1 (no \
             congestion window), minrto 10, windows 128/128, mtu 1400"
                .into()
        } else {
            "kcp crate 0.6 defaults: nodelay 0, interval 100, resend 0, congestion window on, \
             minrto 100, windows 32/128, mtu 1400"
                .into()
        }
    }
}

/// A KCP and when it wants its next `update`.
struct Conn<K> {
    kcp: K,
    due: u32,
}

/// The KCPs' `update` times: a heap of (due, index), stale entries
/// skipped (an entry is live iff its time is the KCP's `due`).
struct Clock {
    epoch: Instant,
    heap: BinaryHeap<Reverse<(u32, usize)>>,
}

impl Clock {
    fn ms(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32
    }

    fn at(&self, ms: u32) -> Instant {
        self.epoch + Duration::from_millis(u64::from(ms))
    }

    /// Asks `check` after an update/input/send and queues the result.
    fn reschedule<K: Arq>(&mut self, i: usize, c: &mut Conn<K>, now: u32) {
        // check's 0 can name a resend that is overdue while the next flush
        // is not (KCP resends only at flushes): look again next ms.
        let due = now + c.kcp.check(now).max(1);
        if due != c.due {
            c.due = due;
            self.heap.push(Reverse((due, i)));
        }
    }

    /// Runs the `update`s due by now.
    fn run_due<K: Arq>(&mut self, conns: &mut [Conn<K>]) {
        let now = self.ms();
        while let Some(&Reverse((due, i))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            let Some(c) = conns.get_mut(i) else { continue };
            if c.due != due {
                continue;
            }
            c.kcp.update(now);
            self.reschedule(i, c, now);
        }
    }

    /// The next `update` due, as an instant.
    fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((due, _))| self.at(*due))
    }
}

/// Feeds a datagram to `c` (its clock brought to now first), then hands
/// every whole message to `each`.
fn input<K: Arq>(
    c: &mut Conn<K>,
    now: u32,
    data: &[u8],
    msg: &mut [u8],
    mut each: impl FnMut(&mut K, &[u8]),
) {
    c.kcp.update(now);
    if !c.kcp.input(data) {
        return;
    }
    while let Some(n) = c.kcp.recv(msg) {
        let (k, m) = (&mut c.kcp, &msg[..n]);
        each(k, m);
    }
}

fn send<K: Arq>(k: &mut K, msg: &[u8]) -> bool {
    k.wait_snd() < MAX_QUEUED && k.send(msg)
}

fn wait(name: &str, poll: &mut Poll, events: &mut Events, until: Instant) -> Result<(), String> {
    let timeout = until.saturating_duration_since(Instant::now());
    match poll.poll(events, Some(timeout)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(format!("{name}: poll: {e}")),
    }
}

// ---------------------------------------------------------------- server

struct KcpServer<K> {
    socket: Rc<UdpSocket>,
    poll: Poll,
    events: Events,
    clock: Clock,
    conns: Vec<Conn<K>>,
    peers: HashMap<SocketAddr, usize>,
    tuned: bool,
    tally: Arc<Tally>,
    buf: Vec<u8>,
    msg: Vec<u8>,
    ignored: u64,
    name: &'static str,
}

impl<K: Arq> EchoServer for KcpServer<K> {
    fn local_addr(&self) -> SocketAddr {
        self.socket
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        let mut until = Instant::now() + timeout;
        if let Some(n) = self.clock.next() {
            until = until.min(n);
        }
        wait(K::NAME, &mut self.poll, &mut self.events, until)?;
        loop {
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error of an earlier send (a client gone): not ours to end on.
                Err(_) => continue,
            };
            let now = self.clock.ms();
            let i = match self.peers.get(&from) {
                Some(&i) => i,
                None => {
                    if n < kcp::KCP_OVERHEAD || self.conns.len() >= MAX_PEERS {
                        self.ignored += 1;
                        continue;
                    }
                    let conv = kcp::get_conv(&self.buf[..n]);
                    let out = Out {
                        socket: self.socket.clone(),
                        to: from,
                    };
                    let Some(k) = K::create(conv, out, self.tuned) else {
                        self.ignored += 1;
                        continue;
                    };
                    let i = self.conns.len();
                    self.conns.push(Conn { kcp: k, due: 0 });
                    self.peers.insert(from, i);
                    self.tally.connected();
                    i
                }
            };
            let c = &mut self.conns[i];
            let tally = &self.tally;
            input(c, now, &self.buf[..n], &mut self.msg, |k, m| {
                if send(k, m) {
                    tally.echoed(m.len());
                }
            });
            self.clock.reschedule(i, c, now);
        }
        self.clock.run_due(&mut self.conns);
        Ok(())
    }
}

impl<K> Drop for KcpServer<K> {
    fn drop(&mut self) {
        if self.ignored > 0 {
            eprintln!(
                "{} server: {} datagrams ignored (too short or past {MAX_PEERS} peers)",
                self.name, self.ignored
            );
        }
    }
}

fn bind(name: &str, addr: SocketAddr) -> Result<UdpSocket, String> {
    UdpSocket::bind(addr).map_err(|e| format!("{name}: binding {addr}: {e}"))
}

/// The KCP echo server of implementation `K`.
pub fn server<K: Arq + 'static>(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let name = K::NAME;
    let mut socket = bind(name, args.bind)?;
    let poll = Poll::new().map_err(|e| format!("{name}: poll: {e}"))?;
    poll.registry()
        .register(&mut socket, Token(0), Interest::READABLE)
        .map_err(|e| format!("{name}: registering the socket: {e}"))?;
    Ok((
        Box::new(KcpServer::<K> {
            socket: Rc::new(socket),
            poll,
            events: Events::with_capacity(64),
            clock: Clock {
                epoch: Instant::now(),
                heap: BinaryHeap::new(),
            },
            conns: Vec::new(),
            peers: HashMap::new(),
            tuned: args.tuned,
            tally,
            buf: vec![0; RECV_BUF],
            msg: vec![0; RECV_BUF],
            ignored: 0,
            name,
        }),
        Description {
            settings: K::settings(args.tuned),
            pump: "one thread: mio poll on the socket and the earliest ikcp_check".into(),
        },
    ))
}

// ---------------------------------------------------------------- clients

struct KcpClients<K> {
    sockets: Vec<Rc<UdpSocket>>,
    poll: Poll,
    events: Events,
    clock: Clock,
    conns: Vec<Conn<K>>,
    buf: Vec<u8>,
    msg: Vec<u8>,
}

impl<K: Arq> Clients for KcpClients<K> {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        let now = self.clock.ms();
        let c = &mut self.conns[i];
        let _ = send(&mut c.kcp, msg);
        self.clock.reschedule(i, c, now);
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        self.clock.run_due(&mut self.conns);
        let mut wake = until;
        if let Some(n) = self.clock.next() {
            wake = wake.min(n);
        }
        wait(K::NAME, &mut self.poll, &mut self.events, wake)?;
        let ready: Vec<usize> = self.events.iter().map(|e| e.token().0).collect();
        for i in ready {
            loop {
                let n = match self.sockets[i].recv_from(&mut self.buf) {
                    Ok((n, _)) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => continue,
                };
                let now = self.clock.ms();
                let c = &mut self.conns[i];
                input(c, now, &self.buf[..n], &mut self.msg, |_, m| deliver(i, m));
                self.clock.reschedule(i, c, now);
            }
        }
        self.clock.run_due(&mut self.conns);
        Ok(())
    }

    fn close(&mut self) {
        // KCP has no connection to close.
        self.conns.clear();
    }
}

/// KCP clients of implementation `K`, each its own socket and KCP (conv =
/// index + 1). KCP has no handshake: "connected" once the socket is bound.
pub fn clients<K: Arq + 'static>(
    args: &ClientArgs,
    _deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    if args.channel != Channel::ReliableOrdered {
        return Err(format!(
            "{}: --channel: KCP has only reliable-ordered delivery",
            K::NAME
        ));
    }
    let name = K::NAME;
    let poll = Poll::new().map_err(|e| format!("{name}: poll: {e}"))?;
    let local: SocketAddr = if args.connect.is_ipv4() {
        "127.0.0.1:0".parse().expect("constant address")
    } else {
        "[::1]:0".parse().expect("constant address")
    };
    let mut sockets = Vec::new();
    let mut conns = Vec::new();
    let clock = Clock {
        epoch: Instant::now(),
        heap: BinaryHeap::new(),
    };
    let mut clock = clock;
    for i in 0..args.clients as usize {
        let mut s = bind(name, local)?;
        poll.registry()
            .register(&mut s, Token(i), Interest::READABLE)
            .map_err(|e| format!("{name}: registering client {i}'s socket: {e}"))?;
        let s = Rc::new(s);
        let out = Out {
            socket: s.clone(),
            to: args.connect,
        };
        let k = K::create(i as u32 + 1, out, args.tuned)
            .ok_or_else(|| format!("{name}: creating client {i}'s KCP"))?;
        let mut c = Conn { kcp: k, due: 0 };
        let now = clock.ms();
        c.kcp.update(now);
        clock.reschedule(i, &mut c, now);
        sockets.push(s);
        conns.push(c);
    }
    Ok((
        Box::new(KcpClients::<K> {
            sockets,
            poll,
            events: Events::with_capacity(1024),
            clock,
            conns,
            buf: vec![0; RECV_BUF],
            msg: vec![0; RECV_BUF],
        }),
        Description {
            settings: K::settings(args.tuned),
            pump: "one thread: mio poll on the sockets and the earliest ikcp_check".into(),
        },
    ))
}
