//! `keel-peer` (standalone stand-in until the shared harness lands): only the
//! `gns` library, with the contract's flags and JSON lines.

#[cfg(feature = "gns")]
mod gns;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Whole-process CPU seconds (user + system, all threads) from /proc (10 ms ticks).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the ")" of the command name: state is field 3; utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Resident set size in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

struct Args {
    lib: String,
    role: String,
    bind: Option<SocketAddr>,
    connect: Option<SocketAddr>,
    clients: usize,
    rate: f64,
    payload: usize,
    seconds: f64,
    warmup: f64,
    drain: f64,
    channel: String,
    tuned: bool,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let lib = it.next().ok_or("usage: keel-peer LIB server|client ...")?;
    let role = it.next().ok_or("usage: keel-peer LIB server|client ...")?;
    let mut a = Args {
        lib,
        role,
        bind: None,
        connect: None,
        clients: 1,
        rate: 60.0,
        payload: 400,
        seconds: 3.0,
        warmup: 0.5,
        drain: 1.0,
        channel: "reliable-ordered".into(),
        tuned: false,
    };
    while let Some(flag) = it.next() {
        if flag == "--tuned" {
            a.tuned = true;
            continue;
        }
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {v}: {e}");
        match flag.as_str() {
            "--bind" => a.bind = Some(v.parse().map_err(|e| bad(&e))?),
            "--connect" => a.connect = Some(v.parse().map_err(|e| bad(&e))?),
            "--clients" => a.clients = v.parse().map_err(|e| bad(&e))?,
            "--rate" => a.rate = v.parse().map_err(|e| bad(&e))?,
            "--payload" => a.payload = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = v.parse().map_err(|e| bad(&e))?,
            "--warmup" => a.warmup = v.parse().map_err(|e| bad(&e))?,
            "--drain" => a.drain = v.parse().map_err(|e| bad(&e))?,
            "--channel" => a.channel = v,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("keel-peer: {e}");
            std::process::exit(2);
        }
    };
    match (args.lib.as_str(), args.role.as_str()) {
        #[cfg(feature = "gns")]
        ("gns", "server") => {
            let stop = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone()).unwrap();
            signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone()).unwrap();
            let bind = args.bind.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap());
            match gns::run_server(
                bind,
                args.tuned,
                &stop,
                |a| eprintln!("ready {a}"),
                cpu_seconds,
                rss_bytes,
            ) {
                Ok(o) => {
                    let per_conn = o
                        .rss_at_peak
                        .saturating_sub(o.rss_before)
                        .checked_div(o.peak_connections)
                        .unwrap_or(0);
                    let line = serde_json::json!({
                        "role": "server", "library": "gns", "settings": gns::settings(args.tuned),
                        "tuned": args.tuned, "pump": gns::PUMP,
                        "messages_echoed": o.messages_echoed, "echo_failed": o.echo_failed, "accept_failed": o.accept_failed,
                        "connections": o.connections, "peak_connections": o.peak_connections,
                        "cpu_seconds": o.cpu_seconds,
                        "cpu_us_per_message": if o.messages_echoed > 0 { o.cpu_seconds * 1e6 / o.messages_echoed as f64 } else { 0.0 },
                        "rss_bytes": o.rss_at_peak, "rss_bytes_per_connection": per_conn,
                    });
                    println!("{line}");
                }
                Err(e) => {
                    eprintln!("keel-peer gns server: {e}");
                    println!(
                        "{}",
                        serde_json::json!({"role":"server","library":"gns","ok":false,"error":e})
                    );
                    std::process::exit(1);
                }
            }
        }
        #[cfg(feature = "gns")]
        ("gns", "client") => {
            let Some(connect) = args.connect else {
                eprintln!("keel-peer gns client: --connect ADDR is required");
                std::process::exit(2);
            };
            let reliable = match args.channel.as_str() {
                "reliable-ordered" => true,
                "unreliable" => false,
                other => {
                    eprintln!(
                        "keel-peer: --channel {other}: accepted: reliable-ordered, unreliable"
                    );
                    std::process::exit(2);
                }
            };
            let cfg = gns::ClientConfig {
                connect,
                clients: args.clients,
                rate_hz: args.rate,
                payload: args.payload,
                seconds: args.seconds,
                warmup: args.warmup,
                drain: args.drain,
                reliable,
                tuned: args.tuned,
                connect_timeout: std::time::Duration::from_secs(15),
            };
            let res = gns::run_client(&cfg, cpu_seconds);
            let (ok, error, o) = match res {
                Ok(o) => (true, None, o),
                Err(e) => {
                    eprintln!("keel-peer gns client: {e}");
                    (false, Some(e), Default::default())
                }
            };
            let mut r: Vec<u64> = o.rtts_ns.iter().map(|ns| ns / 1000).collect();
            r.sort_unstable();
            let line = serde_json::json!({
                "role": "client", "library": "gns", "settings": gns::settings(args.tuned),
                "tuned": args.tuned, "channel": args.channel, "payload_bytes": args.payload,
                "clients": args.clients, "rate_hz": args.rate, "elapsed_seconds": o.elapsed_seconds,
                "messages_sent": o.messages_sent, "messages_delivered": o.messages_delivered,
                "lost": o.messages_sent - o.messages_delivered.min(o.messages_sent),
                "duplicates": o.duplicates, "send_failed": o.send_failed,
                "rtt_min_us": r.first().copied().unwrap_or(0),
                "rtt_p50_us": percentile(&r, 0.50), "rtt_p99_us": percentile(&r, 0.99),
                "rtt_p999_us": percentile(&r, 0.999), "rtt_max_us": r.last().copied().unwrap_or(0),
                "cpu_seconds": o.cpu_seconds,
                "cpu_us_per_message": if o.messages_sent > 0 { o.cpu_seconds * 1e6 / o.messages_sent as f64 } else { 0.0 },
                "connect_seconds": o.connect_seconds,
                "pump": gns::PUMP, "ok": ok, "error": error,
            });
            println!("{line}");
            std::process::exit(if ok { 0 } else { 1 });
        }
        (lib, role) => {
            eprintln!("keel-peer: {lib} {role}: not built here (this stand-in has only `gns`, with --features gns)");
            std::process::exit(2);
        }
    }
}
