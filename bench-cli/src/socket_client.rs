//! The open-loop client on keel-udp [`DatagramSocket`]s, shared by
//! `--protocol kcp`, `--protocol udp --rate` and `--protocol rudp
//! --client-sockets shared`: one [`SocketPeer`] per client, whose
//! [`Driver`] makes and checks the messages and whose [`Transport`] carries
//! them (plain datagrams, a KCP, or a keel-rudp-proto connection).
//!
//! Where the peers live (`--client-sockets`): each on a socket of its own
//! ([`SoloPeer`], the default: one system call per datagram, as game
//! clients send), or many to a socket, one socket per client thread
//! ([`ClientGroup`]): each client sends from a loopback address of its own
//! ([`client_address`]), so the server still sees a peer per client, while
//! the group's datagrams go out and come in up to 64 to a system call. The
//! scale case needs the second: thousands of clients at 60 Hz on sockets of
//! their own cost the clients' threads more than the server being measured.
//!
//! Both are driven the same way: a [`Job`] from the run (start, or a tick)
//! is followed by sending what is due and arming the next wake-up; a
//! datagram from the server goes through the transport to the driver, and
//! what is due is sent; a wake-up gives up lost messages, lets the
//! transport do its timed work, sends and arms again. What differs is the
//! transport's: how a message is sent, what a datagram holds, and when it
//! needs waking ([`Transport::wake`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use keel_reactor::TimerId;
use keel_udp::{
    CounterSnapshot, DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig,
    Impairment, LanesConfig, LocalAddr, SocketOptions,
};

