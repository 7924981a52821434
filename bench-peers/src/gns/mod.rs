//! `keel-peer gns`: Valve's GameNetworkingSockets 1.6.0 (cargo feature `gns`).
//!
//! GNS comes from the `game-networking-sockets` 0.3.0 crate (imported as
//! `gnslib`): its `-sys` crate ships the GNS 1.6.0 source and builds it with
//! cmake against Debian's protobuf and OpenSSL, and generates the flat C API
//! with bindgen. The crate's safe wrapper gives init, configuration, listen,
//! connect, accept and connection-status events; `sys` holds the few raw
//! calls it lacks (a client-side poll group, receiving on it, a copying send).
//!
//! * Pump: GNS has no waitable handle. Its own service thread does the socket
//!   I/O, acks, resends and timers; the application polls. Server and clients
//!   run a 1 ms loop ([`PUMP`]): `RunCallbacks` (status changes), then
//!   `ReceiveMessagesOnPollGroup` until it comes back short.
//! * Channels: reliable-ordered is `k_nSteamNetworkingSend_Reliable`,
//!   unreliable `k_nSteamNetworkingSend_Unreliable` (unordered, no resend).
//!   The server echoes each message with the reliability it came with (the
//!   `Reliable` bit of the received message).
//! * Rows: defaults (Nagle 5 ms, SendRateMin/Max 256 KiB/s) and tuned (no
//!   Nagle: `NagleTime` 0 and the `NoNagle` send flags; SendRateMin/Max
//!   [`TUNED_SEND_RATE`]). Both encrypted (GNS's default, AES-GCM after a
//!   key exchange), unauthenticated (no certificate: `IP_AllowWithoutAuth` 2).
//! * GNS refuses to listen on port 0, so `--bind IP:0` first finds a free
//!   port with a std UDP socket (`listen`).

mod sys;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gnslib::sys::{
    k_nSteamNetworkingSend_NoNagle, k_nSteamNetworkingSend_Reliable,
    k_nSteamNetworkingSend_Unreliable, ESteamNetworkingConfigValue as Cfg,
    ESteamNetworkingConnectionState as State,
};
use gnslib::{
    GnsConfig, GnsConnection, GnsGlobal, GnsSocket, IsClient, IsCreated, IsServer, MessageSlot,
};

use crate::{Channel, ClientArgs, Clients, Description, EchoServer, Library, ServerArgs, Tally};

/// How both sides are pumped (the `pump` field of the JSON lines).
pub const PUMP: &str = "1 ms poll loop: RunCallbacks + ReceiveMessagesOnPollGroup \
    (GNS has no waitable handle; its own service thread does the socket I/O and timers)";

/// The send rate that the tuned row sets as both SendRateMin and SendRateMax,
/// bytes/s (GNS's default is 256 KiB/s for both).
pub const TUNED_SEND_RATE: i32 = 10_000_000;

/// Most messages taken from GNS per receive call.
const RECEIVE_BATCH: usize = 256;

/// The poll interval.
const TICK: Duration = Duration::from_millis(1);

/// How long [`Clients::close`] pumps so the close packets leave.
const CLOSE_GRACE: Duration = Duration::from_millis(50);

/// This library for [`crate::libraries`].
pub fn library() -> Library {
    Library {
        name: "gns",
        server,
        clients,
    }
}

/// The `settings` text of a row.
pub fn settings(tuned: bool) -> String {
    let common = "channels: k_nSteamNetworkingSend_Reliable (reliable-ordered) / \
        k_nSteamNetworkingSend_Unreliable (unreliable); encryption on (GNS default, AES-GCM); \
        unauthenticated (IP_AllowWithoutAuth 2, no certificate); one GNS connection and UDP \
        socket per client, all in one poll group";
    if tuned {
        format!(
            "GNS 1.6.0 tuned: NagleTime 0 and the NoNagle send flags (ReliableNoNagle / \
             UnreliableNoNagle); SendRateMin = SendRateMax = {TUNED_SEND_RATE} B/s; {common}"
        )
    } else {
        format!(
            "GNS 1.6.0 defaults: Nagle 5 ms (NagleTime 5000 us); SendRateMin = SendRateMax = \
             256 KiB/s; {common}"
        )
    }
}

