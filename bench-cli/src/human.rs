//! The summary a person reads: a few lines per run or `serve` (what ran,
//! throughput, p50/p99/p99.9 RTT, CPU, drops and errors, ok or why not).
//! The JSON line stays the record; this is its digest, never parsed.
//! Where it is printed is decided in `crate::present`.

use std::fmt::Write as _;

use crate::flags::FlagError;
use crate::output::RunReport;
use crate::serve::ServeSummary;

/// `141234` as `141,234`.
fn thousands(n: u64) -> String {
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
fn micros(us: Option<f64>) -> String {
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

/// The configuration of a run in one line.
fn run_config(r: &RunReport) -> String {
    let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    let threads = u64::from(r.config.io_threads.unwrap_or(0));
    let io = match r.config.io_model {
        Some("sharded") => format!("sharded: {}, 1 thread each", count(threads, "context")),
        Some(model) => format!("{model}: 1 context, {}", count(threads, "thread")),
        None => "?".to_string(),
    };
    let mut s = format!(
        "udp/{}, payload {} B, {}, window {}, {io}",
        r.config.address_family.unwrap_or("?"),
        opt(r.config.payload_bytes),
        count(u64::from(r.config.clients.unwrap_or(0)), "client"),
        opt(r.config.window.map(u64::from)),
    );
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

/// Lost echoes and kernel drops.
fn run_losses(r: &RunReport) -> String {
    let drops = r.drops.kernel_rcvbuf_drops.unwrap_or(0);
    let warmup = r.drops.udp_lost_warmup_messages.unwrap_or(0);
    format!(
        "{}{} of {} sent lost{}, {} kernel receive-buffer drops",
        if r.checks.udp_lost_messages == 0 && warmup == 0 && drops == 0 {
            "none: "
        } else {
            ""
        },
        thousands(r.checks.udp_lost_messages),
        thousands(r.throughput.messages_sent),
        if warmup == 0 {
            String::new()
        } else {
            format!(" (and {} in the warm-up)", thousands(warmup))
        },
        thousands(drops)
    )
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
    let _ = writeln!(s, "keel-bench: {}", run_config(r));
    let _ = writeln!(
        s,
        "  throughput  {} round trips/s, {:.1} MiB/s of payload (both directions)",
        thousands(r.throughput.roundtrips_per_second.round() as u64),
        r.throughput.payload_mib_per_second
    );
    let _ = writeln!(
        s,
        "  RTT         p50 {}, p99 {}, p99.9 {} (max {}; {} samples)",
        micros(r.rtt.rtt_p50_us),
        micros(r.rtt.rtt_p99_us),
        micros(r.rtt_extra.rtt_p999_us),
        micros(r.rtt_extra.rtt_max_us),
        thousands(r.rtt.rtt_samples)
    );
    if let Some(Some(size)) = r.bulk.transfer_bytes {
        let _ = writeln!(
            s,
            "  bulk        {} transfers of {} completed, goodput {:.2} MB/s (the RTT line is \
             completion time)",
            thousands(r.throughput.messages),
            bytes(size),
            r.bulk.goodput_bytes_per_second.flatten().unwrap_or(0.0) / 1e6
        );
    }
    let _ = writeln!(
        s,
        "  CPU         {:.1} % (100 = one core), peak RSS {}",
        r.cpu.cpu_percent,
        r.cpu.peak_rss_bytes.map_or_else(|| "?".to_string(), bytes)
    );
    let _ = writeln!(s, "  losses      {}", run_losses(r));
    let _ = writeln!(s, "  errors      {}", run_errors(r));
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

/// A rejected command line, with where to look.
pub(crate) fn bad_args(err: &FlagError) -> String {
    format!("keel-bench: {err}\n  (keel-bench --help lists every flag and what it accepts)\n")
}

/// A command that could not start (`serve` could not bind, `report` could
/// not read).
pub(crate) fn failed(what: &str, error: &str) -> String {
    format!("keel-bench {what}: FAILED: {error}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