use crate::flags::{ClientSocketsChoice, RunConfig};
use crate::output::{UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::peer::{ClientSet, Driver, Job, SharedRtt, Tally};

/// Datagrams a client takes per receive call: a client gets one echo per
/// tick, so a small batch keeps its buffers (and the run's RSS) small.
pub(crate) const CLIENT_BATCH: usize = 4;
/// Datagrams a client's send queue holds (keel-udp reserves room for all
/// of them up front; a client sends a few per tick).
pub(crate) const CLIENT_SEND_QUEUE: usize = 64;

/// Datagrams a shared client socket ([`ClientGroup`]) takes or sends per
/// system call.
const GROUP_BATCH: usize = 64;
/// Datagrams a shared client socket's send queue holds while the kernel's
/// buffer is full (a group's clients may all send within a millisecond).
const GROUP_SEND_QUEUE: usize = 4096;
/// How finely a shared socket's clients are woken: those due within one
/// tick wake together, and their sends go out in one system call.
const GROUP_TICK: Duration = Duration::from_millis(1);
/// Clients `--client-sockets shared` can give an address of their own
/// ([`client_address`]: 127.1.0.0 to 127.1.255.255): more than `--clients`
/// accepts.
const MAX_SHARED_CLIENTS: u32 = 1 << 16;
const _: () = assert!(crate::flags::MAX_CLIENTS_OPEN_LOOP <= MAX_SHARED_CLIENTS);
const _: () = assert!(crate::flags::MAX_CLIENTS_CLOSED_LOOP <= MAX_SHARED_CLIENTS);

/// A load-generating client socket: small batches and queues, since the
/// scale case runs thousands of them and measures the server; Don't
/// Fragment only with `--dont-fragment`, whatever the protocol's default.
pub(crate) fn client_endpoint(
    impair: Option<Impairment>,
    max_datagram: usize,
    dont_fragment: bool,
) -> EndpointConfig {
    EndpointConfig {
        batch: CLIENT_BATCH,
        max_datagram,
        send_queue_datagrams: CLIENT_SEND_QUEUE,
        socket: SocketOptions {
            send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
            recv_buffer: Some(UDP_RECEIVE_BUFFER_REQUEST as usize),
            dont_fragment,
            ..SocketOptions::default()
        },
        send_impairment: impair,
        ..EndpointConfig::default()
    }
}

/// The one pending one-shot timer of a socket's next wake-up.
#[derive(Default)]
pub(crate) struct WakeTimer {
    armed: Option<(TimerId, Instant)>,
}

impl WakeTimer {
    /// Arms the timer for `at` (`None`: disarms it), unless it already is.
    pub(crate) fn set(&mut self, ctx: &mut DatagramSocketCtx<'_>, at: Option<Instant>) {
        if self.armed.map(|(_, t)| t) == at {
            return;
        }
        if let Some((id, _)) = self.armed.take() {
            ctx.cancel_timer(id);
        }
        if let Some(at) = at {
            self.armed = Some((ctx.timer(at, None), at));
        }
    }

    /// Whether `id` is this timer (then no longer armed).
    pub(crate) fn fired(&mut self, id: TimerId) -> bool {
        let mine = self.armed.is_some_and(|(t, _)| t == id);
        if mine {
            self.armed = None;
        }
        mine
    }
}

/// A shared client socket: batches of [`GROUP_BATCH`], a queue for a
/// burst of the group's sends, no conditioner (it would send a held
/// datagram from the kernel's choice of address, not the client's).
fn group_endpoint(max_datagram: usize, dont_fragment: bool) -> EndpointConfig {
    EndpointConfig {
        batch: GROUP_BATCH,
        send_queue_datagrams: GROUP_SEND_QUEUE,
        ..client_endpoint(None, max_datagram, dont_fragment)
    }
}

/// Client `id`'s own source address on a shared socket, 127.1.x.y: all of
/// 127.0.0.0/8 is this host's on Linux's loopback, so the server's answers
/// to it come back to the socket, bound to 0.0.0.0, that sent from it.
pub(crate) fn client_address(id: u32) -> Ipv4Addr {
    debug_assert!(id < MAX_SHARED_CLIENTS);
    let [.., hi, lo] = id.to_be_bytes();
    Ipv4Addr::new(127, 1, hi, lo)
}

/// The client whose [`client_address`] `ip` is.
fn client_of(ip: IpAddr) -> Option<u32> {
    match ip {
        IpAddr::V4(a) => match a.octets() {
            [127, 1, hi, lo] => Some(u32::from(u16::from_be_bytes([hi, lo]))),
            _ => None,
        },
        IpAddr::V6(_) => None,
    }
}

/// The end of the [`GROUP_TICK`] (counted from `epoch`) that `at` falls
/// in: a group wakes once for every member due in it, so their datagrams
/// share system calls (each is sent up to a tick late; the driver stamps
/// it when it leaves).
fn tick_end(epoch: Instant, at: Instant) -> Instant {
    let tick = GROUP_TICK.as_nanos();
    let ticks = at
        .saturating_duration_since(epoch)
        .as_nanos()
        .div_ceil(tick);
    epoch + Duration::from_nanos((ticks * tick) as u64)
}

/// When a peer wants its next wake-up ([`Transport::wake`]).
pub(crate) enum Wake {
    /// Then (`None`: not at all), whatever was armed before.
    At(Option<Instant>),
    /// Then or earlier: a wake-up armed earlier already stays (the peer,
    /// woken early, looks again), so a wanted time that moves later costs
    /// no re-arm.
    NoLaterThan(Instant),
}

/// Where a peer's datagrams go: through its socket, to the server, from
/// the peer's own address on a shared socket.
pub(crate) struct Outbound<'c, 'a> {
    ctx: &'c mut DatagramSocketCtx<'a>,
    to: SocketAddr,
    from: Option<LocalAddr>,
}

impl Outbound<'_, '_> {
    /// Sends `data`; `false` if the socket refused it (keel-udp counts it
    /// too).
    pub(crate) fn send(&mut self, data: &[u8]) -> bool {
        self.ctx.send_from(self.to, self.from, data).is_ok()
    }
}

/// What carries a [`SocketPeer`]'s messages.
pub(crate) trait Transport: Send + 'static {
    /// Whether a datagram is followed by asking [`Transport::wake`] again
    /// (a KCP has acks to send and resends to time; plain UDP's next
    /// wake-up, the driver's, is where the last tick put it).
    const ARM_AFTER_DATAGRAM: bool;

    /// Sends what `driver` has due, and what the transport itself has to
    /// send, through `out`; returns how many sends the socket refused.
    fn pump(&mut self, driver: &mut Driver, out: &mut Outbound<'_, '_>) -> u64;

    /// A datagram from the server, received at `now`: hands `driver` the
    /// echoes it holds. `false`: the transport could not take it (counted
    /// as unexpected).
    fn receive(&mut self, driver: &mut Driver, data: &[u8], now: Instant) -> bool;

    /// The next wake-up; `next` is the driver's ([`Driver::next_wake`]).
    /// By default exactly the driver's.
    fn wake(&mut self, next: Option<Instant>) -> Wake {
        Wake::At(next)
    }

    /// A wake-up at `now`, before what is due is sent: the transport's
    /// timed work.
    fn woken(&mut self, _driver: &mut Driver, _now: Instant) {}

    /// Whether messages can go (a handshake, if any, is done); the client
    /// counts as connected from then. Before, [`Transport::pump`] sends
    /// only the transport's own datagrams.
    fn connected(&self) -> bool {
        true
    }

    /// The run is over: the transport says goodbye (the datagrams go on
    /// the pump that follows) and hands over what it reports besides the
    /// tally.
    fn finish(&mut self) {}
}

