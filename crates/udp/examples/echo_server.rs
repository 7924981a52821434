// Run: cargo run -p keel-udp --release --example echo_server -- [--addr 127.0.0.1:9000] [--lanes 1] [--seconds 0]
//
// A UDP echo server: every datagram goes back to its sender. `--lanes N`
// opens N sockets on the port (SO_REUSEPORT), one receive lane and one
// reactor thread each. It prints the counters once a second while traffic
// flows, and runs until Ctrl-C, or for `--seconds N` (N > 0) and then
// prints the final counters. (No signal handler: Ctrl-C ends the process
// at once, so the last per-second line is the final word.)
//
// Try it: `nc -u 127.0.0.1 9000`, type a line, see it come back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_reactor::{IoModel, Runtime};
use keel_udp::{CounterSnapshot, Server, ServerConfig, ServerCtx, ServerHandler, Session};

struct Echo;

impl ServerHandler for Echo {
    type SessionState = ();

    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        // Refusals (queue full) are counted in the lane's counters.
        let _ = s.send(data);
    }
}

struct Args {
    addr: SocketAddr,
    lanes: usize,
    seconds: u64,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        addr: "127.0.0.1:9000".parse().unwrap(),
        lanes: 1,
        seconds: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => a.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--lanes" => a.lanes = value()?.parse().map_err(|e| format!("--lanes: {e}"))?,
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "-h" | "--help" => {
                return Err("usage: echo_server [--addr IP:PORT] [--lanes N] [--seconds N]".into())
            }
            other => return Err(format!("unknown flag {other} (try --help)")),
        }
    }
    Ok(a)
}

fn line(c: &CounterSnapshot) -> String {
    format!(
        "in {} dgrams / {} B, out {} dgrams / {} B, sessions {} open ({} opened, {} timed out), \
         kernel drops {}, queue refusals {}, send errors {}",
        c.datagrams_in,
        c.bytes_in,
        c.datagrams_out,
        c.bytes_out,
        c.sessions_open,
        c.sessions_opened,
        c.sessions_timed_out,
        c.kernel_drops,
        c.send_queue_rejections,
        c.send_errors
    )
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let rt = Runtime::new(IoModel::Sharded {
        reactors: args.lanes.max(1),
    })
    .expect("runtime");
    let config = ServerConfig {
        lanes: args.lanes,
        ..ServerConfig::default()
    };
    let server = Server::bind(rt.handles(), args.addr, config, |_| Echo).unwrap_or_else(|e| {
        eprintln!("echo_server: {e}");
        std::process::exit(1)
    });
    let until = match args.seconds {
        0 => "Ctrl-C".to_string(),
        n => format!("{n} s"),
    };
    println!(
        "echo server on {} ({} lane(s)), running for {until}",
        server.local_addr(),
        server.lanes()
    );

    let start = Instant::now();
    let mut last = server.counters();
    loop {
        let left = match args.seconds {
            0 => Duration::from_secs(1),
            n => Duration::from_secs(n).saturating_sub(start.elapsed()),
        };
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_secs(1)));
        let now = server.counters();
        if now != last {
            println!("[{:>3} s] {}", start.elapsed().as_secs(), line(&now));
            last = now;
        }
    }
    // Stop is asynchronous (each lane flushes and ends its sessions); give
    // the lanes a moment before the runtime goes.
    server.stop();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !server.is_stopped() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    rt.stop().expect("runtime stopped cleanly");
    println!("final: {}", line(&server.counters()));
}
