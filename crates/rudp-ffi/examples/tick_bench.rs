//! The game-tick case for the C API's benchmark (scripts/c-api-bench.py):
//! an echo server, and the Rust side of the comparison, N keel-rudp
//! clients sending 400 bytes reliably at 60 Hz. Its C twin is
//! bench/tick_clients.c (the same clients through the C API, polled from
//! a 60 Hz frame loop); the script runs both alternately and compares
//! their CPU per message.
//!
//! ```text
//! tick_bench server ADDR SECONDS              # echoes every message
//! tick_bench rust ADDR CLIENTS SECONDS        # prints one JSON line
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_rudp::{
    ChannelConfig, ChannelKind, Client, ClientConfig, ClientSecurity, Config, ConnectionHandle,
    Ctx, Handler, Server, ServerConfig, ServerSecurity,
};

const TICK: Duration = Duration::from_nanos(16_666_667);
const SIZE: usize = 400;

fn config() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

struct Echo;

impl Handler for Echo {
    fn message(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle, channel: u8, data: &[u8]) {
        let _ = ctx.send(conn, channel, data);
    }
}

/// Sends one 400-byte message a tick; counts echoes.
struct Player {
    conn: Option<ConnectionHandle>,
    next: Option<Instant>,
    end: Instant,
    sent: Arc<AtomicU64>,
    echoed: Arc<AtomicU64>,
    msg: [u8; SIZE],
}

impl Handler for Player {
    fn connected(&mut self, ctx: &mut Ctx<'_>, conn: ConnectionHandle) {
        self.conn = Some(conn);
        let first = ctx.now() + TICK;
        self.next = Some(first);
        ctx.tick_at(first);
    }

    fn tick(&mut self, ctx: &mut Ctx<'_>) {
        let (Some(conn), Some(due)) = (self.conn, self.next) else {
            return;
        };
        if due >= self.end {
            return;
        }
        if ctx.send(conn, 0, &self.msg).is_ok() {
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
        let next = due + TICK;
        self.next = Some(next);
        ctx.tick_at(next);
    }

    fn message(&mut self, _: &mut Ctx<'_>, _: ConnectionHandle, _: u8, data: &[u8]) {
        if data.len() == SIZE {
            self.echoed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn server(addr: SocketAddr, secs: u64) -> Result<(), String> {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).map_err(|e| e.to_string())?;
    let sc = ServerConfig::new(config(), ServerSecurity::Insecure);
    let server = Server::bind(rt.handles(), addr, sc, |_| Echo).map_err(|e| e.to_string())?;
    println!("listening {}", server.local_addr());
    std::thread::sleep(Duration::from_secs(secs));
    server.stop();
    rt.stop().map_err(|e| format!("{e:?}"))
}

fn rust_clients(addr: SocketAddr, n: usize, secs: u64) -> Result<(), String> {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).map_err(|e| e.to_string())?;
    let (sent, echoed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let end = Instant::now() + Duration::from_secs(secs);
    let mut msg = [0u8; SIZE];
    for (i, b) in msg.iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut clients = Vec::new();
    for _ in 0..n {
        let cc = ClientConfig::new(config(), ClientSecurity::Insecure);
        let p = Player {
            conn: None,
            next: None,
            end,
            sent: sent.clone(),
            echoed: echoed.clone(),
            msg,
        };
        clients.push(Client::connect(rt.next_reactor(), addr, cc, p).map_err(|e| e.to_string())?);
    }
    // The last echoes arrive a round trip after the last send.
    std::thread::sleep(end.saturating_duration_since(Instant::now()) + Duration::from_millis(200));
    for c in &clients {
        c.stop();
    }
    rt.stop().map_err(|e| format!("{e:?}"))?;
    println!(
        "{{\"client\":\"rust\",\"clients\":{n},\"seconds\":{secs},\"sent\":{},\"echoed\":{}}}",
        sent.load(Ordering::Relaxed),
        echoed.load(Ordering::Relaxed)
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |s: &String, what: &str| -> Result<u64, String> {
        s.parse()
            .map_err(|_| format!("{what}: expected a whole number, got {s:?}"))
    };
    let addr = |s: &String| -> Result<SocketAddr, String> {
        s.parse()
            .map_err(|_| format!("ADDR: expected IP:port, got {s:?}"))
    };
    let r = match args.as_slice() {
        [m, a, s] if m == "server" => addr(a).and_then(|a| server(a, num(s, "SECONDS")?)),
        [m, a, n, s] if m == "rust" => {
            addr(a).and_then(|a| rust_clients(a, num(n, "CLIENTS")? as usize, num(s, "SECONDS")?))
        }
        _ => Err(
            "usage: tick_bench server ADDR SECONDS | tick_bench rust ADDR CLIENTS SECONDS".into(),
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tick_bench: {e}");
            ExitCode::from(2)
        }
    }
}