/// One client: its [`Driver`], its [`Transport`], the source address it
/// sends from (a shared socket), and the wake-up its host has armed for it.
/// Each event returns the wake-up to arm instead, if it changed
/// ([`Rearm`]); the host ([`SoloPeer`], [`ClientGroup`]) arms it.
pub(crate) struct SocketPeer<T> {
    driver: Driver,
    transport: T,
    server: SocketAddr,
    from: Option<LocalAddr>,
    connected: Arc<AtomicUsize>,
    counted: bool,
    send_refused: u64,
    armed: Option<Instant>,
}

/// A peer's new wake-up (`Some(None)`: disarm), or `None`: keep the armed
/// one.
type Rearm = Option<Option<Instant>>;

impl<T: Transport> SocketPeer<T> {
    fn pump(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let mut out = Outbound {
            ctx,
            to: self.server,
            from: self.from,
        };
        self.send_refused += self.transport.pump(&mut self.driver, &mut out);
    }

    fn note_connected(&mut self) {
        if !self.counted && self.transport.connected() {
            self.counted = true;
            self.connected.fetch_add(1, Ordering::Release);
        }
    }

    fn rearm(&mut self, now: Instant) -> Rearm {
        let want = match self.transport.wake(self.driver.next_wake(now)) {
            // On a shared socket every wanted time is a latest one: a
            // member woken early looks again, which costs less than
            // queueing every move of a keel-rudp connection's timers.
            Wake::At(at) if self.from.is_some() => match at {
                Some(at) if self.armed.is_none_or(|t| at < t) => Some(at),
                _ => return None,
            },
            Wake::At(at) => at,
            Wake::NoLaterThan(at) if self.armed.is_some_and(|t| t <= at) => return None,
            Wake::NoLaterThan(at) => Some(at),
        };
        if want == self.armed {
            return None;
        }
        self.armed = want;
        Some(want)
    }

    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) -> Rearm {
        self.note_connected();
        self.pump(ctx);
        self.rearm(Instant::now())
    }

    fn job(&mut self, ctx: &mut DatagramSocketCtx<'_>, job: Job) -> Rearm {
        match job {
            Job::Start(s) => self.driver.start(s),
            Job::Tick => self.driver.expire(Instant::now()),
            Job::End(at) => self.driver.end_at(at),
        }
        self.pump(ctx);
        self.rearm(Instant::now())
    }

    fn datagram(
        &mut self,
        ctx: &mut DatagramSocketCtx<'_>,
        from: SocketAddr,
        data: &[u8],
    ) -> Rearm {
        if from != self.server {
            self.driver.tally.unexpected += 1;
            return None;
        }
        let now = Instant::now();
        if !self.transport.receive(&mut self.driver, data, now) {
            self.driver.tally.unexpected += 1;
        }
        self.note_connected();
        self.pump(ctx);
        if T::ARM_AFTER_DATAGRAM {
            self.rearm(Instant::now())
        } else {
            None
        }
    }

    /// Its wake-up came (and is no longer armed).
    fn woken(&mut self, ctx: &mut DatagramSocketCtx<'_>) -> Rearm {
        self.armed = None;
        let now = Instant::now();
        self.driver.expire(now);
        self.transport.woken(&mut self.driver, now);
        self.pump(ctx);
        self.rearm(Instant::now())
    }

    /// The final tally, with the sends the socket refused; the transport
    /// finishes ([`Transport::finish`]).
    fn take(&mut self, ctx: &mut DatagramSocketCtx<'_>) -> Tally {
        self.transport.finish();
        self.pump(ctx);
        let mut t = self.driver.take();
        t.send_rejections += self.send_refused;
        t
    }
}

