// Run: cargo run -p keel-udp --example game_server -- [--addr 127.0.0.1:9001] [--seconds 10] [--idle-ms 3000]
//
// A toy game server: players join with a first datagram `join <name>`
// (admission in `ServerHandler::accept`: anything else is turned away and
// counted), are welcomed with `welcome <name>`, then send inputs. A 60 Hz
// tick (a periodic lane timer started in `ServerHandler::started`) sends
// every player its own snapshot in one pass (`for_each_session`): the tick
// number (u64 LE), the player count (u32 LE) and that player's inputs so
// far (u32 LE). Players leave when they fall silent for `--idle-ms` (idle
// timeout). Joins and leaves are printed; it stops by itself after
// `--seconds N` (10 by default, and it says so), then prints the counters.
//
// Pair it with the client: cargo run -p keel-udp --example game_client

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime, TimerId};
use keel_udp::{DisconnectReason, Server, ServerConfig, ServerCtx, ServerHandler, Session};

/// 60 Hz.
const TICK: Duration = Duration::from_nanos(1_000_000_000 / 60);

struct Game {
    tick: u64,
    ticks: Arc<AtomicU64>,
}

/// What the server keeps per player.
struct Player {
    name: String,
    joined: Instant,
    inputs: u32,
}

impl ServerHandler for Game {
    type SessionState = Player;

    fn started(&mut self, ctx: &mut ServerCtx<'_, Player>) {
        ctx.timer(Instant::now() + TICK, Some(TICK));
    }

    fn accept(
        &mut self,
        ctx: &mut ServerCtx<'_, Player>,
        peer: SocketAddr,
        first: &[u8],
    ) -> Option<Player> {
        // Admission: only a `join <name>` opens a session (a real game would
        // check a token here). Nothing is kept for anyone else.
        let name = first.strip_prefix(b"join ")?;
        let name = String::from_utf8_lossy(name).into_owned();
        println!(
            "tick {:>5}: join  {name} from {peer} ({} players)",
            self.tick,
            ctx.session_count() + 1
        );
        Some(Player {
            name,
            joined: Instant::now(),
            inputs: 0,
        })
    }

    fn datagram(&mut self, s: &mut Session<'_, Player>, input: &[u8]) {
        if input.starts_with(b"join ") {
            let welcome = format!("welcome {}", s.state().name);
            let _ = s.send(welcome.as_bytes());
            return;
        }
        // A real game would apply the input to the world here.
        s.state().inputs += 1;
    }

    fn disconnected(
        &mut self,
        ctx: &mut ServerCtx<'_, Player>,
        peer: SocketAddr,
        player: Player,
        reason: DisconnectReason,
    ) {
        println!(
            "tick {:>5}: leave {} from {peer} ({reason}) after {:.1} s and {} inputs ({} players)",
            self.tick,
            player.name,
            player.joined.elapsed().as_secs_f64(),
            player.inputs,
            ctx.session_count()
        );
    }

    fn timer(&mut self, ctx: &mut ServerCtx<'_, Player>, _: TimerId) {
        self.tick += 1;
        self.ticks.store(self.tick, Ordering::Relaxed);
        let mut snapshot = [0u8; 16];
        snapshot[..8].copy_from_slice(&self.tick.to_le_bytes());
        snapshot[8..12].copy_from_slice(&(ctx.session_count() as u32).to_le_bytes());
        // Each player's own snapshot, read and sent in one pass.
        ctx.for_each_session(|s| {
            snapshot[12..].copy_from_slice(&s.state().inputs.to_le_bytes());
            let _ = s.send(&snapshot); // a refusal is counted
        });
    }
}

struct Args {
    addr: SocketAddr,
    seconds: u64,
    idle_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:9001".parse().unwrap(),
        seconds: 10,
        idle_ms: 3_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => a.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--idle-ms" => a.idle_ms = value()?.parse().map_err(|e| format!("--idle-ms: {e}"))?,
            "-h" | "--help" => {
                return Err(
                    "usage: game_server [--addr IP:PORT] [--seconds N] [--idle-ms N]".into(),
                )
            }
            other => return Err(format!("unknown flag {other} (try --help)")),
        }
    }
    if a.idle_ms == 0 {
        return Err("--idle-ms must be positive".into());
    }
    Ok(a)
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).expect("runtime");
    let ticks = Arc::new(AtomicU64::new(0));
    let config = ServerConfig {
        idle_timeout: Some(Duration::from_millis(args.idle_ms)),
        ..ServerConfig::default()
    };
    let t = ticks.clone();
    let server = Server::bind(rt.handles(), args.addr, config, move |_| Game {
        tick: 0,
        ticks: t.clone(),
    })
    .unwrap_or_else(|e| {
        eprintln!("game_server: {e}");
        std::process::exit(1)
    });
    println!(
        "game server on {}: 60 Hz, idle timeout {} ms; stops by itself after {} s (--seconds)",
        server.local_addr(),
        args.idle_ms,
        args.seconds
    );
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(args.seconds));
    let elapsed = start.elapsed();

    println!("{} s are up (--seconds): stopping", args.seconds);
    // Players still connected leave with "shut down".
    if !server.stop_and_wait(Duration::from_secs(2)) {
        eprintln!("game_server: the lanes did not finish stopping within 2 s");
    }
    rt.stop().expect("runtime stopped cleanly");
    let c = server.counters();
    let ticks = ticks.load(Ordering::Relaxed);
    println!(
        "{ticks} ticks in {:.2} s ({:.1} Hz); players: {} joined, {} timed out; \
         turned away {}; datagrams in {}, out {}; kernel drops {}, queue refusals {}, \
         send errors {}",
        elapsed.as_secs_f64(),
        ticks as f64 / elapsed.as_secs_f64(),
        c.sessions_opened,
        c.sessions_timed_out,
        c.sessions_rejected,
        c.datagrams_in,
        c.datagrams_out,
        c.kernel_drops,
        c.send_queue_rejections,
        c.send_errors
    );
}
