//! `keel-peer gns`: Valve's GameNetworkingSockets 1.6.0 as an echo peer.
//!
//! GNS comes from the `game-networking-sockets` 0.3.0 crate (its `-sys` crate
//! ships the GNS 1.6.0 source and builds it with cmake against Debian's
//! protobuf and OpenSSL). The safe wrapper gives init, config, listen,
//! connect, accept and connection events; [`sys`] holds the few raw calls it
//! lacks (a client-side poll group, receiving on it, a copying send).
//!
//! GNS has no waitable handle: its own service thread does the socket I/O and
//! timers, and the application polls. Both sides pump in a 1 ms loop
//! (`RunCallbacks`, then `ReceiveMessagesOnPollGroup`), see [`PUMP`].

mod sys;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gns::sys::{
    k_nSteamNetworkingSend_NoNagle, k_nSteamNetworkingSend_Reliable,
    k_nSteamNetworkingSend_Unreliable, ESteamNetworkingConfigValue as Cfg,
    ESteamNetworkingConnectionState as State,
};
use gns::{GnsConfig, GnsConnection, GnsGlobal, GnsSocket, IsClient, IsCreated};

/// How both sides are pumped (the `pump` field of the JSON lines).
pub const PUMP: &str = "1 ms poll loop: RunCallbacks + ReceiveMessagesOnPollGroup \
    (GNS has no waitable handle; its own service thread does the socket I/O)";

/// The send rate that the tuned row sets as both SendRateMin and SendRateMax
/// (GNS's default is 256 KiB/s for both).
pub const TUNED_SEND_RATE: i32 = 10_000_000;

/// Most messages taken from GNS per receive call.
const RECEIVE_BATCH: usize = 256;