/// A client on a socket of its own (`--client-sockets per-client`).
pub(crate) struct SoloPeer<T> {
    peer: SocketPeer<T>,
    wake: WakeTimer,
}

impl<T: Transport> SoloPeer<T> {
    fn apply(&mut self, ctx: &mut DatagramSocketCtx<'_>, r: Rearm) {
        if let Some(at) = r {
            self.wake.set(ctx, at);
        }
    }
}

impl<T: Transport> DatagramSocketHandler for SoloPeer<T> {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let r = self.peer.started(ctx);
        self.apply(ctx, r);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        let r = self.peer.datagram(ctx, from, data);
        self.apply(ctx, r);
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, id: TimerId) {
        if self.wake.fired(id) {
            let r = self.peer.woken(ctx);
            self.apply(ctx, r);
        }
    }
}

/// The clients of one shared socket (`--client-sockets shared`): client
/// `member * groups + group` is `peers[member]`, told apart by the address
/// its datagrams arrive at. One timer for all of them, at the earliest
/// wake-up in `due`.
pub(crate) struct ClientGroup<T> {
    peers: Vec<SocketPeer<T>>,
    group: u32,
    groups: u32,
    /// (when, member), with stale entries (the member re-armed since)
    /// skipped as they come up.
    due: BinaryHeap<Reverse<(Instant, u32)>>,
    /// The members a wake-up found due (reused).
    woken: Vec<u32>,
    wake: WakeTimer,
    /// Where the group's ticks ([`GROUP_TICK`]) start.
    epoch: Instant,
    /// Datagrams to an address none of the members has.
    strays: u64,
}

impl<T: Transport> ClientGroup<T> {
    fn schedule(&mut self, member: u32, r: Rearm) {
        if let Some(Some(at)) = r {
            self.due.push(Reverse((at, member)));
        }
    }

    /// The group's timer at the earliest live entry of `due`.
    fn arm(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        while let Some(&Reverse((at, m))) = self.due.peek() {
            if self.peers[m as usize].armed == Some(at) {
                break;
            }
            self.due.pop();
        }
        let next = self
            .due
            .peek()
            .map(|&Reverse((at, _))| tick_end(self.epoch, at));
        self.wake.set(ctx, next);
    }

    fn member_of(&self, local: Option<LocalAddr>) -> Option<u32> {
        let id = client_of(local?.ip)?;
        let member = id / self.groups;
        (id % self.groups == self.group && (member as usize) < self.peers.len()).then_some(member)
    }

    fn job(&mut self, member: u32, ctx: &mut DatagramSocketCtx<'_>, job: Job) {
        let r = self.peers[member as usize].job(ctx, job);
        self.schedule(member, r);
        self.arm(ctx);
    }

    fn take(&mut self, member: u32, ctx: &mut DatagramSocketCtx<'_>) -> Tally {
        let mut t = self.peers[member as usize].take(ctx);
        if member == 0 {
            t.unexpected += std::mem::take(&mut self.strays);
        }
        t
    }
}

impl<T: Transport> DatagramSocketHandler for ClientGroup<T> {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        for m in 0..self.peers.len() as u32 {
            let r = self.peers[m as usize].started(ctx);
            self.schedule(m, r);
        }
        self.arm(ctx);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        let Some(m) = self.member_of(ctx.arrived_at()) else {
            self.strays += 1;
            return;
        };
        let r = self.peers[m as usize].datagram(ctx, from, data);
        if r.is_some() {
            self.schedule(m, r);
            self.arm(ctx);
        }
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, id: TimerId) {
        if !self.wake.fired(id) {
            return;
        }
        // Collected first: a member woken may want waking again at once.
        let now = Instant::now();
        let mut woken = std::mem::take(&mut self.woken);
        while let Some(&Reverse((at, m))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            if self.peers[m as usize].armed == Some(at) {
                woken.push(m);
            }
        }
        for &m in &woken {
            let r = self.peers[m as usize].woken(ctx);
            self.schedule(m, r);
        }
        woken.clear();
        self.woken = woken;
        self.arm(ctx);
    }
}

/// A run's bound clients, on sockets of their own or shared.
pub(crate) enum BoundClients<T: Transport> {
    PerClient(Vec<DatagramSocket<SoloPeer<T>>>),
    Shared {
        groups: Vec<DatagramSocket<ClientGroup<T>>>,
        clients: usize,
    },
}

