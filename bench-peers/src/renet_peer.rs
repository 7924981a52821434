//! renet 2 with renet_netcode (netcode's **unsecure** mode: no connect
//! tokens; as the other peers without a security layer). renet's default
//! channels: 0 unreliable, 1 reliable-unordered, 2 reliable-ordered; the
//! client sends on 2 (reliable-ordered) or 0 (unreliable), the server
//! echoes on the channel a message came on. Each client its own
//! `std::net::UdpSocket`. netcode holds at most 1,024 clients per server.
//!
//! Pump: run as a game runs renet, at a tick. renet exposes no waitable
//! handle, and **every `send_packets` call transmits an ack packet** to
//! each connection that has received anything in the last round trip (its
//! pending ack ranges are dropped only when the peer acknowledges a
//! packet that carried them), so how often `send_packets` runs sets how
//! many datagrams renet sends, not the load. An earlier pump called it
//! after every poll(2) wake-up (at most 1 ms apart on the server, and on
//! each client that was readable or swept every 5 ms): about 190
//! datagrams per message at 0 % loss through the relay (66 up, 128 down),
//! mostly ack packets answering ack packets. Now:
//!
//! * clients: a client's tick is its send (the harness sends each client
//!   `--rate` times a second): `update`, `send_message`, `send_packets`.
//!   Between ticks a readable client is only received from (`update` and
//!   `receive_message`, no `send_packets`); a client whose last
//!   `send_packets` is a tick (1 / `--rate`) old is flushed by the sweep
//!   (acks and resends in the drain, with no sends);
//! * server: poll(2) <= 1 ms, then receive (netcode and renet `update`)
//!   and echo; each client that had a message echoed is flushed at once
//!   (its echo leaves now, as every other peer's does; `send_packets` for
//!   that client only, through our own use of renetcode's `NetcodeServer`,
//!   since renet_netcode's transport flushes every client at once), and
//!   every client not flushed for a [`SERVER_TICK`] is flushed at the
//!   server's tick (acks, resends, keep-alives).
//!
//! So a message costs about two datagrams each way (the message's packet
//! and renet's separate ack packet).
//!
//! Defaults: renet's `ConnectionConfig::default()` (reliable channels
//! resend on a fixed 300 ms timer; 60,000 bytes per update). Tuned: the
//! reliable channels resend after [`TUNED_RESEND`] (our choice: about 2x
//! the 50 ms RTT; renet has no RTT-based resend).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use renet::{ClientId, ConnectionConfig, RenetClient, RenetServer, SendType, ServerEvent};
use renet_netcode::{
    ClientAuthentication, NetcodeClientTransport, ServerAuthentication, ServerConfig,
};
use renetcode::{NetcodeServer, ServerResult, NETCODE_MAX_PACKET_BYTES};

use crate::pump::{SocketPump, Why};
use crate::sys::Poller;
use crate::{Channel, ClientArgs, Clients, Description, EchoServer, ServerArgs, Tally};

/// The protocol id both ends use ("keel").
const PROTOCOL_ID: u64 = 0x6b65_656c;
/// Tuned reliable resend time.
pub const TUNED_RESEND: Duration = Duration::from_millis(100);
/// How often the clients' ticks are checked (a client idle for a tick is
/// flushed).
pub const CLIENT_SWEEP: Duration = Duration::from_millis(5);
/// The server's tick: a client not flushed for this long is flushed.
pub const SERVER_TICK: Duration = Duration::from_micros(16_667);
/// netcode's most clients per server.
pub const MAX_CLIENTS: usize = 1024;
const RELIABLE: u8 = 2;
const UNRELIABLE: u8 = 0;

fn config(tuned: bool) -> ConnectionConfig {
    let mut c = ConnectionConfig::default();
    if tuned {
        for ch in c
            .server_channels_config
            .iter_mut()
            .chain(c.client_channels_config.iter_mut())
        {
            match &mut ch.send_type {
                SendType::ReliableOrdered { resend_time }
                | SendType::ReliableUnordered { resend_time } => *resend_time = TUNED_RESEND,
                SendType::Unreliable => {}
            }
        }
    }
    c
}

fn settings(tuned: bool) -> String {
    let resend = if tuned {
        format!("reliable resend {} ms (tuned)", TUNED_RESEND.as_millis())
    } else {
        "reliable resend 300 ms (default)".into()
    };
    format!(
        "netcode unsecure; default channels (0 unreliable, 2 reliable-ordered); {resend}; \
         60000 bytes per update"
    )
}

