// Run: cargo run -p keel-udp --example game_client -- [--server 127.0.0.1:9001] [--send-seconds 2] [--seconds 15]
//
// A toy player for the game_server example: joins with a keel `Client`
// (`join <name>`; it says "joined" when the server's welcome arrives),
// sends an input datagram every 100 ms for `--send-seconds`, prints the
// server's snapshots it receives (one line a second), then stops sending and
// waits for the server to time it out: when no tick has come for a second
// it says so and exits. It gives up after `--seconds` in any case, and
// exits with an error if the server's port is closed.
//
// Start the server first: cargo run -p keel-udp --example game_server

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime, TimerId};
use keel_udp::{Client, ClientConfig, ClientCtx, ClientHandler, DisconnectReason};

const INPUT_EVERY: Duration = Duration::from_millis(100);
const SILENCE: Duration = Duration::from_secs(1);

struct Player {
    name: String,
    joined: bool,
    started: Instant,
    send_for: Duration,
    sending: bool,
    inputs: u32,
    ticks: u64,
    last_tick: Option<(u64, Instant)>,
    done: mpsc::Sender<DisconnectReason>,
}

impl ClientHandler for Player {
    fn started(&mut self, ctx: &mut ClientCtx<'_>) {
        // Ask to join; inputs follow every 100 ms (the server keeps the
        // first ones only once it has admitted us).
        let join = format!("join {}", self.name);
        let _ = ctx.send(join.as_bytes());
        ctx.timer(Instant::now() + INPUT_EVERY, Some(INPUT_EVERY));
    }

    fn datagram(&mut self, ctx: &mut ClientCtx<'_>, data: &[u8]) {
        if let Some(name) = data.strip_prefix(b"welcome ") {
            if !self.joined {
                self.joined = true;
                println!("joined {} as {}", ctx.peer(), String::from_utf8_lossy(name));
            }
            return;
        }
        let Some((tick, players, inputs)) = parse_state(data) else {
            return;
        };
        self.ticks += 1;
        if self.ticks % 60 == 1 {
            println!(
                "tick {tick:>5}: {players} player(s) on the server, {inputs} of our inputs seen"
            );
        }
        self.last_tick = Some((tick, Instant::now()));
    }

    fn timer(&mut self, ctx: &mut ClientCtx<'_>, _: TimerId) {
        if self.sending {
            if self.started.elapsed() < self.send_for {
                self.input(ctx);
            } else {
                self.sending = false;
                println!(
                    "sent {} inputs; going quiet until the server times us out",
                    self.inputs
                );
            }
        } else if let Some((tick, at)) = self.last_tick {
            if at.elapsed() >= SILENCE {
                println!(
                    "no tick for {SILENCE:?} since tick {tick}: the server timed us out \
                     ({} ticks received)",
                    self.ticks
                );
                ctx.close();
            }
        }
    }

    fn disconnected(&mut self, _: &mut ClientCtx<'_>, reason: DisconnectReason) {
        let _ = self.done.send(reason);
    }
}

impl Player {
    fn input(&mut self, ctx: &mut ClientCtx<'_>) {
        self.inputs += 1;
        // Refusals (queue full) are counted; a game would just skip one.
        let _ = ctx.send(&self.inputs.to_le_bytes());
    }
}

/// The server's snapshot: tick (u64 LE), players (u32 LE), our inputs
/// (u32 LE).
fn parse_state(data: &[u8]) -> Option<(u64, u32, u32)> {
    let tick = u64::from_le_bytes(data.get(..8)?.try_into().ok()?);
    let players = u32::from_le_bytes(data.get(8..12)?.try_into().ok()?);
    let inputs = u32::from_le_bytes(data.get(12..16)?.try_into().ok()?);
    Some((tick, players, inputs))
}

struct Args {
    server: SocketAddr,
    send_seconds: u64,
    seconds: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        server: "127.0.0.1:9001".parse().unwrap(),
        send_seconds: 2,
        seconds: 15,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => a.server = value()?.parse().map_err(|e| format!("--server: {e}"))?,
            "--send-seconds" => {
                a.send_seconds = value()?
                    .parse()
                    .map_err(|e| format!("--send-seconds: {e}"))?
            }
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "-h" | "--help" => {
                return Err(
                    "usage: game_client [--server IP:PORT] [--send-seconds N] [--seconds N]".into(),
                )
            }
            other => return Err(format!("unknown flag {other} (try --help)")),
        }
    }
    Ok(a)
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).expect("runtime");
    let (done, finished) = mpsc::channel();
    let player = Player {
        name: format!("player-{}", std::process::id()),
        joined: false,
        started: Instant::now(),
        send_for: Duration::from_secs(args.send_seconds),
        sending: true,
        inputs: 0,
        ticks: 0,
        last_tick: None,
        done,
    };
    let client = Client::connect(rt.handle(), args.server, ClientConfig::default(), player)
        .unwrap_or_else(|e| {
            eprintln!("game_client: {e}");
            std::process::exit(1)
        });
    println!("joining {} from {}", args.server, client.local_addr());
    let code = match finished.recv_timeout(Duration::from_secs(args.seconds)) {
        Ok(DisconnectReason::Closed) => 0,
        Ok(reason) => {
            eprintln!("game_client: disconnected: {reason}");
            1
        }
        Err(_) => {
            println!("still connected after {} s; leaving", args.seconds);
            client.close();
            0
        }
    };
    let c = client.counters();
    println!(
        "datagrams in {}, out {}; receive errors {}",
        c.datagrams_in, c.datagrams_out, c.recv_errors
    );
    rt.stop().expect("runtime stopped cleanly");
    std::process::exit(code);
}