impl<T: Transport> BoundClients<T> {
    /// How many clients.
    pub(crate) fn len(&self) -> usize {
        match self {
            BoundClients::PerClient(v) => v.len(),
            BoundClients::Shared { clients, .. } => *clients,
        }
    }

    /// Where client `i` is: its group's socket and its place there.
    fn group_of(groups: &[DatagramSocket<ClientGroup<T>>], i: usize) -> (usize, u32) {
        (i % groups.len(), (i / groups.len()) as u32)
    }
}

impl<T: Transport> ClientSet for BoundClients<T> {
    fn len(&self) -> usize {
        BoundClients::len(self)
    }

    fn post_job(&self, i: usize, job: Job) {
        match self {
            BoundClients::PerClient(v) => {
                let _ = v[i].post(move |h, ctx| {
                    let r = h.peer.job(ctx, job);
                    h.apply(ctx, r);
                });
            }
            BoundClients::Shared { groups, .. } => {
                let (g, m) = Self::group_of(groups, i);
                let _ = groups[g].post(move |h, ctx| h.job(m, ctx, job));
            }
        }
    }

    fn post_take(&self, i: usize, tx: mpsc::Sender<(Tally, ())>) {
        match self {
            BoundClients::PerClient(v) => {
                let _ = v[i].post(move |h, ctx| {
                    let _ = tx.send((h.peer.take(ctx), ()));
                });
            }
            BoundClients::Shared { groups, .. } => {
                let (g, m) = Self::group_of(groups, i);
                let _ = groups[g].post(move |h, ctx| {
                    let _ = tx.send((h.take(m, ctx), ()));
                });
            }
        }
    }

    fn close(&self) -> CounterSnapshot {
        fn close_all<H: DatagramSocketHandler>(v: &[DatagramSocket<H>]) -> CounterSnapshot {
            v.iter().fold(CounterSnapshot::default(), |sum, c| {
                c.close();
                sum + c.counters()
            })
        }
        match self {
            BoundClients::PerClient(v) => close_all(v),
            BoundClients::Shared { groups, .. } => close_all(groups),
        }
    }
}

/// What the clients of a run share.
pub(crate) struct Clients<'a> {
    /// The run.
    pub(crate) cfg: &'a RunConfig,
    /// Where the clients' reactors come from.
    pub(crate) runtime: &'a keel_reactor::Runtime,
    /// The server's address.
    pub(crate) server: SocketAddr,
    /// The largest datagram a client socket takes.
    pub(crate) max_datagram: usize,
    /// Echoes are not ordered and may be lost ([`Driver::lossy`]).
    pub(crate) lossy: bool,
    /// Counts the clients whose transport connected.
    pub(crate) connected: &'a Arc<AtomicUsize>,
    /// Counts the clients that drained ([`Driver::new`]).
    pub(crate) drained: &'a Arc<AtomicUsize>,
    /// The run's round trips.
    pub(crate) rtt: &'a SharedRtt,
}