fn wall() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

const SERVER_PUMP: &str = "poll(2) on the socket <= 1 ms, then netcode + renet update and the \
                           echoes; send_packets for each client that had an echo, and every 16.7 ms \
                           (the server's tick) for each not flushed since; one thread";

/// What a renetcode result asks of the server (renet_netcode's transport
/// does the same).
fn handle(result: ServerResult<'_, '_>, socket: &UdpSocket, server: &mut RenetServer) {
    match result {
        ServerResult::None => {}
        ServerResult::PacketToSend { payload, addr } => {
            let _ = socket.send_to(payload, addr);
        }
        ServerResult::Payload { client_id, payload } => {
            let _ = server.process_packet_from(payload, client_id);
        }
        ServerResult::ClientConnected {
            client_id,
            addr,
            payload,
            ..
        } => {
            server.add_connection(client_id);
            let _ = socket.send_to(payload, addr);
        }
        ServerResult::ClientDisconnected {
            client_id,
            addr,
            payload,
        } => {
            server.remove_connection(client_id);
            if let Some(p) = payload {
                let _ = socket.send_to(p, addr);
            }
        }
    }
}

struct RenetEcho {
    server: RenetServer,
    netcode: NetcodeServer,
    socket: UdpSocket,
    buf: Vec<u8>,
    addr: SocketAddr,
    poller: Poller,
    ready: Vec<usize>,
    last: Instant,
    /// When each client was last flushed (`send_packets` for it).
    flushed: HashMap<ClientId, Instant>,
    next_tick: Instant,
    tally: Arc<Tally>,
    /// Datagrams of renet's (message and ack packets) sent by `flush`.
    renet_datagrams: u64,
}

impl RenetEcho {
    /// `send_packets` for one client: renet's packets for it, through
    /// netcode, to its address.
    fn flush(&mut self, id: ClientId, now: Instant) {
        if let Ok(packets) = self.server.get_packets_to_send(id) {
            for p in packets {
                if let Ok((addr, payload)) = self.netcode.generate_payload_packet(id, &p) {
                    let _ = self.socket.send_to(payload, addr);
                    self.renet_datagrams += 1;
                }
            }
        }
        self.flushed.insert(id, now);
    }
}

impl EchoServer for RenetEcho {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        let wait = timeout
            .min(Duration::from_millis(1))
            .min(self.next_tick.saturating_duration_since(Instant::now()));
        self.poller
            .wait(wait, &mut self.ready)
            .map_err(|e| format!("renet: poll: {e}"))?;
        let now = Instant::now();
        let dt = now - self.last;
        self.last = now;
        self.server.update(dt);
        self.netcode.update(dt);
        // Bounded: at most this many datagrams per pump, then back to the
        // harness (the rest stay in the socket).
        for _ in 0..10_000 {
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error of an earlier send (a client gone).
                Err(_) => continue,
            };
            let r = self.netcode.process_packet(from, &mut self.buf[..n]);
            handle(r, &self.socket, &mut self.server);
        }
        for id in self.netcode.clients_id() {
            let r = self.netcode.update_client(id);
            handle(r, &self.socket, &mut self.server);
        }
        for id in self.server.disconnections_id() {
            let r = self.netcode.disconnect(id);
            handle(r, &self.socket, &mut self.server);
            self.flushed.remove(&id);
        }
        while let Some(ev) = self.server.get_event() {
            match ev {
                ServerEvent::ClientConnected { .. } => self.tally.connected(),
                ServerEvent::ClientDisconnected { .. } => self.tally.disconnected(),
            }
        }
        let tick = now >= self.next_tick;
        if tick {
            self.next_tick = (self.next_tick + SERVER_TICK).max(now);
        }
        for id in self.server.clients_id() {
            let mut echoed = false;
            for ch in [UNRELIABLE, RELIABLE] {
                while let Some(m) = self.server.receive_message(id, ch) {
                    let n = m.len();
                    self.server.send_message(id, ch, m);
                    self.tally.echoed(n);
                    echoed = true;
                }
            }
            let stale = self
                .flushed
                .get(&id)
                .is_none_or(|t| now.duration_since(*t) >= SERVER_TICK);
            if echoed || (tick && stale) {
                self.flush(id, now);
            }
        }
        Ok(())
    }
}

