//! renet 2 with renet_netcode (netcode's **unsecure** mode: no connect
//! tokens; as the other peers without a security layer). renet's default
//! channels: 0 unreliable, 1 reliable-unordered, 2 reliable-ordered; the
//! client sends on 2 (reliable-ordered) or 0 (unreliable), the server
//! echoes on the channel a message came on. Each client its own
//! `std::net::UdpSocket`. netcode holds at most 1,024 clients per server.
//!
//! Pump: renet exposes no waitable handle, only `update(elapsed)`; here
//! poll(2) waits on the sockets for up to 1 ms, then (server) `update` of
//! the server and its transport, every connected client's messages echoed,
//! `send_packets`; (clients) the same for the clients that are readable or
//! were sent to, and for every client every [`CLIENT_SWEEP`].
//!
//! Defaults: renet's `ConnectionConfig::default()` (reliable channels
//! resend on a fixed 300 ms timer; 60,000 bytes per update). Tuned: the
//! reliable channels resend after [`TUNED_RESEND`] (our choice: about 2x
//! the 50 ms RTT; renet has no RTT-based resend).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use renet::{ConnectionConfig, RenetClient, RenetServer, SendType, ServerEvent};
use renet_netcode::{
    ClientAuthentication, NetcodeClientTransport, NetcodeServerTransport, ServerAuthentication,
    ServerConfig,
};

use crate::sys::Poller;
use crate::{Channel, ClientArgs, Clients, Description, EchoServer, ServerArgs, Tally};

/// The protocol id both ends use ("keel").
const PROTOCOL_ID: u64 = 0x6b65_656c;
/// Tuned reliable resend time.
pub const TUNED_RESEND: Duration = Duration::from_millis(100);
/// How often every client is updated even if idle.
pub const CLIENT_SWEEP: Duration = Duration::from_millis(5);
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

const PUMP: &str = "poll(2) on the socket(s) <= 1 ms, then update + send_packets; one thread";

struct RenetEcho {
    server: RenetServer,
    transport: NetcodeServerTransport,
    addr: SocketAddr,
    poller: Poller,
    ready: Vec<usize>,
    last: Instant,
    tally: Arc<Tally>,
}

impl EchoServer for RenetEcho {
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        self.poller
            .wait(timeout.min(Duration::from_millis(1)), &mut self.ready)
            .map_err(|e| format!("renet: poll: {e}"))?;
        let now = Instant::now();
        let dt = now - self.last;
        self.last = now;
        self.server.update(dt);
        self.transport
            .update(dt, &mut self.server)
            .map_err(|e| format!("renet: transport update: {e}"))?;
        while let Some(ev) = self.server.get_event() {
            match ev {
                ServerEvent::ClientConnected { .. } => self.tally.connected(),
                ServerEvent::ClientDisconnected { .. } => self.tally.disconnected(),
            }
        }
        for id in self.server.clients_id() {
            for ch in [UNRELIABLE, RELIABLE] {
                while let Some(m) = self.server.receive_message(id, ch) {
                    let n = m.len();
                    self.server.send_message(id, ch, m);
                    self.tally.echoed(n);
                }
            }
        }
        self.transport.send_packets(&mut self.server);
        Ok(())
    }
}

/// The renet echo server.
pub fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    let socket =
        UdpSocket::bind(args.bind).map_err(|e| format!("renet: binding {}: {e}", args.bind))?;
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
    let transport =
        NetcodeServerTransport::new(sc, socket).map_err(|e| format!("renet: transport: {e}"))?;
    Ok((
        Box::new(RenetEcho {
            server: RenetServer::new(config(args.tuned)),
            transport,
            addr,
            poller,
            ready: Vec::new(),
            last: Instant::now(),
            tally,
        }),
        Description {
            settings: format!("{}; at most {MAX_CLIENTS} clients", settings(args.tuned)),
            pump: PUMP.into(),
        },
    ))
}

struct One {
    client: RenetClient,
    transport: NetcodeClientTransport,
    last: Instant,
}

impl One {
    fn update(&mut self, i: usize) -> Result<(), String> {
        let now = Instant::now();
        let dt = now - self.last;
        self.last = now;
        self.client.update(dt);
        self.transport
            .update(dt, &mut self.client)
            .map_err(|e| format!("renet: client {i}: {e}"))
    }
}

struct RenetClients {
    clients: Vec<One>,
    poller: Poller,
    ready: Vec<usize>,
    dirty: Vec<usize>,
    swept: Instant,
    channel: u8,
}

impl RenetClients {
    fn service(&mut self, i: usize, deliver: &mut dyn FnMut(usize, &[u8])) -> Result<(), String> {
        let ch = self.channel;
        let c = &mut self.clients[i];
        c.update(i)?;
        while let Some(m) = c.client.receive_message(ch) {
            deliver(i, &m);
        }
        c.transport
            .send_packets(&mut c.client)
            .map_err(|e| format!("renet: client {i}: send_packets: {e}"))
    }
}

impl Clients for RenetClients {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        let c = &mut self.clients[i].client;
        if c.can_send_message(self.channel, msg.len()) {
            c.send_message(self.channel, msg.to_vec());
        }
        self.dirty.push(i);
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        let dirty = std::mem::take(&mut self.dirty);
        for &i in &dirty {
            self.service(i, deliver)?;
        }
        self.dirty = dirty;
        self.dirty.clear();
        let wait = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(1));
        let mut ready = std::mem::take(&mut self.ready);
        self.poller
            .wait(wait, &mut ready)
            .map_err(|e| format!("renet: poll: {e}"))?;
        if self.swept.elapsed() >= CLIENT_SWEEP {
            self.swept = Instant::now();
            for i in 0..self.clients.len() {
                self.service(i, deliver)?;
            }
        } else {
            for &i in &ready {
                self.service(i, deliver)?;
            }
        }
        self.ready = ready;
        Ok(())
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
    let mut me = RenetClients {
        clients: Vec::with_capacity(n),
        poller: Poller::default(),
        ready: Vec::new(),
        dirty: Vec::new(),
        swept: Instant::now(),
        channel: match args.channel {
            Channel::ReliableOrdered => RELIABLE,
            Channel::Unreliable => UNRELIABLE,
        },
    };
    for i in 0..n {
        let socket = UdpSocket::bind(local).map_err(|e| format!("renet: client {i}: {e}"))?;
        me.poller.add(socket.as_raw_fd());
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
        });
    }
    let mut ignore = |_: usize, _: &[u8]| {};
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
        for i in 0..n {
            me.service(i, &mut ignore)?;
        }
        let mut ready = Vec::new();
        me.poller
            .wait(Duration::from_millis(1), &mut ready)
            .map_err(|e| format!("renet: poll: {e}"))?;
    }
    Ok((
        Box::new(me),
        Description {
            settings: settings(args.tuned),
            pump: format!(
                "{PUMP}; clients: the ready and sent-to ones, every client every {} ms",
                CLIENT_SWEEP.as_millis()
            ),
        },
    ))
}
