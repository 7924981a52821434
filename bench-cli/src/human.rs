//! The summary a person reads: a few lines per run or `serve` (what ran,
//! throughput, p50/p99/p99.9 RTT, CPU, drops and errors, ok or why not).
//! The JSON line stays the record; this is its digest, never parsed.
//! Where it is printed is decided in `crate::present`.

use std::fmt::Write as _;

use crate::flags::{FlagError, Subcommand};
use crate::output::RunReport;
use crate::serve::ServeSummary;

/// `141234` as `141,234`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration given in µs: `98.3 µs`, `1.25 ms`, `1.50 s`; `?` if unknown.
pub(crate) fn micros(us: Option<f64>) -> String {
    match us {
        None => "?".to_string(),
        Some(us) if us >= 1e6 => format!("{:.2} s", us / 1e6),
        Some(us) if us >= 1e3 => format!("{:.2} ms", us / 1e3),
        Some(us) if us >= 100.0 => format!("{us:.0} µs"),
        Some(us) => format!("{us:.1} µs"),
    }
}

/// Bytes in the largest fitting binary unit: `512 B`, `12.3 MiB`.
fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < units.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[unit])
    }
}

/// `1 thread`, `4 threads`.
fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{} {what}s", thousands(n))
    }
}

/// `a, b and c` for the non-empty parts.
fn listed(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// What a run measured, in words: the protocol as a person names it
/// (`udp`, `keel-rudp`, `KCP fast`), the address family, and the mode
/// (the closed-loop echo with its window, the open loop at a rate, or
/// one-way transfers).
fn run_what(r: &RunReport) -> String {
    let family = r.config.address_family.unwrap_or("?");
    let protocol = match r.config.protocol {
        "rudp" => {
            let mut p = format!(
                "keel-rudp/{family} {}",
                r.delivery.channel.unwrap_or("reliable-ordered")
            );
            if r.peer.encrypted == Some(true) {
                p.push_str(", encrypted");
            }
            if r.peer.bulk_channel == Some(true) {
                p.push_str(", bulk channel");
            }
            p
        }
        "kcp" => format!("KCP {}/{family}", r.peer.kcp_mode.unwrap_or("?")),
        other => format!("{other}/{family}"),
    };
    let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    let clients = count(u64::from(r.config.clients.unwrap_or(0)), "client");
    if let Some(Some(size)) = r.bulk.transfer_bytes {
        return format!(
            "{protocol}, transfers of {} one way (a 16 B receipt back), {clients}, one transfer \
             at a time each",
            bytes(size)
        );
    }
    let payload = opt(r.config.payload_bytes);
    match r.delivery.rate_hz.flatten() {
        Some(hz) => {
            format!("{protocol}, open loop at {hz} Hz per client, payload {payload} B, {clients}")
        }
        None => format!(
            "{protocol}, payload {payload} B, {clients}, window {}",
            opt(r.config.window.map(u64::from))
        ),
    }
}

/// The configuration of a run in one line.
fn run_config(r: &RunReport) -> String {
    let threads = u64::from(r.config.io_threads.unwrap_or(0));
    let io = match r.config.io_model {
        Some("sharded") => format!("sharded: {}, 1 thread each", count(threads, "context")),
        Some(model) => format!("{model}: 1 context, {}", count(threads, "thread")),
        None => "?".to_string(),
    };
    let mut s = format!("{}, {io}", run_what(r));
    match (&r.connect, r.config.server_io_lanes) {
        (Some(addr), _) => {
            let _ = write!(s, ", against {addr}");
        }
        (None, Some(lanes)) => {
            let _ = write!(s, ", {}", count(u64::from(lanes), "server lane"));
        }
        (None, None) => {}
    }
    let _ = write!(
        s,
        ", {} s (+{} s warm-up)",
        r.config.requested_seconds.unwrap_or(0.0),
        r.config.warmup_seconds.unwrap_or(0.0)
    );
    s
}

/// An impairment as `--impair` took it, without the keys at their
/// defaults or that do nothing (`dup=0`, the queue limits, a
/// `reorder-delay` with no reordering): `loss=0.1,delay=25ms,seed=7`.
fn link(spec: &str) -> String {
    let pairs: Vec<(&str, &str)> = spec
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let reorder = pairs.iter().any(|(k, v)| *k == "reorder" && *v != "0");
    let kept: Vec<String> = pairs
        .iter()
        .filter(|(k, v)| {
            !matches!(*k, "limit" | "limit-bytes")
                && (*k != "reorder-delay" || reorder)
                && !(*k != "seed" && matches!(*v, "0" | "0ms" | "0s"))
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if kept.is_empty() {
        spec.to_string()
    } else {
        kept.join(",")
    }
}

/// The link conditioner's settings, each way, if any.
fn run_link(r: &RunReport) -> Option<String> {
    let client = r.impair.impair.as_deref().filter(|s| *s != "off");
    let server = r.impair.impair_server.as_deref().filter(|s| *s != "off");
    if client.is_none() && server.is_none() {
        return None;
    }
    let each = |spec: Option<&str>| spec.map_or_else(|| "none".to_string(), link);
    let mut s = format!(
        "clients to server {}, server to clients {}",
        each(client),
        each(server)
    );
    let dropped = r.impair.conditioner_dropped.unwrap_or(0);
    let duplicated = r.impair.conditioner_duplicated.unwrap_or(0);
    let _ = write!(
        s,
        " ({} dropped, {} duplicated on purpose)",
        thousands(dropped),
        thousands(duplicated)
    );
    Some(s)
}

/// Throughput: round trips (echo), messages at a rate (open loop), or
/// transfers and their one-way goodput (`--transfer`).
fn run_throughput(r: &RunReport) -> String {
    let per_second = thousands(r.throughput.roundtrips_per_second.round() as u64);
    if let Some(Some(size)) = r.bulk.transfer_bytes {
        let goodput = r.bulk.goodput_bytes_per_second.flatten().unwrap_or(0.0);
        return format!(
            "goodput {:.1} MiB/s of payload one way ({} transfers of {} completed, {:.1} per second)",
            goodput / (1024.0 * 1024.0),
            thousands(r.throughput.messages),
            bytes(size),
            r.throughput.roundtrips_per_second
        );
    }
    let what = if r.delivery.rate_hz.flatten().is_some() {
        "messages answered/s"
    } else {
        "round trips/s"
    };
    format!(
        "{per_second} {what}, {:.1} MiB/s of payload (both directions)",
        r.throughput.payload_mib_per_second
    )
}

/// Lost echoes and kernel drops.
fn run_losses(r: &RunReport) -> String {
    let drops = r.drops.kernel_rcvbuf_drops.unwrap_or(0);
    let warmup = r.drops.udp_lost_warmup_messages.unwrap_or(0);
    let sent = r.throughput.messages_sent;
    let lost = r.checks.udp_lost_messages;
    let warmup_text = if warmup == 0 {
        String::new()
    } else {
        format!(" (and {} in the warm-up)", thousands(warmup))
    };
    let measured = if sent == 0 && lost == 0 {
        "nothing was sent in the measured phase".to_string()
    } else {
        format!("{} of {} sent lost", thousands(lost), thousands(sent))
    };
    format!(
        "{}{measured}{warmup_text}, {} kernel receive-buffer drops",
        if lost == 0 && warmup == 0 && drops == 0 && sent > 0 {
            "none: "
        } else {
            ""
        },
        thousands(drops)
    )
}

/// Why the clients of a `--connect` run got nothing back, when the cause
/// is plain: nothing listens at the address.
fn run_cause(r: &RunReport) -> Option<String> {
    let addr = r.connect.as_deref()?;
    let refused = r.checks.disconnect_errors > 0
        && r.error
            .as_deref()
            .is_some_and(|e| e.contains("connection refused"));
    refused.then(|| {
        format!(
            "nothing is listening at {addr} (the clients' datagrams came back as ICMP port \
             unreachable); start `keel-bench serve --bind {addr}` there first"
        )
    })
}

/// Every non-zero error counter other than the losses, by its JSON name.
fn run_errors(r: &RunReport) -> String {
    let errors: Vec<String> = r
        .error_counters()
        .into_iter()
        .filter(|(name, n)| *n != 0 && *name != "udp_lost_messages")
        .map(|(name, n)| format!("{name} = {}", thousands(n)))
        .collect();
    if errors.is_empty() {
        "none".to_string()
    } else {
        listed(&errors)
    }
}

/// The summary of a run: a few aligned lines, the last saying `ok` or why
/// not.
pub(crate) fn run_summary(r: &RunReport) -> String {
    let mut s = String::new();
    let bulk = matches!(r.bulk.transfer_bytes, Some(Some(_)));
    let _ = writeln!(s, "keel-bench: {}", run_config(r));
    if let Some(link) = run_link(r) {
        let _ = writeln!(s, "  link        {link}");
    }
    let _ = writeln!(s, "  throughput  {}", run_throughput(r));
    let _ = writeln!(
        s,
        "  {}p50 {}, p99 {}, p99.9 {} (min {}, max {}, std dev {}; {} samples)",
        if bulk { "completion  " } else { "RTT         " },
        micros(r.rtt.rtt_p50_us),
        micros(r.rtt.rtt_p99_us),
        micros(r.rtt_extra.rtt_p999_us),
        micros(r.rtt_min_us),
        micros(r.rtt_extra.rtt_max_us),
        micros(r.rtt_stddev_us),
        thousands(r.rtt.rtt_samples)
    );
    let _ = writeln!(
        s,
        "  CPU         {:.1} % (100 = one core), peak RSS {}",
        r.cpu.cpu_percent,
        r.cpu.peak_rss_bytes.map_or_else(|| "?".to_string(), bytes)
    );
    let _ = writeln!(s, "  losses      {}", run_losses(r));
    let _ = writeln!(s, "  errors      {}", run_errors(r));
    if let Some(cause) = run_cause(r) {
        let _ = writeln!(s, "  cause       {cause}");
    }
    let _ = writeln!(s, "  result      {}", verdict(r.ok, r.error.as_deref()));
    s
}

/// `ok`, or `FAILED: why`.
fn verdict(ok: bool, error: Option<&str>) -> String {
    if ok {
        "ok".to_string()
    } else {
        format!("FAILED: {}", error.unwrap_or("(no reason given)"))
    }
}

/// The summary of `serve` when it ends.
pub(crate) fn serve_summary(s: &ServeSummary) -> String {
    let mut out = String::new();
    let threads = u64::from(s.io_threads);
    let io = match s.io_model {
        "sharded" => format!("sharded: {}, 1 thread each", count(threads, "context")),
        model => format!("{model}: 1 context, {}", count(threads, "thread")),
    };
    let _ = writeln!(
        out,
        "keel-bench serve: {} ({} mode), {io}, {}; ended by {} after {:.1} s",
        s.bind,
        s.mode,
        count(u64::from(s.server_io_lanes), "lane"),
        if s.ended_by == "seconds" {
            "--seconds"
        } else {
            &s.ended_by
        },
        s.elapsed_seconds
    );
    let _ = writeln!(
        out,
        "  traffic     {} datagrams in, {} out ({} in, {} out)",
        thousands(s.datagrams_in),
        thousands(s.datagrams_out),
        bytes(s.bytes_in),
        bytes(s.bytes_out)
    );
    let _ = writeln!(
        out,
        "  answered    {} answered, {} warm-up and {} no-reply left unanswered by design",
        thousands(s.answered),
        thousands(s.unanswered_warmup),
        thousands(s.unanswered_no_reply)
    );
    let _ = writeln!(
        out,
        "  sessions    {} opened, {} timed out, {} refused, {} rejected, {} evicted \
         (at most {} per lane, {})",
        thousands(s.sessions_opened),
        thousands(s.sessions_timed_out),
        thousands(s.sessions_refused),
        thousands(s.sessions_rejected),
        thousands(s.sessions_evicted),
        thousands(u64::from(s.max_sessions)),
        s.full_policy
    );
    let _ = writeln!(
        out,
        "  drops       {} kernel receive-buffer drops, {} invalid, {} truncated, \
         {} discarded at stop, {} send rejections, {} send errors",
        thousands(s.kernel_rcvbuf_drops),
        thousands(s.invalid_messages),
        thousands(s.truncated),
        thousands(s.recv_discarded),
        thousands(s.send_rejections),
        thousands(s.send_errors)
    );
    let _ = writeln!(out, "  result      {}", verdict(s.ok, s.error.as_deref()));
    out
}

/// A rejected command line: the error, the subcommand's usage, and where
/// to look.
pub(crate) fn bad_args(err: &FlagError, sub: Subcommand) -> String {
    let help = match sub.word() {
        "" => "keel-bench --help".to_string(),
        word => format!("keel-bench {word} --help"),
    };
    format!(
        "keel-bench: {err}\n\n{}\n`{help}` lists every flag and what it accepts.\n",
        crate::flags::usage(sub)
    )
}

/// A command that could not start (`serve` could not bind, `report` could
/// not read).
pub(crate) fn failed(what: &str, error: &str) -> String {
    format!("keel-bench {what}: FAILED: {error}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{parse, Command, RunConfig};

    fn cfg(args: &[&str]) -> RunConfig {
        match parse(args.iter().copied()).unwrap() {
            Command::Run(c) => c,
            other => panic!("{other:?}"),
        }
    }

    /// A passing report of `args` with `messages` in one second.
    fn passed(args: &[&str], messages: u64) -> RunReport {
        let c = cfg(args);
        let mut r = RunReport::new(&c);
        r.checks.warmup_ok = true;
        r.throughput.messages = messages;
        r.throughput.messages_sent = messages;
        r.set_throughput(std::time::Duration::from_secs(1));
        r.finish();
        r
    }

    /// Issue 24: the summary said `udp/ipv4` for every protocol, "both
    /// directions" and "window 1" for a one-way transfer.
    #[test]
    fn a_transfer_names_its_protocol_and_one_direction() {
        let r = passed(&["--protocol", "rudp", "--transfer", "1048576"], 10);
        let s = run_summary(&r);
        let first = s.lines().next().unwrap();
        assert!(
            first.starts_with(
                "keel-bench: keel-rudp/ipv4 reliable-ordered, transfers of 1.0 MiB one way"
            ),
            "{s}"
        );
        assert!(!s.contains("udp/ipv4,") && !s.contains("window"), "{s}");
        assert!(!s.contains("both directions"), "{s}");
        // 10 transfers of 1 MiB in 1 s: 10 MiB/s one way, not the receipts too.
        assert!(
            s.contains(
                "throughput  goodput 10.0 MiB/s of payload one way (10 transfers of 1.0 MiB completed"
            ),
            "{s}"
        );
        assert!(s.contains("  completion  p50 "), "{s}");
    }

    #[test]
    fn kcp_at_a_rate_over_a_bad_link_says_so() {
        let mut r = passed(
            &[
                "--protocol",
                "kcp",
                "--rate",
                "60",
                "--clients",
                "8",
                "--impair",
                "loss=0.1,delay=25ms,seed=7",
            ],
            480,
        );
        r.peer.kcp_mode = Some("fast");
        r.delivery.rate_hz = Some(Some(60));
        r.impair.conditioner_dropped = Some(48);
        let s = run_summary(&r);
        assert!(s.starts_with("keel-bench: KCP fast/ipv4, open loop at 60 Hz per client, payload 1024 B, 8 clients, shared"), "{s}");
        assert!(s.contains("\n  link        clients to server loss=0.1,delay=25ms,seed=7, server to clients none (48 dropped, 0 duplicated on purpose)\n"), "{s}");
        assert!(s.contains("480 messages answered/s"), "{s}");
        let udp = run_summary(&passed(&[], 100));
        assert!(
            udp.starts_with("keel-bench: udp/ipv4, payload 1024 B, 1 client, window 1"),
            "{udp}"
        );
        assert!(!udp.contains("link "), "{udp}");
    }

    /// Issue 24: `--connect` to a closed port said "losses 2 of 0 sent
    /// lost" and left the reader to decode `disconnect_errors`.
    #[test]
    fn connect_to_a_closed_port_says_nothing_listens_there() {
        let c = cfg(&["--connect", "127.0.0.1:9"]);
        let mut r = RunReport::new(&c);
        r.checks.disconnect_errors = 1;
        r.checks.warmup_errors = 1;
        r.drops.udp_lost_warmup_messages = Some(1);
        r.error = Some(crate::loopback::disconnect_error(
            1,
            &keel_udp::DisconnectReason::Refused,
            "127.0.0.1:9".parse().unwrap(),
        ));
        r.finish();
        let s = run_summary(&r);
        assert!(!s.contains("of 0 sent"), "{s}");
        assert!(
            s.contains("losses      nothing was sent in the measured phase (and 1 in the warm-up)"),
            "{s}"
        );
        assert!(
            s.contains("cause       nothing is listening at 127.0.0.1:9"),
            "{s}"
        );
        assert!(s.contains("keel-bench serve --bind 127.0.0.1:9"), "{s}");
    }

    #[test]
    fn numbers_read_at_a_glance() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(141_234), "141,234");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(micros(Some(98.34)), "98.3 µs");
        assert_eq!(micros(Some(180.4)), "180 µs");
        assert_eq!(micros(Some(1250.0)), "1.25 ms");
        assert_eq!(micros(Some(2_500_000.0)), "2.50 s");
        assert_eq!(micros(None), "?");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(12 << 20), "12.0 MiB");
        assert_eq!(listed(&["a".into(), "b".into(), "c".into()]), "a, b and c");
    }
}
