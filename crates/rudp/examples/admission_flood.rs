//! An attacker tries to fill a real keel-rudp server's connection table
//! on loopback while real players connect; prints what the attacker held
//! and how long each player took to connect (the figures of
//! `docs/security.md`, "Limits: admission").
//!
//! ```text
//! cargo run --release -p keel-rudp --example admission_flood                          # one token, 64 sockets
//! cargo run --release -p keel-rudp --example admission_flood -- --insecure            # insecure mode, 64 sockets
//! cargo run --release -p keel-rudp --example admission_flood -- --insecure --admission off
//! cargo run --release -p keel-rudp --example admission_flood -- --lanes 4              # a 4-lane server
//! ```
//!
//! The attacker is 64 UDP sockets on 127.0.0.1 that run the handshake
//! again and again as fast as they can, each time with a fresh nonce: in
//! token mode all with one connect token, in insecure mode with none.
//! Every connection it gets is kept open. A player connects from
//! 127.0.0.2 (another address on loopback) every 250 ms while the attack
//! runs (`--seconds`, default 3, at most 60). The server has `--lanes`
//! lanes (default 1, at most 16; more than 1 needs Linux); the lanes
//! the attacker's connections landed on are printed.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    Admission, ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config,
    ConnectToken, ConnectionHandle, Ctx, DisconnectReason, Handler, Server, ServerConfig,
    ServerSecurity, State, TokenMinter, TokenSpec,
};
use keel_rudp_proto::wire::{Header, Reader};
use keel_rudp_proto::{Connection, Event};

const KEY: [u8; 32] = [0x42; 32];
const SOCKETS: usize = 64;

fn public_addr() -> SocketAddr {
    "203.0.113.7:4000".parse().expect("an address")
}

fn channels() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

fn mint(client_id: u64) -> ConnectToken {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    TokenMinter::new(KEY)
        .mint(&TokenSpec {
            server_addrs: vec![public_addr()],
            expires_at: now + 120,
            client_id,
            timeout_secs: 10,
            user_data: Vec::new(),
        })
        .expect("a valid token spec")
}

/// The server's game: nothing to do.
struct Quiet;
impl Handler for Quiet {
    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
}

/// A player's handler: reports the end of its handshake.
struct Player(mpsc::Sender<Result<Instant, DisconnectReason>>);
impl Handler for Player {
    fn connected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle) {
        let _ = self.0.send(Ok(Instant::now()));
    }
    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, _: &[u8]) {}
    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, r: &DisconnectReason) {
        let _ = self.0.send(Err(r.clone()));
    }
}

struct Args {
    insecure: bool,
    admission: bool,
    seconds: f64,
    lanes: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        insecure: false,
        admission: true,
        seconds: 3.0,
        lanes: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--insecure" => a.insecure = true,
            "--admission" => {
                a.admission = match it.next().as_deref() {
                    Some("on") => true,
                    Some("off") => false,
                    other => return Err(format!("--admission: {other:?}, on or off accepted")),
                }
            }
            "--seconds" => {
                let v = it.next().ok_or("--seconds: a value")?;
                a.seconds = v.parse().map_err(|e| format!("--seconds {v}: {e}"))?;
                if !(0.5..=60.0).contains(&a.seconds) {
                    return Err(format!("--seconds {v}: 0.5 to 60 accepted"));
                }
            }
            "--lanes" => {
                let v = it.next().ok_or("--lanes: a value")?;
                a.lanes = v.parse().map_err(|e| format!("--lanes {v}: {e}"))?;
                if !(1..=16).contains(&a.lanes) {
                    return Err(format!("--lanes {v}: 1 to 16 accepted"));
                }
            }
            other => {
                return Err(format!(
                    "unknown flag {other}; expected --insecure, --admission on|off, --seconds S, \
                     --lanes N"
                ))
            }
        }
    }
    Ok(a)
}

/// One attacker socket: the handshake in flight, and the connections it
/// got (kept, never used).
struct Socket {
    udp: UdpSocket,
    conn: Connection,
    held: Vec<Connection>,
}

/// What the attacker got: handshakes finished, accepted, refusals by
/// code, connections still open at the end.
type Outcome = (u64, u64, BTreeMap<u64, u64>, usize);

