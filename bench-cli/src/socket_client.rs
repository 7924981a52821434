//! The open-loop client on a keel-udp [`DatagramSocket`], shared by
//! `--protocol kcp` and `--protocol udp --rate`: one [`SocketPeer`] per
//! client, whose [`Driver`] makes and checks the messages and whose
//! [`Transport`] carries them (plain datagrams, or a KCP over them).
//!
//! Both are driven the same way, here: a [`Job`] from the run (start, or a
//! tick) is followed by sending what is due and arming the next wake-up; a
//! datagram from the server goes through the transport to the driver, and
//! what is due is sent; a wake-up ([`WakeTimer`]) gives up lost messages,
//! lets the transport do its timed work, sends and arms again. What differs
//! is the transport's: how a message is sent, what a datagram holds, and
//! when it needs waking ([`Transport::arm`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use keel_reactor::TimerId;
use keel_udp::{
    DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, Impairment,
    SocketOptions,
};

use crate::flags::RunConfig;
use crate::output::{UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};
use crate::peer::{Driver, Job, SharedRtt, SocketClient, Tally};

/// Datagrams a client takes per receive call: a client gets one echo per
/// tick, so a small batch keeps its buffers (and the run's RSS) small.
pub(crate) const CLIENT_BATCH: usize = 4;
/// Datagrams a client's send queue holds (keel-udp reserves room for all
/// of them up front; a client sends a few per tick).
pub(crate) const CLIENT_SEND_QUEUE: usize = 64;

/// A load-generating client socket: small batches and queues, since the
/// scale case runs thousands of them and measures the server.
pub(crate) fn client_endpoint(impair: Option<Impairment>, max_datagram: usize) -> EndpointConfig {
    EndpointConfig {
        batch: CLIENT_BATCH,
        max_datagram,
        send_queue_datagrams: CLIENT_SEND_QUEUE,
        socket: SocketOptions {
            send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
            recv_buffer: Some(UDP_RECEIVE_BUFFER_REQUEST as usize),
            ..SocketOptions::default()
        },
        send_impairment: impair,
        ..EndpointConfig::default()
    }
}

/// The one pending one-shot timer of a client's next wake-up
/// ([`Driver::next_wake`]) on its keel-udp socket.
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

    /// Arms the timer for `at` unless it is armed for `at` or earlier
    /// already (then the owner, woken early, looks again): a wanted time
    /// that moves later costs no cancel and re-arm.
    pub(crate) fn set_earlier(&mut self, ctx: &mut DatagramSocketCtx<'_>, at: Instant) {
        if self.armed.is_some_and(|(_, t)| t <= at) {
            return;
        }
        self.set(ctx, Some(at));
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

/// What carries a [`SocketPeer`]'s messages.
pub(crate) trait Transport: Send + 'static {
    /// Whether a datagram is followed by arming the wake-up again (a KCP
    /// has acks to send and resends to time; plain UDP's next wake-up, the
    /// driver's, is where the last tick put it).
    const ARM_AFTER_DATAGRAM: bool;

    /// Sends what `driver` has due to `server`; returns how many sends the
    /// socket refused.
    fn pump(
        &mut self,
        driver: &mut Driver,
        ctx: &mut DatagramSocketCtx<'_>,
        server: SocketAddr,
    ) -> u64;

    /// A datagram from the server, received at `now`: hands `driver` the
    /// echoes it holds. `false`: the transport could not take it (counted
    /// as unexpected).
    fn receive(&mut self, driver: &mut Driver, data: &[u8], now: Instant) -> bool;

    /// Arms `wake` for the next wake-up; `next` is the driver's
    /// ([`Driver::next_wake`]). By default exactly the driver's.
    fn arm(
        &mut self,
        wake: &mut WakeTimer,
        ctx: &mut DatagramSocketCtx<'_>,
        next: Option<Instant>,
    ) {
        wake.set(ctx, next);
    }

    /// A wake-up, before what is due is sent: the transport's timed work.
    fn woken(&mut self) {}
}

