//! ENet 1.3 (Debian's libenet-dev, linked with `-lenet`; declarations and
//! safe wrappers in [`sys`]). Two channels: 0 reliable
//! (`ENET_PACKET_FLAG_RELIABLE`, reliable and ordered on its channel), 1
//! unreliable **unsequenced** (`ENET_PACKET_FLAG_UNSEQUENCED`: neither
//! ordered nor deduplicated against late arrivals, like QUIC datagrams
//! and keel-rudp's unreliable channel; ENet's plain unreliable would drop
//! any packet older than one already delivered). Each client is its own
//! `ENetHost` (its own socket) with one peer; the server one host with
//! [`SERVER_PEERS`] peer slots. No bandwidth limits (0, 0: ENet's
//! default); ENet's packet throttle (which drops unreliable packets under
//! loss) stays at its defaults.
//!
//! Pump: server: `enet_host_service(host, &event, 1 ms)`, then with 0
//! until no event. Clients: poll(2) on every host's socket for up to
//! 1 ms, then `enet_host_service(h, 0)` on the hosts that are readable or
//! were sent to since, and on every host every [`CLIENT_SWEEP`] (ENet's
//! timers: resends, pings): the harness's [`SocketPump`].
//!
//! Defaults: ENet queues a send until the next service call. Tuned (the
//! issue's "flushed each tick"): `enet_host_flush` after every send (each
//! client's tick is one message) and after every echo on the server.

pub mod sys;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pump::SocketPump;
use sys::{Event, Host, Peer, FLAG_RELIABLE, FLAG_UNSEQUENCED};

use crate::{Channel, ClientArgs, Clients, Description, EchoServer, ServerArgs, Tally};

/// Peer slots of the server's host (ENet walks every slot on each service
/// call, so a server sizes it to its players).
pub const SERVER_PEERS: usize = 1024;
/// How often every client host is serviced even if idle.
pub const CLIENT_SWEEP: Duration = Duration::from_millis(5);
const CHANNELS: usize = 2;

fn flags(channel: u8) -> u32 {
    if channel == 0 {
        FLAG_RELIABLE
    } else {
        FLAG_UNSEQUENCED
    }
}

fn settings(tuned: bool) -> String {
    let base = "channels: 0 reliable, 1 unreliable unsequenced; bandwidth unlimited; \
                throttle and timeouts default";
    if tuned {
        format!("{base}; enet_host_flush after every send")
    } else {
        format!("{base}; sends leave at the next enet_host_service (default)")
    }
}

struct EnetServer {
    host: Host,
    tally: Arc<Tally>,
    tuned: bool,
}

impl EnetServer {
    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Connect(_) => self.tally.connected(),
            Event::Disconnect(_) => self.tally.disconnected(),
            Event::Receive(peer, ch, packet) => {
                let data = packet.data();
                if self.host.send(peer, ch, data, flags(ch)) {
                    self.tally.echoed(data.len());
                    if self.tuned {
                        self.host.flush();
                    }
                }
            }
        }
    }
}

impl EchoServer for EnetServer {
    fn local_addr(&self) -> SocketAddr {
        self.host.local_addr()
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        let ms = timeout.as_millis().clamp(0, 1) as u32;
        let mut next = self.host.service(ms)?;
        // Bounded: at most this many events per call, then back to the
        // harness (to see a signal).
        for _ in 0..100_000 {
            let Some(ev) = next else { break };
            self.handle(ev);
            next = self.host.service(0)?;
        }
        Ok(())
    }
}

/// The ENet echo server.
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let host = Host::create(Some(args.bind), SERVER_PEERS, CHANNELS)?;
    Ok((
        Box::new(EnetServer {
            host,
            tally,
            tuned: args.tuned,
        }),
        Description {
            settings: format!("{}; {SERVER_PEERS} peer slots", settings(args.tuned)),
            pump: "enet_host_service 1 ms, one thread".into(),
        },
    ))
}

struct EnetClients {
    hosts: Vec<Host>,
    peers: Vec<Peer>,
    pump: SocketPump,
    channel: u8,
    tuned: bool,
}

/// Services host `i` until it has no event; messages to `deliver`.
fn service(
    host: &mut Host,
    i: usize,
    deliver: &mut dyn FnMut(usize, &[u8]),
    connected: Option<&mut usize>,
) -> Result<(), String> {
    let mut up = connected;
    for _ in 0..10_000 {
        match host.service(0)? {
            None => break,
            Some(Event::Receive(_, _, p)) => deliver(i, p.data()),
            Some(Event::Connect(_)) => {
                if let Some(n) = up.as_deref_mut() {
                    *n += 1;
                }
            }
            Some(Event::Disconnect(_)) => {
                return Err(format!(
                    "enet: client {i} disconnected (timed out or refused)"
                ))
            }
        }
    }
    Ok(())
}

impl Clients for EnetClients {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        let _ = self.hosts[i].send(self.peers[i], self.channel, msg, flags(self.channel));
        if self.tuned {
            self.hosts[i].flush();
        } else {
            self.pump.sent(i);
        }
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        // Every reason alike: enet_host_service(h, 0) until no event.
        let hosts = &mut self.hosts;
        self.pump
            .step(until, |i, _why| service(&mut hosts[i], i, deliver, None))
    }

    fn close(&mut self) {
        for i in 0..self.hosts.len() {
            let p = self.peers[i];
            self.hosts[i].disconnect(p);
            self.hosts[i].flush();
        }
        // ENet completes a disconnect when its ack arrives; give it a
        // moment, bounded, then drop the hosts (the server times the
        // rest out).
        let end = Instant::now() + Duration::from_millis(200);
        while Instant::now() < end {
            for h in &mut self.hosts {
                while let Ok(Some(_)) = h.service(0) {}
            }
            let _ = self.pump.wait(Duration::from_millis(1));
        }
        self.hosts.clear();
    }
}

/// ENet clients, each its own host and socket, connected.
pub fn clients(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    let n = args.clients as usize;
    let mut me = EnetClients {
        hosts: Vec::with_capacity(n),
        peers: Vec::with_capacity(n),
        pump: SocketPump::new("enet", CLIENT_SWEEP),
        channel: match args.channel {
            Channel::ReliableOrdered => 0,
            Channel::Unreliable => 1,
        },
        tuned: args.tuned,
    };
    for i in 0..n {
        let mut h = Host::create(None, 1, CHANNELS).map_err(|e| format!("client {i}: {e}"))?;
        let p = h.connect(args.connect, CHANNELS)?;
        me.pump.add(h.fd());
        me.hosts.push(h);
        me.peers.push(p);
    }
    let mut up = 0;
    let mut ignore = |_: usize, _: &[u8]| {};
    while up < n {
        if Instant::now() >= deadline {
            return Err(format!(
                "enet: {up} of {n} clients connected by the deadline"
            ));
        }
        for (i, h) in me.hosts.iter_mut().enumerate() {
            service(h, i, &mut ignore, Some(&mut up))?;
        }
        me.pump.wait(Duration::from_millis(1))?;
    }
    Ok((
        Box::new(me),
        Description {
            settings: settings(args.tuned),
            pump: format!(
                "poll(2) on the hosts' sockets <= 1 ms, then enet_host_service 0 on the ready \
                 and the sent-to ones, every host every {} ms; one thread",
                CLIENT_SWEEP.as_millis()
            ),
        },
    ))
}