/// 64 sockets run the handshake as fast as they can until `end`.
fn attack(
    target: SocketAddr,
    stolen: Option<ConnectToken>,
    end: Instant,
) -> Result<Outcome, String> {
    let security = || match &stolen {
        Some(t) => ClientSecurity::Token(t.clone()),
        None => ClientSecurity::Insecure,
    };
    let mut nonce: u128 = 0;
    let mut fresh = |now| {
        nonce += 1;
        Connection::connect(channels(), security(), nonce.to_be_bytes(), now)
            .map_err(|e| e.to_string())
    };
    let start = Instant::now();
    let mut sockets = Vec::with_capacity(SOCKETS);
    for _ in 0..SOCKETS {
        let udp = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        udp.set_nonblocking(true).map_err(|e| e.to_string())?;
        sockets.push(Socket {
            udp,
            conn: fresh(start)?,
            held: Vec::new(),
        });
    }
    let (mut attempts, mut connected) = (0u64, 0u64);
    let mut refusals = BTreeMap::<u64, u64>::new();
    let (mut buf, mut rbuf) = (vec![0u8; 1500], vec![0u8; 1500]);
    // Bounded by the clock: until `end`.
    while Instant::now() < end {
        let now = Instant::now();
        for s in &mut sockets {
            while let Some(n) = s.conn.poll_transmit(now, &mut buf) {
                let _ = s.udp.send_to(&buf[..n], target);
            }
            while let Ok((n, _)) = s.udp.recv_from(&mut rbuf) {
                // A short packet goes to the held connection it names (a
                // CLOSE when one is replaced); a handshake reply to the
                // handshake in flight.
                let to = match Header::decode(&mut Reader::new(&rbuf[..n])) {
                    Ok(Header::Short { cid, .. }) => {
                        s.held.iter_mut().find(|c| c.connection_id() == cid)
                    }
                    _ => None,
                };
                to.unwrap_or(&mut s.conn).handle_datagram(now, &rbuf[..n]);
            }
            if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                s.conn.handle_timeout(now);
            }
            let done = match s.conn.poll_event() {
                Some(Event::Connected) => {
                    connected += 1;
                    true
                }
                Some(Event::Disconnected(DisconnectReason::Remote { code, .. })) => {
                    *refusals.entry(code).or_default() += 1;
                    true
                }
                Some(Event::Disconnected(_)) => true,
                _ => false,
            };
            if done {
                attempts += 1;
                let got = std::mem::replace(&mut s.conn, fresh(now)?);
                if got.state() == State::Connected {
                    s.held.push(got);
                }
            }
        }
    }
    // Its connections still open at the end (the others were replaced).
    let held = sockets
        .iter()
        .flat_map(|s| &s.held)
        .filter(|c| c.state() == State::Connected)
        .count();
    Ok((attempts, connected, refusals, held))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
    let (security, stolen) = if args.insecure {
        (ServerSecurity::Insecure, None)
    } else {
        (
            ServerSecurity::Tokens {
                key: KEY,
                public_addrs: vec![public_addr()],
            },
            Some(mint(666)),
        )
    };
    let mut sc = ServerConfig::new(channels(), security);
    sc.lanes = args.lanes;
    if !args.admission {
        sc.admission = Admission::OFF;
    }
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse()?, sc, |_| Quiet)?;
    let target = server.local_addr();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.seconds);
    let attacker = {
        let stolen = stolen.clone();
        std::thread::spawn(move || attack(target, stolen, end))
    };
    // The players, one every 250 ms while the attack runs.
    let mut players = Vec::new();
    let mut next_player = start + Duration::from_millis(250);
    while next_player < end {
        std::thread::sleep(next_player.saturating_duration_since(Instant::now()));
        next_player += Duration::from_millis(250);
        let mut cc = ClientConfig::new(
            channels(),
            match &stolen {
                Some(_) => ClientSecurity::Token(mint(players.len() as u64)),
                None => ClientSecurity::Insecure,
            },
        );
        cc.local = Some("127.0.0.2:0".parse()?);
        // A channel of its own: its stop below reports its disconnect too.
        let (tx, rx) = mpsc::channel();
        let asked = Instant::now();
        let p = Client::connect(rt.next_reactor(), target, cc, Player(tx))?;
        let outcome = match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(at)) => Ok(at - asked),
            Ok(Err(r)) => Err(format!("{r:?}")),
            Err(_) => Err("no answer within 5 s".to_owned()),
        };
        players.push(outcome);
        p.stop();
    }
    let (attempts, connected, refusals, held) = attacker.join().expect("the attacker")?;
    let st = server.stats();
    println!(
        "mode: {}, admission {}, {} s, {SOCKETS} attacker sockets, {} server lanes",
        if args.insecure {
            "insecure"
        } else {
            "one connect token"
        },
        if args.admission {
            "on (defaults)"
        } else {
            "off"
        },
        args.seconds,
        args.lanes
    );
    println!(
        "attacker: {attempts} handshakes finished, {connected} accepted, refused by code {refusals:?}"
    );
    println!(
        "server: {} connections held at the end ({} created, {} removed), {} replaced, \
         refused: {} address limit, {} rate limit, {} in all",
        st.connections_created - st.connections_removed,
        st.connections_created,
        st.connections_removed,
        st.connections_replaced,
        st.refused_address_limit,
        st.refused_rate_limit,
        st.refused
    );
    let per_lane: Vec<u64> = (0..args.lanes)
        .map(|i| server.lane_stats(i).map_or(0, |s| s.connections_created))
        .collect();
    println!("connections created per lane (players included): {per_lane:?}");
    let ok: Vec<Duration> = players.iter().filter_map(|p| p.clone().ok()).collect();
    let mut ms: Vec<f64> = ok.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "attacker holds {held} open connections at the end; players from 127.0.0.2: {} of {} connected, connect time ms min {:.2} median {:.2} max {:.2}",
        ok.len(),
        players.len(),
        ms.first().copied().unwrap_or(f64::NAN),
        ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN),
        ms.last().copied().unwrap_or(f64::NAN),
    );
    if let Some(Err(e)) = players.iter().find(|p| p.is_err()) {
        println!("first player refused: {e}");
    }
    server.stop();
    rt.stop()?;
    Ok(())
}