/// GNS send flags for one message.
pub fn send_flags(reliable: bool, tuned: bool) -> i32 {
    let base = if reliable {
        k_nSteamNetworkingSend_Reliable
    } else {
        k_nSteamNetworkingSend_Unreliable
    };
    if tuned {
        base | k_nSteamNetworkingSend_NoNagle
    } else {
        base
    }
}

/// Initializes GNS (once per process) and sets the row's global configuration,
/// which every later listen socket and connection inherits.
pub fn init(tuned: bool) -> Result<&'static GnsGlobal, String> {
    let global = GnsGlobal::get().map_err(|e| format!("gns: GameNetworkingSockets_Init: {e}"))?;
    let utils = global.utils();
    let set = |what: Cfg, v: i32| {
        utils
            .set_global_config_value(what, GnsConfig::Int32(v))
            .map_err(|e| format!("gns: SetGlobalConfigValue {what:?} = {v}: {e}"))
    };
    // No certificates here: accept unauthenticated peers without warnings
    // (already the open-source build's default; set so it is stated).
    set(Cfg::k_ESteamNetworkingConfig_IP_AllowWithoutAuth, 2)?;
    if tuned {
        set(Cfg::k_ESteamNetworkingConfig_NagleTime, 0)?;
        set(Cfg::k_ESteamNetworkingConfig_SendRateMin, TUNED_SEND_RATE)?;
        set(Cfg::k_ESteamNetworkingConfig_SendRateMax, TUNED_SEND_RATE)?;
    }
    Ok(global)
}

fn description(tuned: bool) -> Description {
    Description {
        settings: settings(tuned),
        pump: PUMP.to_string(),
    }
}

/// Listens on `bind`. GNS refuses port 0 ("Must specify local port"), so for
/// port 0 a free port is found by binding (and closing) a std UDP socket
/// there first, retried a few times in case another process takes it between.
fn listen(global: &'static GnsGlobal, bind: SocketAddr) -> Result<GnsSocket<IsServer>, String> {
    if bind.port() != 0 {
        return GnsSocket::<IsCreated>::new(global)
            .listen(bind.ip(), bind.port())
            .map_err(|e| format!("gns: CreateListenSocketIP on {bind}: {e}"));
    }
    let mut last = String::new();
    for _ in 0..5 {
        let port = std::net::UdpSocket::bind(bind)
            .and_then(|s| s.local_addr())
            .map_err(|e| format!("gns: --bind {bind}: cannot bind a UDP socket there: {e}"))?
            .port();
        match GnsSocket::<IsCreated>::new(global).listen(bind.ip(), port) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("gns: CreateListenSocketIP on {}:{port}: {e}", bind.ip()),
        }
    }
    Err(last)
}

/// The echo server: a listen socket and the wrapper's poll group.
struct GnsServer {
    global: &'static GnsGlobal,
    socket: GnsSocket<IsServer>,
    local: SocketAddr,
    tally: Arc<Tally>,
    tuned: bool,
    open: HashSet<GnsConnection>,
    slots: Vec<MessageSlot>,
    /// Echoes GNS refused (its send buffer full, the connection gone): each is
    /// an echo lost, also counted as lost by the clients.
    echo_refused: u64,
    /// Incoming connections GNS would not let us accept.
    accept_failed: u64,
}

fn server(
    args: &ServerArgs,
    tally: Arc<Tally>,
) -> Result<(Box<dyn EchoServer>, Description), String> {
    Ok((Box::new(new_server(args, tally)?), description(args.tuned)))
}

