//! The C API against Rust keel-rudp, across processes and through keel's
//! link conditioner (run by scripts/test.sh, also under AddressSanitizer):
//!
//! 1. a C client (tests/c/client.c) connects with a connect token to a
//!    Rust `keel_rudp::Server` whose socket loses 5 % of datagrams each
//!    way and delays them 10 ms (3 ms jitter), exchanges 400-byte reliable
//!    and unreliable messages and receives the server's close reason;
//! 2. a Rust `keel_rudp::Client` on the same impaired link connects with
//!    a token to a C server (tests/c/server.c): the server's broadcast, 100
//!    echoes in order, then the server's stop reason.
//!
//! ```text
//! cargo run -p keel-rudp-ffi --example c_peers -- target/c-api/client target/c-api/server
//! ```
//! Exit status 0: both passed; 1: a check failed (stderr says which).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config, ConnectionHandle,
    Ctx, DisconnectReason, Handler, Server, ServerConfig, ServerSecurity, TokenMinter, TokenSpec,
    CLOSE_STOPPED,
};

/// The link: each direction of the Rust side's socket.
const LINK: &str = "loss=0.05,delay=10ms,jitter=3ms";
/// The least RTT that link allows: two delays less their jitter.
const MIN_RTT_US: u64 = 2 * (10_000 - 3_000);
const KEY: [u8; 32] = [0x5c; 32];
const MESSAGES: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(30);

fn config() -> Config {
    Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::Unreliable),
    ])
}

fn token(addr: SocketAddr) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    TokenMinter::new(KEY)
        .mint(&TokenSpec {
            server_addrs: vec![addr],
            expires_at: now + 60,
            client_id: 1,
            timeout_secs: 10,
            user_data: Vec::new(),
        })
        .expect("OS randomness")
        .to_text()
}

/// Waits for `child` at most `TIMEOUT`, then kills it.
fn wait(mut child: Child, name: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("{name}: {e}"))? {
            return if st.success() {
                Ok(())
            } else {
                Err(format!("{name} exited with {st}"))
            };
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            return Err(format!("{name} still running after {TIMEOUT:?}: killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the Rust server saw.
#[derive(Debug)]
enum ServerSaw {
    Done { reliable: usize },
    Ended(DisconnectReason),
}

/// Echoes every message; on "done" closes with 4242, "game over".
struct Echo {
    tx: mpsc::Sender<ServerSaw>,
    reliable: usize,
}

impl Handler for Echo {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        if channel == 0 && data == b"done" {
            let _ = self.tx.send(ServerSaw::Done {
                reliable: self.reliable,
            });
            ctx.close(conn, 4242, "game over");
            return;
        }
        if channel == 0 {
            self.reliable += 1;
        }
        // A refused echo would show as a missing one at the C client.
        let _ = ctx.send(conn, channel, data);
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, reason: &DisconnectReason) {
        let _ = self.tx.send(ServerSaw::Ended(reason.clone()));
    }
}

/// Message `i` of the Rust client: 400 bytes (a game tick's input), so
/// the exchange takes dozens of packets and the link loses some.
fn message(i: usize) -> Vec<u8> {
    let mut m = format!("m{i}:").into_bytes();
    m.resize(400, b'.');
    m
}

fn c_client_to_rust_server(bin: &str) -> Result<(), String> {
    let addr = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| format!("a free port: {e}"))?;
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).map_err(|e| e.to_string())?;
    let mut sc = ServerConfig::new(
        config(),
        ServerSecurity::Tokens {
            key: KEY,
            public_addrs: vec![addr],
        },
    );
    sc.udp.send_impairment = Some(format!("{LINK},seed=1").parse().expect("link"));
    sc.udp.recv_impairment = Some(format!("{LINK},seed=2").parse().expect("link"));
    let (tx, rx) = mpsc::channel();
    let server = Server::bind(rt.handles(), addr, sc, |_| Echo {
        tx: tx.clone(),
        reliable: 0,
    })
    .map_err(|e| format!("bind {addr}: {e}"))?;
    let child = Command::new(bin)
        .args([addr.to_string(), token(addr), MIN_RTT_US.to_string()])
        .spawn()
        .map_err(|e| format!("run {bin}: {e}"))?;
    let result = wait(child, "the C client");
    // The server's own DISCONNECTED (LOCAL) comes once its CLOSE is
    // acknowledged, or after its close_timeout (2 s) when the C client's
    // acknowledgement was lost on the link and the client has exited.
    let mut saw: Vec<ServerSaw> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !saw.iter().any(|s| matches!(s, ServerSaw::Ended(_))) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(s) => saw.push(s),
            Err(_) => break,
        }
    }
    server.stop();
    rt.stop().map_err(|e| format!("runtime: {e:?}"))?;
    result?;
    let done = saw
        .iter()
        .any(|s| matches!(s, ServerSaw::Done { reliable } if *reliable == MESSAGES));
    let ended = saw.iter().any(|s| {
        matches!(s, ServerSaw::Ended(DisconnectReason::Local { code: 4242, reason }) if reason == "game over")
    });
    if !done || !ended {
        return Err(format!("the Rust server saw {saw:?}"));
    }
    println!("c_peers: C client -> Rust server: passed ({saw:?})");
    Ok(())
}

