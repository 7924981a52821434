//! KCP (the `kcp` crate, a line-by-line port of ikcp.c) over its own UDP
//! sockets (mio), not keel-udp: one socket and one KCP per client; the
//! server one socket and one KCP per peer address (its conv from the
//! peer's first packet).
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
//! Defaults: the crate's (= ikcp.c's): nodelay 0, interval 100 ms, resend
//! 0, congestion window on, windows 32 send / 128 receive, min RTO 100 ms.
//! Tuned: the "fast" mode of KCP's test.cpp, `ikcp_nodelay(kcp, 2, 10, 2,
//! 1)`, `rx_minrto = 10`, `fastresend = 1`, windows 128/128, except that
//! the crate's nodelay is a bool: nodelay 2 (whose RTO backoff adds half
//! the smoothed RTO per resend instead of half the segment's RTO) is not
//! expressible, and nodelay 1's backoff is what runs.
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
struct Out {
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

type Kcp = kcp::Kcp<Out>;

fn configure(k: &mut Kcp, tuned: bool) {
    if tuned {
        k.set_nodelay(true, 10, 2, true);
        k.set_rx_minrto(10);
        k.set_fast_resend(1);
        k.set_wndsize(128, 128);
    }
}

fn settings(tuned: bool) -> String {
    if tuned {
        "fast (KCP test.cpp): nodelay 1 (the crate's nodelay is a bool; C's 2 is not \
         expressible), interval 10, resend 2 then fastresend 1, nc 1 (no congestion window), \
         minrto 10, windows 128/128, mtu 1400"
            .into()
    } else {
        "defaults: nodelay 0, interval 100, resend 0, congestion window on, minrto 100, \
         windows 32/128, mtu 1400"
            .into()
    }
}

/// A KCP and when it wants its next `update`.
struct Conn {
    kcp: Kcp,
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
    fn reschedule(&mut self, i: usize, c: &mut Conn, now: u32) {
        // check's 0 can name a resend that is overdue while the next flush
        // is not (KCP resends only at flushes): look again next ms.
        let due = now + c.kcp.check(now).max(1);
        if due != c.due {
            c.due = due;
            self.heap.push(Reverse((due, i)));
        }
    }

    /// Runs the `update`s due by now.
    fn run_due(&mut self, conns: &mut [Conn]) {
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
            let _ = c.kcp.update(now);
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
fn input(
    c: &mut Conn,
    now: u32,
    data: &[u8],
    msg: &mut [u8],
    mut each: impl FnMut(&mut Kcp, &[u8]),
) {
    let _ = c.kcp.update(now);
    if c.kcp.input(data).is_err() {
        return;
    }
    while let Ok(n) = c.kcp.recv(msg) {
        let (k, m) = (&mut c.kcp, &msg[..n]);
        each(k, m);
    }
}

fn send(k: &mut Kcp, msg: &[u8]) -> bool {
    k.wait_snd() < MAX_QUEUED && k.send(msg).is_ok()
}

fn wait(poll: &mut Poll, events: &mut Events, until: Instant) -> Result<(), String> {
    let timeout = until.saturating_duration_since(Instant::now());
    match poll.poll(events, Some(timeout)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(format!("kcp: poll: {e}")),
    }
}

// ---------------------------------------------------------------- server

struct KcpServer {
    socket: Rc<UdpSocket>,
    poll: Poll,
    events: Events,
    clock: Clock,
    conns: Vec<Conn>,
    peers: HashMap<SocketAddr, usize>,
    tuned: bool,
    tally: Arc<Tally>,
    buf: Vec<u8>,
    msg: Vec<u8>,
    ignored: u64,
}

impl EchoServer for KcpServer {
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
        wait(&mut self.poll, &mut self.events, until)?;
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
                    let mut k = Kcp::new(
                        conv,
                        Out {
                            socket: self.socket.clone(),
                            to: from,
                        },
                    );
                    configure(&mut k, self.tuned);
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

impl Drop for KcpServer {
    fn drop(&mut self) {
        if self.ignored > 0 {
            eprintln!(
                "kcp server: {} datagrams ignored (too short or past {MAX_PEERS} peers)",
                self.ignored
            );
        }
    }
}

fn bind(addr: SocketAddr) -> Result<UdpSocket, String> {
    UdpSocket::bind(addr).map_err(|e| format!("kcp: binding {addr}: {e}"))
}

/// The KCP echo server.
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let mut socket = bind(args.bind)?;
    let poll = Poll::new().map_err(|e| format!("kcp: poll: {e}"))?;
    poll.registry()
        .register(&mut socket, Token(0), Interest::READABLE)
        .map_err(|e| format!("kcp: registering the socket: {e}"))?;
    Ok((
        Box::new(KcpServer {
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
        }),
        Description {
            settings: settings(args.tuned),
            pump: "one thread: mio poll on the socket and the earliest ikcp_check".into(),
        },
    ))
}

// ---------------------------------------------------------------- clients

struct KcpClients {
    sockets: Vec<Rc<UdpSocket>>,
    poll: Poll,
    events: Events,
    clock: Clock,
    conns: Vec<Conn>,
    buf: Vec<u8>,
    msg: Vec<u8>,
}

impl Clients for KcpClients {
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
        wait(&mut self.poll, &mut self.events, wake)?;
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

/// KCP clients, each its own socket and KCP (conv = index + 1). KCP has no
/// handshake: "connected" once the socket is bound.
pub fn clients(
    args: &ClientArgs,
    _deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    if args.channel != Channel::ReliableOrdered {
        return Err("kcp: --channel: KCP has only reliable-ordered delivery".into());
    }
    let poll = Poll::new().map_err(|e| format!("kcp: poll: {e}"))?;
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
        let mut s = bind(local)?;
        poll.registry()
            .register(&mut s, Token(i), Interest::READABLE)
            .map_err(|e| format!("kcp: registering client {i}'s socket: {e}"))?;
        let s = Rc::new(s);
        let mut k = Kcp::new(
            i as u32 + 1,
            Out {
                socket: s.clone(),
                to: args.connect,
            },
        );
        configure(&mut k, args.tuned);
        let mut c = Conn { kcp: k, due: 0 };
        let now = clock.ms();
        let _ = c.kcp.update(now);
        clock.reschedule(i, &mut c, now);
        sockets.push(s);
        conns.push(c);
    }
    Ok((
        Box::new(KcpClients {
            sockets,
            poll,
            events: Events::with_capacity(1024),
            clock,
            conns,
            buf: vec![0; RECV_BUF],
            msg: vec![0; RECV_BUF],
        }),
        Description {
            settings: settings(args.tuned),
            pump: "one thread: mio poll on the sockets and the earliest ikcp_check".into(),
        },
    ))
}