/// The renet echo server.
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    Ok((
        Box::new(echo(args, tally)?),
        Description {
            settings: format!("{}; at most {MAX_CLIENTS} clients", settings(args.tuned)),
            pump: SERVER_PUMP.into(),
        },
    ))
}

fn echo(args: &ServerArgs, tally: Arc<Tally>) -> Result<RenetEcho, String> {
    let socket =
        UdpSocket::bind(args.bind).map_err(|e| format!("renet: binding {}: {e}", args.bind))?;
    socket
        .set_nonblocking(true)
        .map_err(|e| format!("renet: non-blocking socket: {e}"))?;
    let addr = socket
        .local_addr()
        .map_err(|e| format!("renet: local address: {e}"))?;
    let mut poller = Poller::default();
    poller.add(socket.as_raw_fd());
    let sc = ServerConfig {
        current_time: wall(),
        max_clients: MAX_CLIENTS,
        protocol_id: PROTOCOL_ID,
        public_addresses: vec![addr],
        authentication: ServerAuthentication::Unsecure,
    };
    Ok(RenetEcho {
        server: RenetServer::new(config(args.tuned)),
        netcode: NetcodeServer::new(sc),
        socket,
        buf: vec![0; NETCODE_MAX_PACKET_BYTES],
        addr,
        poller,
        ready: Vec::new(),
        last: Instant::now(),
        flushed: HashMap::new(),
        next_tick: Instant::now() + SERVER_TICK,
        tally,
        renet_datagrams: 0,
    })
}

struct One {
    client: RenetClient,
    transport: NetcodeClientTransport,
    last: Instant,
    /// When `send_packets` last ran for it.
    flushed: Instant,
}

impl One {
    /// Moves renet's clock and takes in what the socket holds (netcode
    /// may send a keep-alive of its own here).
    fn receive(&mut self, i: usize) -> Result<(), String> {
        let now = Instant::now();
        let dt = now - self.last;
        self.last = now;
        self.client.update(dt);
        self.transport
            .update(dt, &mut self.client)
            .map_err(|e| format!("renet: client {i}: {e}"))
    }

    /// `send_packets`: renet's messages, resends and its ack packet.
    fn flush(&mut self, i: usize) -> Result<(), String> {
        self.flushed = Instant::now();
        self.transport
            .send_packets(&mut self.client)
            .map_err(|e| format!("renet: client {i}: send_packets: {e}"))
    }

    fn deliver(&mut self, i: usize, ch: u8, deliver: &mut dyn FnMut(usize, &[u8])) {
        while let Some(m) = self.client.receive_message(ch) {
            deliver(i, &m);
        }
    }
}

struct RenetClients {
    clients: Vec<One>,
    pump: SocketPump,
    channel: u8,
    /// A client's tick: 1 / `--rate`.
    tick: Duration,
}

impl Clients for RenetClients {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        let ch = self.channel;
        let c = &mut self.clients[i];
        c.receive(i)?;
        if c.client.can_send_message(ch, msg.len()) {
            c.client.send_message(ch, msg.to_vec());
        }
        c.flush(i)?;
        // What `receive` took in is delivered at the next pump step.
        self.pump.sent(i);
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        let (ch, tick) = (self.channel, self.tick);
        let clients = &mut self.clients;
        self.pump.step(until, |i, why| {
            let c = &mut clients[i];
            if why != Why::Sent {
                c.receive(i)?;
            }
            c.deliver(i, ch, deliver);
            if why == Why::Sweep && c.flushed.elapsed() >= tick {
                c.flush(i)?;
            }
            Ok(())
        })
    }

    fn close(&mut self) {
        for c in &mut self.clients {
            c.transport.disconnect();
        }
        self.clients.clear();
    }
}