fn new_server(args: &ServerArgs, tally: Arc<Tally>) -> Result<GnsServer, String> {
    let global = init(args.tuned)?;
    let socket = listen(global, args.bind)?;
    let local = match socket.get_listen_socket_address() {
        Some((ip, port)) if !ip.is_unspecified() => SocketAddr::new(ip, port),
        Some((_, port)) => SocketAddr::new(args.bind.ip(), port),
        None => args.bind,
    };
    Ok(GnsServer {
        global,
        socket,
        local,
        tally,
        tuned: args.tuned,
        open: HashSet::new(),
        slots: vec![MessageSlot::uninit(); RECEIVE_BATCH],
        echo_refused: 0,
        accept_failed: 0,
    })
}

impl GnsServer {
    /// One pass: status changes, then every message waiting, echoed.
    fn poll(&mut self) -> Result<(), String> {
        self.global.poll_callbacks();
        for event in self.socket.receive_events() {
            let conn = event.connection();
            match event.info().state() {
                State::k_ESteamNetworkingConnectionState_Connecting => {
                    match self.socket.accept(conn) {
                        Ok(()) => {
                            if self.open.insert(conn) {
                                self.tally.connected();
                            }
                        }
                        Err(_) => self.accept_failed += 1,
                    }
                }
                State::k_ESteamNetworkingConnectionState_ClosedByPeer
                | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally => {
                    if self.open.remove(&conn) {
                        self.tally.disconnected();
                    }
                    // Frees GNS's side of it (the peer already closed).
                    let _ = self.socket.close_connection(conn, 0, None, false);
                }
                _ => {}
            }
        }
        loop {
            let messages = self
                .socket
                .receive_messages_into(&mut self.slots)
                .map_err(|e| format!("gns: ReceiveMessagesOnPollGroup (server): {e}"))?;
            let n = messages.len();
            for m in messages {
                let reliable = m.flags().contains(gnslib::SendFlags::RELIABLE);
                let flags = send_flags(reliable, self.tuned);
                match sys::send(m.connection(), m.payload(), flags) {
                    Ok(()) => self.tally.echoed(m.payload().len()),
                    Err(_) => self.echo_refused += 1,
                }
            }
            if n < RECEIVE_BATCH {
                return Ok(());
            }
        }
    }
}

impl EchoServer for GnsServer {
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn pump(&mut self, timeout: Duration) -> Result<(), String> {
        let until = Instant::now() + timeout;
        loop {
            self.poll()?;
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(TICK));
        }
    }
}

impl Drop for GnsServer {
    fn drop(&mut self) {
        if self.echo_refused > 0 || self.accept_failed > 0 {
            eprintln!(
                "keel-peer gns server: GNS refused {} echoes and {} accepts",
                self.echo_refused, self.accept_failed
            );
        }
        for conn in self.open.drain() {
            let _ = self.socket.close_connection(conn, 0, None, false);
        }
    }
}

/// The clients: one GNS connection (and UDP socket) each, all in one poll
/// group of ours.
struct GnsClients {
    global: &'static GnsGlobal,
    conns: Vec<GnsSocket<IsClient>>,
    index: HashMap<GnsConnection, usize>,
    group: sys::PollGroup,
    flags: i32,
    received: Vec<sys::Message>,
    /// Sends GNS refused (lost; counted as lost by the harness too).
    send_refused: u64,
}

fn clients(
    args: &ClientArgs,
    deadline: Instant,
) -> Result<(Box<dyn Clients>, Description), String> {
    Ok((
        Box::new(new_clients(args, deadline)?),
        description(args.tuned),
    ))
}