/// The `settings` text of a row.
pub fn settings(tuned: bool) -> String {
    if tuned {
        format!(
            "GNS 1.6.0 tuned: NagleTime 0 and sends with k_nSteamNetworkingSend_ReliableNoNagle / \
             UnreliableNoNagle; SendRateMin = SendRateMax = {TUNED_SEND_RATE} B/s; encryption on \
             (GNS default, AES-GCM); unauthenticated (IP_AllowWithoutAuth 2, no certificate)"
        )
    } else {
        "GNS 1.6.0 defaults: Nagle 5 ms (NagleTime 5000 us), SendRateMin = SendRateMax = 256 KiB/s, \
         sends with k_nSteamNetworkingSend_Reliable / Unreliable; encryption on (GNS default, \
         AES-GCM); unauthenticated (IP_AllowWithoutAuth 2, no certificate)"
            .to_string()
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

/// Initializes GNS once and sets the global (inherited) configuration of the
/// row before any socket exists.
pub fn init(tuned: bool) -> Result<&'static GnsGlobal, String> {
    let global = GnsGlobal::get().map_err(|e| format!("GNS init failed: {e}"))?;
    let utils = global.utils();
    let set = |what: Cfg, v: i32| {
        utils
            .set_global_config_value(what, GnsConfig::Int32(v))
            .map_err(|e| format!("GNS global config {what:?} = {v} rejected: {e}"))
    };
    // Localhost benchmark without certificates: accept unauthenticated peers
    // without warnings (the open-source build's default, set explicitly).
    set(Cfg::k_ESteamNetworkingConfig_IP_AllowWithoutAuth, 2)?;
    if tuned {
        set(Cfg::k_ESteamNetworkingConfig_NagleTime, 0)?;
        set(Cfg::k_ESteamNetworkingConfig_SendRateMin, TUNED_SEND_RATE)?;
        set(Cfg::k_ESteamNetworkingConfig_SendRateMax, TUNED_SEND_RATE)?;
    }
    Ok(global)
}

/// What a finished server run counted.
#[derive(Debug, Default, Clone)]
pub struct ServerOutcome {
    /// Messages received and sent back.
    pub messages_echoed: u64,
    /// Echoes GNS refused (e.g. its send buffer full); each one is a lost echo.
    pub echo_failed: u64,
    /// Connections accepted over the run.
    pub connections: u64,
    /// Incoming connections GNS would not let us accept.
    pub accept_failed: u64,
    /// Most connections open at once.
    pub peak_connections: u64,
    /// Whole-process CPU seconds from the first message to the last.
    pub cpu_seconds: f64,
    /// RSS (bytes) when the listen socket was up, before any connection.
    pub rss_before: u64,
    /// RSS (bytes) when the most connections were open.
    pub rss_at_peak: u64,
}

/// Runs the echo server on `bind` until `stop` is set. `ready` is called with
/// the bound address once GNS listens.
pub fn run_server(
    bind: SocketAddr,
    tuned: bool,
    stop: &AtomicBool,
    ready: impl FnOnce(SocketAddr),
    cpu_now: impl Fn() -> f64,
    rss_now: impl Fn() -> u64,
) -> Result<ServerOutcome, String> {
    let global = init(tuned)?;
    let server = listen(global, bind)?;
    let local = match server.get_listen_socket_address() {
        Some((ip, port)) => SocketAddr::new(if ip.is_unspecified() { bind.ip() } else { ip }, port),
        None => bind,
    };
    ready(local);
    let mut out = ServerOutcome {
        rss_before: rss_now(),
        ..Default::default()
    };
    let mut open: HashSet<GnsConnection> = HashSet::new();
    let mut cpu_first: Option<f64> = None;
    let mut cpu_last = 0.0;
    let mut slots = vec![gns::MessageSlot::uninit(); RECEIVE_BATCH];
    while !stop.load(Ordering::Relaxed) {
        global.poll_callbacks();
        for event in server.receive_events() {
            let conn = event.connection();
            match event.info().state() {
                State::k_ESteamNetworkingConnectionState_Connecting => match server.accept(conn) {
                    Ok(()) => {
                        out.connections += 1;
                        open.insert(conn);
                        if open.len() as u64 > out.peak_connections {
                            out.peak_connections = open.len() as u64;
                            out.rss_at_peak = rss_now();
                        }
                    }
                    Err(_) => out.accept_failed += 1,
                },
                State::k_ESteamNetworkingConnectionState_ClosedByPeer
                | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally => {
                    open.remove(&conn);
                    let _ = server.close_connection(conn, 0, None, false);
                }
                _ => {}
            }
        }
        let mut any = false;
        loop {
            let messages = server
                .receive_messages_into(&mut slots)
                .map_err(|e| format!("GNS receive on the server poll group failed: {e}"))?;
            let n = messages.len();
            if n > 0 && cpu_first.is_none() {
                cpu_first = Some(cpu_now());
            }
            for m in messages {
                let reliable = m.flags().contains(gns::SendFlags::RELIABLE);
                match sys::send(m.connection(), m.payload(), send_flags(reliable, tuned)) {
                    Ok(()) => out.messages_echoed += 1,
                    Err(_) => out.echo_failed += 1,
                }
            }
            any |= n > 0;
            if n < RECEIVE_BATCH {
                break;
            }
        }
        if any {
            cpu_last = cpu_now();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    out.cpu_seconds = cpu_first.map_or(0.0, |first| (cpu_last - first).max(0.0));
    for conn in open {
        let _ = server.close_connection(conn, 0, None, false);
    }
    Ok(out)
}

/// Listens on `bind`. GNS refuses port 0 ("Must specify local port"), so for
/// port 0 a free port is found by binding (and closing) a std UDP socket
/// there first, retried a few times in case another process takes it between.
fn listen(
    global: &'static GnsGlobal,
    bind: SocketAddr,
) -> Result<GnsSocket<gns::IsServer>, String> {
    if bind.port() != 0 {
        return GnsSocket::<IsCreated>::new(global)
            .listen(bind.ip(), bind.port())
            .map_err(|e| format!("GNS listen on {bind} failed: {e}"));
    }
    let mut last = String::new();
    for _ in 0..5 {
        let port = std::net::UdpSocket::bind(bind)
            .and_then(|s| s.local_addr())
            .map_err(|e| format!("--bind {bind}: cannot bind a UDP socket there: {e}"))?
            .port();
        match GnsSocket::<IsCreated>::new(global).listen(bind.ip(), port) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("GNS listen on {}:{port} failed: {e}", bind.ip()),
        }
    }
    Err(last)
}

/// What the client runs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server (or relay) address.
    pub connect: SocketAddr,
    /// Connections, each its own GNS connection (and UDP socket).
    pub clients: usize,
    /// Messages per second per connection.
    pub rate_hz: f64,
    /// Payload bytes (at least 16: `[u64 seq][u64 send_ns][pad]`).
    pub payload: usize,
    /// Measured sending window.
    pub seconds: f64,
    /// Sending before the window, not counted.
    pub warmup: f64,
    /// Waiting for echoes after the window.
    pub drain: f64,
    /// Reliable-ordered (true) or unreliable.
    pub reliable: bool,
    /// The game tuning of the row.
    pub tuned: bool,
    /// Most time to get every connection up.
    pub connect_timeout: Duration,
}

/// What a client run measured.
#[derive(Debug, Default, Clone)]
pub struct ClientOutcome {
    /// Messages sent in the measured window.
    pub messages_sent: u64,
    /// Of those, echoes received (each once).
    pub messages_delivered: u64,
    /// Echoes received more than once (not counted again).
    pub duplicates: u64,
    /// Sends GNS refused in the window (counted as sent, so as lost).
    pub send_failed: u64,
    /// Round trips (ns) of the delivered messages, in arrival order.
    pub rtts_ns: Vec<u64>,
    /// Seconds from the window's start to the end of the drain.
    pub elapsed_seconds: f64,
    /// Whole-process CPU seconds over the same span.
    pub cpu_seconds: f64,
    /// Seconds until every connection was up.
    pub connect_seconds: f64,
}

struct Conn {
    socket: GnsSocket<IsClient>,
    connected: bool,
    next_seq: u64,
    next_send: Instant,
    /// Seqs of the measured window received so far (dedup).
    seen: Vec<bool>,
    /// First seq sent inside the measured window (None before it).
    first_measured: Option<u64>,
    last_measured: u64,
}

/// Runs `clients` connections against `connect`, sends at `rate_hz` each for
/// warmup + seconds, then waits `drain` for echoes.
pub fn run_client(cfg: &ClientConfig, cpu_now: impl Fn() -> f64) -> Result<ClientOutcome, String> {
    if cfg.payload < 16 {
        return Err(format!(
            "--payload {}: the GNS peer needs at least 16 bytes ([u64 seq][u64 send_ns])",
            cfg.payload
        ));
    }
    if !cfg.rate_hz.is_finite() || cfg.rate_hz <= 0.0 || cfg.clients == 0 {
        return Err("--rate must be > 0 and --clients >= 1".into());
    }
    let global = init(cfg.tuned)?;
    let group = sys::PollGroup::new(global)?;
    let base = Instant::now();
    let mut conns: Vec<Conn> = Vec::with_capacity(cfg.clients);
    let mut by_handle: HashMap<GnsConnection, usize> = HashMap::new();
    for i in 0..cfg.clients {
        let socket = GnsSocket::<IsCreated>::new(global)
            .connect(cfg.connect.ip(), cfg.connect.port())
            .map_err(|e| format!("GNS connect #{i} to {} failed: {e}", cfg.connect))?;
        group.add(socket.connection())?;
        by_handle.insert(socket.connection(), i);
        conns.push(Conn {
            socket,
            connected: false,
            next_seq: 0,
            next_send: base,
            seen: Vec::new(),
            first_measured: None,
            last_measured: 0,
        });
    }
    // Handshakes: pump until every connection is up (bounded).
    let deadline = base + cfg.connect_timeout;
    let mut up = 0;
    while up < conns.len() {
        global.poll_callbacks();
        for (i, c) in conns.iter_mut().enumerate() {
            for event in c.socket.receive_events() {
                let info = event.info();
                match info.state() {
                    State::k_ESteamNetworkingConnectionState_Connected if !c.connected => {
                        c.connected = true;
                        up += 1;
                    }
                    State::k_ESteamNetworkingConnectionState_ClosedByPeer
                    | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally => {
                        return Err(format!(
                            "GNS connection #{i} to {} failed while connecting: {} (reason {})",
                            cfg.connect,
                            info.end_debug(),
                            info.end_reason()
                        ));
                    }
                    _ => {}
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "GNS: only {up} of {} connections to {} were up after {:?}",
                conns.len(),
                cfg.connect,
                cfg.connect_timeout
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let connect_seconds = base.elapsed().as_secs_f64();

    // Sending: connection i sends at start + i*period/N + k*period.
    let period = Duration::from_secs_f64(1.0 / cfg.rate_hz);
    let start = Instant::now();
    let window_start = start + Duration::from_secs_f64(cfg.warmup);
    let window_end = window_start + Duration::from_secs_f64(cfg.seconds);
    let drain_end = window_end + Duration::from_secs_f64(cfg.drain);
    let n = conns.len() as u32;
    for (i, c) in conns.iter_mut().enumerate() {
        c.next_send = start + period * i as u32 / n;
    }
    let flags = send_flags(cfg.reliable, cfg.tuned);
    let mut out = ClientOutcome {
        connect_seconds,
        ..Default::default()
    };
    let mut buf = vec![0u8; cfg.payload];
    let mut received = Vec::with_capacity(RECEIVE_BATCH);
    let mut cpu_start: Option<f64> = None;
    loop {
        let now = Instant::now();
        if now >= drain_end {
            break;
        }
        if cpu_start.is_none() && now >= window_start {
            cpu_start = Some(cpu_now());
        }
        global.poll_callbacks();
        for (i, c) in conns.iter_mut().enumerate() {
            for event in c.socket.receive_events() {
                let info = event.info();
                if matches!(
                    info.state(),
                    State::k_ESteamNetworkingConnectionState_ClosedByPeer
                        | State::k_ESteamNetworkingConnectionState_ProblemDetectedLocally
                ) {
                    return Err(format!(
                        "GNS connection #{i} to {} closed during the run: {} (reason {})",
                        cfg.connect,
                        info.end_debug(),
                        info.end_reason()
                    ));
                }
            }
        }
        // Sends due now (never before the window's end).
        let now = Instant::now();
        for c in conns.iter_mut() {
            while c.next_send <= now && c.next_send < window_end {
                let send_at = c.next_send;
                let seq = c.next_seq;
                c.next_seq += 1;
                c.next_send += period;
                let measured = send_at >= window_start;
                let send_ns = Instant::now().duration_since(base).as_nanos() as u64;
                buf[..8].copy_from_slice(&seq.to_le_bytes());
                buf[8..16].copy_from_slice(&send_ns.to_le_bytes());
                let sent = sys::send(c.socket.connection(), &buf, flags);
                if measured {
                    if c.first_measured.is_none() {
                        c.first_measured = Some(seq);
                    }
                    c.last_measured = seq;
                    out.messages_sent += 1;
                    if sent.is_err() {
                        out.send_failed += 1;
                    }
                }
            }
        }
        // Echoes.
        loop {
            received.clear();
            let got = group.receive(&mut received, RECEIVE_BATCH)?;
            let now_ns = Instant::now().duration_since(base).as_nanos() as u64;
            for m in &received {
                let p = m.payload();
                if p.len() < 16 {
                    continue;
                }
                let Some(&i) = by_handle.get(&m.connection()) else {
                    continue;
                };
                let c = &mut conns[i];
                let seq = u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
                let send_ns = u64::from_le_bytes(p[8..16].try_into().expect("8 bytes"));
                let Some(first) = c.first_measured else {
                    continue; // a warm-up echo
                };
                if seq < first || seq > c.last_measured {
                    continue;
                }
                let idx = (seq - first) as usize;
                if c.seen.len() <= idx {
                    c.seen.resize(idx + 1, false);
                }
                if c.seen[idx] {
                    out.duplicates += 1;
                    continue;
                }
                c.seen[idx] = true;
                out.messages_delivered += 1;
                out.rtts_ns.push(now_ns.saturating_sub(send_ns));
            }
            if got < RECEIVE_BATCH {
                break;
            }
        }
        // Sleep 1 ms, or less when a send is due sooner.
        let next_due = conns
            .iter()
            .map(|c| c.next_send)
            .filter(|t| *t < window_end)
            .min();
        let now = Instant::now();
        let mut nap = Duration::from_millis(1);
        if let Some(t) = next_due {
            nap = nap.min(t.saturating_duration_since(now));
        }
        if !nap.is_zero() {
            std::thread::sleep(nap);
        }
    }
    out.elapsed_seconds = window_start.elapsed().as_secs_f64();
    out.cpu_seconds = (cpu_now() - cpu_start.unwrap_or(0.0)).max(0.0);
    // Close gracefully with linger so the server sees the close.
    for c in &conns {
        let _ = c
            .socket
            .close_connection(c.socket.connection(), 0, None, true);
    }
    global.poll_callbacks();
    drop(group);
    Ok(out)
}