/// What the Rust client saw.
#[derive(Debug)]
enum ClientSaw {
    Welcome,
    Echoed(usize),
    // Read through Debug, in the failure message.
    #[allow(dead_code)]
    OutOfOrder(Vec<u8>),
    Ended(DisconnectReason),
}

/// Waits for the broadcast, sends `MESSAGES` reliable messages, checks
/// their echoes in order, then asks the server to stop.
struct Player {
    tx: mpsc::Sender<ClientSaw>,
    welcomed: bool,
    next: usize,
}

impl Handler for Player {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, _: u8, data: &[u8]) {
        if !self.welcomed {
            if data == b"welcome" {
                self.welcomed = true;
                let _ = self.tx.send(ClientSaw::Welcome);
                for i in 0..MESSAGES {
                    let _ = ctx.send(conn, 0, &message(i));
                }
            } else {
                let _ = self.tx.send(ClientSaw::OutOfOrder(data.to_vec()));
            }
            return;
        }
        if data != message(self.next).as_slice() {
            let _ = self.tx.send(ClientSaw::OutOfOrder(data.to_vec()));
            return;
        }
        self.next += 1;
        if self.next == MESSAGES {
            let _ = self.tx.send(ClientSaw::Echoed(self.next));
            let _ = ctx.send(conn, 0, b"stop");
        }
    }

    fn disconnected(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, reason: &DisconnectReason) {
        let _ = self.tx.send(ClientSaw::Ended(reason.clone()));
    }
}

fn rust_client_to_c_server(bin: &str) -> Result<(), String> {
    let hex: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = Command::new(bin)
        .args(["127.0.0.1:0", &hex])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {bin}: {e}"))?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line)
        .map_err(|e| format!("the C server's first line: {e}"))?;
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("the C server said {line:?}, not \"listening ADDR\""))?;
    // The rest of its output, printed as it comes.
    let echo = std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            println!("{l}");
        }
    });
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).map_err(|e| e.to_string())?;
    let text = token(addr);
    let mut cc = ClientConfig::new(
        config(),
        ClientSecurity::Token(text.parse().map_err(|e| format!("token: {e}"))?),
    );
    cc.udp.send_impairment = Some(format!("{LINK},seed=3").parse().expect("link"));
    cc.udp.recv_impairment = Some(format!("{LINK},seed=4").parse().expect("link"));
    let (tx, rx) = mpsc::channel();
    let client = Client::connect(
        rt.next_reactor(),
        addr,
        cc,
        Player {
            tx,
            welcomed: false,
            next: 0,
        },
    )
    .map_err(|e| format!("connect: {e}"))?;
    let mut saw = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while let Ok(s) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let end = matches!(s, ClientSaw::Ended(_));
        saw.push(s);
        if end {
            break;
        }
    }
    // The client stays up (acknowledging the server's close) until the
    // C server is done.
    let result = wait(child, "the C server");
    let _ = echo.join();
    client.stop();
    rt.stop().map_err(|e| format!("runtime: {e:?}"))?;
    result?;
    let ok = matches!(
        saw.as_slice(),
        [
            ClientSaw::Welcome,
            ClientSaw::Echoed(MESSAGES),
            ClientSaw::Ended(DisconnectReason::Remote { code: CLOSE_STOPPED, reason }),
        ] if reason == "c server stopping"
    );
    if !ok {
        return Err(format!("the Rust client saw {saw:?}"));
    }
    println!("c_peers: Rust client -> C server: passed ({saw:?})");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [client, server] = args.as_slice() else {
        eprintln!("usage: c_peers C_CLIENT_BINARY C_SERVER_BINARY");
        return ExitCode::from(2);
    };
    let mut failed = false;
    for r in [
        c_client_to_rust_server(client),
        rust_client_to_c_server(server),
    ] {
        if let Err(e) = r {
            eprintln!("c_peers: FAILED: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        println!("c_peers: all passed");
        ExitCode::SUCCESS
    }
}