fn new_clients(args: &ClientArgs, deadline: Instant) -> Result<GnsClients, String> {
    let global = init(args.tuned)?;
    let group = sys::PollGroup::new(global)?;
    let n = args.clients as usize;
    let mut conns = Vec::with_capacity(n);
    let mut index = HashMap::with_capacity(n);
    for i in 0..n {
        let socket = GnsSocket::<IsCreated>::new(global)
            .connect(args.connect.ip(), args.connect.port())
            .map_err(|e| format!("gns: ConnectByIPAddress #{i} to {}: {e}", args.connect))?;
        group.add(socket.connection())?;
        index.insert(socket.connection(), i);
        conns.push(socket);
    }
    // Pump until every connection is up, or the deadline.
    let mut up = vec![false; n];
    let mut count = 0;
    while count < n {
        global.poll_callbacks();
        for (i, c) in conns.iter().enumerate() {
            for event in c.receive_events() {
                let info = event.info();
                match info.state() {
                    State::k_ESteamNetworkingConnectionState_Connected if !up[i] => {
                        up[i] = true;
                        count += 1;
                    }
                    State::k_ESteamNetworkingConnectionState_ClosedByPeer
                    | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally => {
                        return Err(format!(
                            "gns: connection #{i} to {} failed while connecting: {} \
                             (end reason {})",
                            args.connect,
                            info.end_debug(),
                            info.end_reason()
                        ));
                    }
                    _ => {}
                }
            }
        }
        if count == n {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "gns: {count} of {n} connections to {} were up at the deadline",
                args.connect
            ));
        }
        std::thread::sleep(TICK);
    }
    Ok(GnsClients {
        global,
        conns,
        index,
        group,
        flags: send_flags(args.channel == Channel::ReliableOrdered, args.tuned),
        received: Vec::with_capacity(RECEIVE_BATCH),
        send_refused: 0,
    })
}

impl GnsClients {
    /// One pass: status changes (a closed connection ends the run), then every
    /// message waiting, delivered.
    fn poll(&mut self, deliver: &mut dyn FnMut(usize, &[u8])) -> Result<(), String> {
        self.global.poll_callbacks();
        for (i, c) in self.conns.iter().enumerate() {
            for event in c.receive_events() {
                let info = event.info();
                if matches!(
                    info.state(),
                    State::k_ESteamNetworkingConnectionState_ClosedByPeer
                        | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally
                ) {
                    return Err(format!(
                        "gns: connection #{i} closed during the run: {} (end reason {})",
                        info.end_debug(),
                        info.end_reason()
                    ));
                }
            }
        }
        loop {
            self.received.clear();
            let got = self.group.receive(&mut self.received, RECEIVE_BATCH)?;
            for m in &self.received {
                if let Some(&i) = self.index.get(&m.connection()) {
                    deliver(i, m.payload());
                }
            }
            self.received.clear(); // releases them to GNS
            if got < RECEIVE_BATCH {
                return Ok(());
            }
        }
    }
}

impl Clients for GnsClients {
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String> {
        let Some(c) = self.conns.get(i) else {
            return Err(format!(
                "gns: no client #{i} (there are {})",
                self.conns.len()
            ));
        };
        if sys::send(c.connection(), msg, self.flags).is_err() {
            self.send_refused += 1;
        }
        Ok(())
    }