/// One client: its [`Driver`], its [`Transport`], and its wake-up, as a
/// keel-udp socket's handler that the run drives ([`SocketClient`]).
pub(crate) struct SocketPeer<T> {
    driver: Driver,
    transport: T,
    server: SocketAddr,
    connected: Arc<AtomicUsize>,
    send_refused: u64,
    wake: WakeTimer,
}

impl<T: Transport> SocketPeer<T> {
    fn pump(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        self.send_refused += self.transport.pump(&mut self.driver, ctx, self.server);
    }

    fn arm(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        let next = self.driver.next_wake(Instant::now());
        self.transport.arm(&mut self.wake, ctx, next);
    }
}

impl<T: Transport> SocketClient for SocketPeer<T> {
    fn job(&mut self, ctx: &mut DatagramSocketCtx<'_>, job: Job) {
        match job {
            Job::Start(s) => self.driver.start(s),
            Job::Tick => self.driver.expire(Instant::now()),
            Job::End(at) => self.driver.end_at(at),
        }
        self.pump(ctx);
        self.arm(ctx);
    }

    fn take(&mut self) -> Tally {
        let mut t = self.driver.take();
        t.send_rejections += self.send_refused;
        t
    }
}

impl<T: Transport> DatagramSocketHandler for SocketPeer<T> {
    fn started(&mut self, ctx: &mut DatagramSocketCtx<'_>) {
        self.arm(ctx);
        // Neither plain UDP nor KCP has a handshake.
        self.connected.fetch_add(1, Ordering::Release);
    }

    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, data: &[u8]) {
        if from != self.server {
            self.driver.tally.unexpected += 1;
            return;
        }
        if !self
            .transport
            .receive(&mut self.driver, data, Instant::now())
        {
            self.driver.tally.unexpected += 1;
        }
        self.pump(ctx);
        if T::ARM_AFTER_DATAGRAM {
            self.arm(ctx);
        }
    }

    fn timer(&mut self, ctx: &mut DatagramSocketCtx<'_>, id: TimerId) {
        if self.wake.fired(id) {
            self.driver.expire(Instant::now());
            self.transport.woken();
            self.pump(ctx);
            self.arm(ctx);
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
    /// Counts the clients whose socket started.
    pub(crate) connected: &'a Arc<AtomicUsize>,
    /// Counts the clients that drained ([`Driver::new`]).
    pub(crate) drained: &'a Arc<AtomicUsize>,
    /// The run's round trips.
    pub(crate) rtt: &'a SharedRtt,
}

impl Clients<'_> {
    /// Binds `cfg.clients` client sockets, each on the runtime's next
    /// reactor, with `--impair` seeded per client (seed + id) and the
    /// transport `transport(id)` makes.
    pub(crate) fn bind<T: Transport>(
        &self,
        mut transport: impl FnMut(u32) -> T,
    ) -> Result<Vec<DatagramSocket<SocketPeer<T>>>, String> {
        let cfg = self.cfg;
        let mut clients = Vec::with_capacity(cfg.clients as usize);
        for id in 0..cfg.clients {
            let impair = cfg.impair.as_ref().map(|imp| Impairment {
                seed: imp.seed.wrapping_add(u64::from(id)),
                ..(**imp).clone()
            });
            let driver = Driver::new(cfg, id, self.drained.clone(), self.rtt.clone());
            let peer = SocketPeer {
                driver: if self.lossy { driver.lossy() } else { driver },
                transport: transport(id),
                server: self.server,
                connected: self.connected.clone(),
                send_refused: 0,
                wake: WakeTimer::default(),
            };
            let reactor = self.runtime.next_reactor();
            let local = SocketAddr::new(cfg.address_family.loopback(), 0);
            let endpoint = client_endpoint(impair, self.max_datagram);
            let client = DatagramSocket::bind(reactor, local, endpoint, peer)
                .map_err(|e| format!("--clients: creating client {id} of {}: {e}", cfg.clients))?;
            clients.push(client);
        }
        Ok(clients)
    }
}