/// renet clients, each its own socket, connected.
pub fn clients(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    let n = args.clients as usize;
    if n > MAX_CLIENTS {
        return Err(format!(
            "renet: --clients: netcode holds at most {MAX_CLIENTS} clients per server, got {n}"
        ));
    }
    let local: SocketAddr = "127.0.0.1:0".parse().expect("constant address");
    let base = u64::from(std::process::id()) << 20;
    let tick = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
    let mut me = RenetClients {
        clients: Vec::with_capacity(n),
        pump: SocketPump::new("renet", CLIENT_SWEEP),
        channel: match args.channel {
            Channel::ReliableOrdered => RELIABLE,
            Channel::Unreliable => UNRELIABLE,
        },
        tick,
    };
    for i in 0..n {
        let socket = UdpSocket::bind(local).map_err(|e| format!("renet: client {i}: {e}"))?;
        me.pump.add(socket.as_raw_fd());
        let auth = ClientAuthentication::Unsecure {
            protocol_id: PROTOCOL_ID,
            client_id: base + i as u64,
            server_addr: args.connect,
            user_data: None,
        };
        let transport = NetcodeClientTransport::new(wall(), auth, socket)
            .map_err(|e| format!("renet: client {i}: {e}"))?;
        me.clients.push(One {
            client: RenetClient::new(config(args.tuned)),
            transport,
            last: Instant::now(),
            flushed: Instant::now(),
        });
    }
    loop {
        let up = me
            .clients
            .iter()
            .filter(|c| c.client.is_connected())
            .count();
        if up == n {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "renet: {up} of {n} clients connected by the deadline"
            ));
        }
        // netcode's handshake runs in `receive` (its update); renet's own
        // packets at the client's tick.
        for (i, c) in me.clients.iter_mut().enumerate() {
            c.receive(i)?;
            if c.flushed.elapsed() >= tick {
                c.flush(i)?;
            }
        }
        me.pump.wait(Duration::from_millis(1))?;
    }
    Ok((
        Box::new(me),
        Description {
            settings: settings(args.tuned),
            pump: format!(
                "a client's tick is its send (update, send_message, send_packets); between \
                 ticks poll(2) <= 1 ms and receive only (update, receive_message); a client \
                 idle for a tick (1/rate) flushed by a sweep every {} ms; one thread",
                CLIENT_SWEEP.as_millis()
            ),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    /// The pump bug: `send_packets` after every wake-up made renet send an
    /// ack packet per wake-up (about 128 datagrams per message from the
    /// server at 0 % loss). At a tick it is a message packet and an ack
    /// packet per echo, plus an ack per idle client per server tick.
    #[test]
    fn the_server_sends_a_few_datagrams_per_message_not_one_per_wakeup() {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let server = std::thread::spawn(move || {
            let args = ServerArgs {
                library: "renet".into(),
                bind: "127.0.0.1:0".parse().expect("address"),
                tuned: true,
                redundancy: None,
            };
            let tally = Arc::new(Tally::default());
            let mut e = echo(&args, tally.clone()).expect("renet server");
            tx.send(e.addr).expect("the test waits");
            let end = Instant::now() + Duration::from_secs(20);
            while !st.load(Ordering::Relaxed) && Instant::now() < end {
                e.pump(Duration::from_millis(10)).expect("server pump");
            }
            (e.renet_datagrams, tally.messages())
        });
        let addr = rx.recv().expect("the server's address");
        let args = ClientArgs {
            library: "renet".into(),
            connect: addr,
            clients: 2,
            rate: 60,
            payload: 64,
            seconds: Duration::from_secs(1),
            warmup: Duration::ZERO,
            drain: Duration::ZERO,
            channel: Channel::ReliableOrdered,
            tuned: true,
            redundancy: None,
        };
        let (mut c, _) = clients(&args, Instant::now() + Duration::from_secs(10)).expect("connect");
        let msg = vec![7u8; 64];
        let mut got = 0u64;
        let start = Instant::now();
        // 30 ticks of the 2 clients at 60 Hz, then up to 2 s for the echoes.
        for t in 0..30u64 {
            let due = start + Duration::from_micros(16_667 * t);
            while Instant::now() < due {
                c.pump(due, &mut |_, _| got += 1).expect("client pump");
            }
            for i in 0..2 {
                c.send(i, &msg).expect("send");
            }
        }
        let end = Instant::now() + Duration::from_secs(2);
        while got < 60 && Instant::now() < end {
            c.pump(end, &mut |_, _| got += 1).expect("client pump");
        }
        stop.store(true, Ordering::Relaxed);
        let (datagrams, echoed) = server.join().expect("server thread");
        c.close();
        assert_eq!((echoed, got), (60, 60));
        // 2.0 a message here (a message packet and an ack packet per echo);
        // with a flush at every server pump, 12.8 (and the old clients'
        // pump answered each of those with an ack packet of their own).
        assert!(
            datagrams <= 5 * echoed,
            "{datagrams} datagrams from the server for {echoed} messages"
        );
    }
}