    fn pump(
        &mut self,
        until: Instant,
        deliver: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), String> {
        loop {
            self.poll(deliver)?;
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(TICK));
        }
    }

    fn close(&mut self) {
        if self.send_refused > 0 {
            eprintln!(
                "keel-peer gns client: GNS refused {} sends",
                self.send_refused
            );
        }
        for c in &self.conns {
            let _ = c.close_connection(c.connection(), 0, None, false);
        }
        // Let the service thread put the close packets on the wire.
        let end = Instant::now() + CLOSE_GRACE;
        while Instant::now() < end {
            self.global.poll_callbacks();
            std::thread::sleep(TICK);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    fn msg(tag: u8, k: u8) -> Vec<u8> {
        let mut m = vec![tag; 64];
        m[1] = k;
        m
    }

    /// One process, GNS over 127.0.0.1: a server thread and two clients.
    /// Client 0 sends reliably, client 1 unreliably; each echo must come back
    /// unchanged, on the connection it was sent on, with the reliability it
    /// was sent with (the Reliable bit of the received message).
    #[test]
    fn echoes_each_message_unchanged_on_its_connection_with_its_reliability() {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let (tx, rx) = mpsc::channel();
        let (stop2, tally2) = (stop.clone(), tally.clone());
        // GnsServer holds raw message slots (not Send): build it on its thread.
        let server = std::thread::spawn(move || {
            let args = ServerArgs {
                library: "gns".into(),
                bind: "127.0.0.1:0".parse().unwrap(),
                tuned: true,
                redundancy: None,
            };
            let mut s = match new_server(&args, tally2) {
                Ok(s) => s,
                Err(e) => return tx.send(Err(e)).unwrap(),
            };
            tx.send(Ok(s.local_addr())).unwrap();
            while !stop2.load(Ordering::Relaxed) {
                s.pump(Duration::from_millis(5)).unwrap();
            }
        });
        let addr = rx.recv().unwrap().unwrap();
        assert_ne!(addr.port(), 0, "--bind port 0 resolved to a real port");
        let args = ClientArgs {
            library: "gns".into(),
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
        let mut c = new_clients(&args, Instant::now() + Duration::from_secs(10)).unwrap();
        let unreliable = send_flags(false, true);
        for k in 0..5 {
            c.send(0, &msg(b'r', k)).unwrap();
            sys::send(c.conns[1].connection(), &msg(b'u', k), unreliable).unwrap();
        }
        let mut got: Vec<Vec<(Vec<u8>, bool)>> = vec![Vec::new(), Vec::new()];
        let end = Instant::now() + Duration::from_secs(5);
        while got[0].len() + got[1].len() < 10 && Instant::now() < end {
            c.global.poll_callbacks();
            let mut ms = Vec::new();
            c.group.receive(&mut ms, RECEIVE_BATCH).unwrap();
            for m in &ms {
                let i = c.index[&m.connection()];
                got[i].push((m.payload().to_vec(), m.reliable()));
            }
            std::thread::sleep(TICK);
        }
        let want = |tag, reliable| (0..5).map(|k| (msg(tag, k), reliable)).collect::<Vec<_>>();
        assert_eq!(
            got[0],
            want(b'r', true),
            "client 0: reliable echoes, in order"
        );
        let mut u = got[1].clone();
        u.sort();
        assert_eq!(u, want(b'u', false), "client 1: unreliable echoes");

        // The harness's path: Clients::send and pump's deliver.
        for k in 5..8 {
            c.send(1, &msg(b'h', k)).unwrap();
        }
        let mut delivered = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        while delivered.len() < 3 && Instant::now() < end {
            c.pump(Instant::now() + Duration::from_millis(10), &mut |i, m| {
                delivered.push((i, m.to_vec()))
            })
            .unwrap();
        }
        let want: Vec<_> = (5..8).map(|k| (1, msg(b'h', k))).collect();
        assert_eq!(delivered, want);
        assert_eq!(tally.messages(), 13);
        assert_eq!(tally.fields()["connections"], 2);
        c.close();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
    }

    #[test]
    fn tuned_sends_skip_nagle_and_defaults_do_not() {
        use gnslib::sys::{
            k_nSteamNetworkingSend_ReliableNoNagle, k_nSteamNetworkingSend_UnreliableNoNagle,
        };
        assert_eq!(send_flags(true, false), k_nSteamNetworkingSend_Reliable);
        assert_eq!(send_flags(false, false), k_nSteamNetworkingSend_Unreliable);
        assert_eq!(
            send_flags(true, true),
            k_nSteamNetworkingSend_ReliableNoNagle
        );
        assert_eq!(
            send_flags(false, true),
            k_nSteamNetworkingSend_UnreliableNoNagle
        );
        assert!(settings(false).contains("Nagle 5 ms") && settings(true).contains("NagleTime 0"));
    }
}