impl Clients<'_> {
    /// Binds `cfg.clients` clients, each with the transport `transport(id)`
    /// makes, as `--client-sockets` says: each on a socket of its own on
    /// the runtime's next reactor, with `--impair` seeded per client (seed
    /// + id); or shared, one socket per reactor.
    pub(crate) fn bind<T: Transport>(
        &self,
        transport: impl FnMut(u32) -> T,
    ) -> Result<BoundClients<T>, String> {
        match self.cfg.client_sockets {
            ClientSocketsChoice::PerClient => self.bind_each(transport),
            ClientSocketsChoice::Shared => self.bind_shared(transport),
        }
    }

    fn peer<T: Transport>(&self, id: u32, transport: T, from: Option<LocalAddr>) -> SocketPeer<T> {
        let driver = Driver::new(self.cfg, id, self.drained.clone(), self.rtt.clone());
        SocketPeer {
            driver: if self.lossy { driver.lossy() } else { driver },
            transport,
            server: self.server,
            from,
            connected: self.connected.clone(),
            counted: false,
            send_refused: 0,
            armed: None,
        }
    }

    fn bind_each<T: Transport>(
        &self,
        mut transport: impl FnMut(u32) -> T,
    ) -> Result<BoundClients<T>, String> {
        let cfg = self.cfg;
        let mut clients = Vec::with_capacity(cfg.clients as usize);
        for id in 0..cfg.clients {
            let impair = cfg.impair.as_ref().map(|imp| Impairment {
                seed: imp.seed.wrapping_add(u64::from(id)),
                ..(**imp).clone()
            });
            let peer = SoloPeer {
                peer: self.peer(id, transport(id), None),
                wake: WakeTimer::default(),
            };
            let reactor = self.runtime.next_reactor();
            let local = SocketAddr::new(cfg.address_family.loopback(), 0);
            let endpoint = client_endpoint(impair, self.max_datagram, cfg.dont_fragment);
            let client = DatagramSocket::bind(reactor, local, endpoint, peer)
                .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
            clients.push(client);
        }
        Ok(BoundClients::PerClient(clients))
    }

    fn bind_shared<T: Transport>(
        &self,
        mut transport: impl FnMut(u32) -> T,
    ) -> Result<BoundClients<T>, String> {
        let cfg = self.cfg;
        // Validation allows neither (`--client-sockets shared`).
        debug_assert!(cfg.impair.is_none() && cfg.clients <= MAX_SHARED_CLIENTS);
        let handles = self.runtime.handles();
        // The cores the server's threads leave, one socket and thread each:
        // a client thread more than that would take the server's core, and
        // its socket would overflow while it waits (seen at 5,000 x 20 Hz
        // on 2 cores: two client threads, the server at half a core, its
        // 8 MiB receive queue full).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let spare = cpus.saturating_sub(cfg.io_threads as usize).max(1);
        let groups = spare.min(handles.len()).min(cfg.clients as usize).max(1);
        let mut members: Vec<Vec<SocketPeer<T>>> = (0..groups).map(|_| Vec::new()).collect();
        for id in 0..cfg.clients {
            let from = LocalAddr {
                ip: IpAddr::V4(client_address(id)),
                ifindex: 0,
            };
            members[id as usize % groups].push(self.peer(id, transport(id), Some(from)));
        }
        let mut sockets = Vec::with_capacity(groups);
        for (g, peers) in members.into_iter().enumerate() {
            let group = ClientGroup {
                peers,
                group: g as u32,
                groups: groups as u32,
                due: BinaryHeap::new(),
                woken: Vec::new(),
                wake: WakeTimer::default(),
                epoch: Instant::now(),
                strays: 0,
            };
            // A group of one lane: bound to 0.0.0.0, it reports the address
            // each datagram came to (IP_PKTINFO), which tells the client.
            let lanes = LanesConfig {
                lanes: 1,
                endpoint: group_endpoint(self.max_datagram, cfg.dont_fragment),
                ..LanesConfig::default()
            };
            let local = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
            let mut group = Some(group);
            let socket = DatagramSocket::bind_lanes(&handles[g..=g], local, lanes, |_| {
                group.take().expect("one lane")
            })
            .map_err(|e| {
                format!("--client-sockets shared: creating client socket {g} of {groups}: {e}")
            })?;
            sockets.extend(socket.lane(0).cloned());
        }
        Ok(BoundClients::Shared {
            groups: sockets,
            clients: cfg.clients as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_an_address_of_its_own_and_is_found_by_it() {
        for id in [0, 1, 255, 256, 9_999, MAX_SHARED_CLIENTS - 1] {
            let ip = client_address(id);
            assert_eq!(ip.octets()[..2], [127, 1]);
            assert_eq!(client_of(IpAddr::V4(ip)), Some(id), "{ip}");
        }
        assert_ne!(client_address(1), client_address(256));
        assert_eq!(client_of(IpAddr::V4(Ipv4Addr::LOCALHOST)), None);
        assert_eq!(client_of(IpAddr::V4(Ipv4Addr::new(127, 2, 0, 1))), None);
        assert_eq!(client_of("::1".parse().unwrap()), None);
    }

    #[test]
    fn a_wake_up_waits_for_the_end_of_its_tick() {
        let epoch = Instant::now();
        let ms = Duration::from_millis(1);
        assert_eq!(tick_end(epoch, epoch), epoch);
        assert_eq!(tick_end(epoch, epoch + Duration::from_nanos(1)), epoch + ms);
        assert_eq!(tick_end(epoch, epoch + ms), epoch + ms);
        assert_eq!(tick_end(epoch, epoch + ms * 3 / 2), epoch + ms * 2);
        // A time before the epoch: the epoch.
        assert_eq!(tick_end(epoch + ms, epoch), epoch + ms);
    }
}
