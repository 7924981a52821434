//! `keel-bench compare BASELINE CANDIDATE`: two result files, the way
//! hyperfine compares commands. Runs are grouped by configuration as the
//! report groups them (the UDP echo's [`ConfigKey`](super::input::ConfigKey),
//! or the keel-rudp benchmark's key, the conditioner's seed left out); for
//! each configuration in both files, the median and the min–max over the
//! runs that passed of round trips per second and of the p99 RTT, and the
//! candidate's median over the baseline's.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::input::{Run, Source};
use super::stats::Spread;
use crate::flags::CompareConfig;
use crate::human::{micros, thousands};

/// A passing run's round trips per second and p99 RTT (µs).
type Figures = (Option<f64>, Option<f64>);

/// One file's runs, by configuration (in words).
struct Side {
    name: String,
    runs: usize,
    failed: usize,
    unreadable: usize,
    /// Configuration label to (round trips per second, p99 µs) per passing
    /// run.
    groups: BTreeMap<String, Vec<Figures>>,
}

fn read(path: &std::path::Path) -> Result<Side, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("compare: cannot read {}: {e}", path.display()))?;
    let name = path.display().to_string();
    let mut side = Side {
        name: name.clone(),
        runs: 0,
        failed: 0,
        unreadable: 0,
        groups: BTreeMap::new(),
    };
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let source = Source {
            file: name.clone(),
            line: i + 1,
        };
        let run = serde_json::from_str::<Value>(line)
            .map_err(|e| e.to_string())
            .and_then(|v| Run::from_json(&v, source));
        let Ok(run) = run else {
            side.unreadable += 1;
            continue;
        };
        side.runs += 1;
        let label = match &run.rudp {
            Some(r) => r.key.to_string(),
            None => run.key.to_string(),
        };
        let entry = side.groups.entry(label).or_default();
        if run.passed() {
            entry.push((run.roundtrips_per_second, run.rtt_p99_us));
        } else {
            side.failed += 1;
        }
    }
    if side.runs == 0 {
        return Err(format!(
            "compare: no result lines in {} ({} unreadable)",
            side.name, side.unreadable
        ));
    }
    Ok(side)
}

/// `141,234 [139,020 .. 143,100]`, from a spread and a formatter.
fn spread_text(s: &Spread, fmt: &dyn Fn(f64) -> String) -> String {
    format!("{} [{} .. {}]", fmt(s.median), fmt(s.min), fmt(s.max))
}

/// One metric's line: both sides and the ratio, or why not.
fn metric_line(
    out: &mut String,
    what: &str,
    base: Option<Spread>,
    cand: Option<Spread>,
    fmt: &dyn Fn(f64) -> String,
    higher_is_better: bool,
) {
    let (Some(b), Some(c)) = (base, cand) else {
        let _ = writeln!(out, "  {what:<14} not in both");
        return;
    };
    let ratio = if b.median > 0.0 {
        c.median / b.median
    } else {
        f64::NAN
    };
    let verdict = if !ratio.is_finite() {
        "no ratio (baseline 0)".to_string()
    } else if (ratio - 1.0).abs() < 0.005 {
        "the same".to_string()
    } else {
        let better = (ratio > 1.0) == higher_is_better;
        format!(
            "{ratio:.2}x the baseline ({})",
            if better { "better" } else { "worse" }
        )
    };
    let _ = writeln!(
        out,
        "  {what:<14} baseline {:<28} candidate {:<28} {verdict}",
        spread_text(&b, fmt),
        spread_text(&c, fmt)
    );
}

/// The comparison as text for a person; `Err` when a file cannot be read
/// or the two have no configuration in common.
pub fn compare(cfg: &CompareConfig) -> Result<String, String> {
    let base = read(&cfg.baseline)?;
    let cand = read(&cfg.candidate)?;
    let mut out = String::new();
    let side_text = |s: &Side| {
        let mut t = format!("{} ({} runs", s.name, s.runs);
        if s.failed > 0 {
            let _ = write!(t, ", {} failed and left out", s.failed);
        }
        if s.unreadable > 0 {
            let _ = write!(t, ", {} unreadable lines", s.unreadable);
        }
        t + ")"
    };
    let _ = writeln!(
        out,
        "baseline  {}\ncandidate {}",
        side_text(&base),
        side_text(&cand)
    );
    let mut common = 0;
    for (label, b_runs) in &base.groups {
        let Some(c_runs) = cand.groups.get(label) else {
            continue;
        };
        common += 1;
        let _ = writeln!(
            out,
            "\n{label}\n  runs passed    baseline {}, candidate {}",
            b_runs.len(),
            c_runs.len()
        );
        let rate = |runs: &[Figures]| Spread::of(runs.iter().filter_map(|r| r.0));
        let p99 = |runs: &[Figures]| Spread::of(runs.iter().filter_map(|r| r.1));
        let fmt_rate = |v: f64| thousands(v.round() as u64);
        let fmt_us = |v: f64| micros(Some(v));
        metric_line(
            &mut out,
            "round trips/s",
            rate(b_runs),
            rate(c_runs),
            &fmt_rate,
            true,
        );
        metric_line(
            &mut out,
            "p99 RTT",
            p99(b_runs),
            p99(c_runs),
            &fmt_us,
            false,
        );
    }
    for (side, other, which) in [(&base, &cand, "baseline"), (&cand, &base, "candidate")] {
        let only: Vec<&String> = side
            .groups
            .keys()
            .filter(|k| !other.groups.contains_key(*k))
            .collect();
        if !only.is_empty() {
            let _ = writeln!(out, "\nonly in the {which}:");
            for k in only {
                let _ = writeln!(out, "  {k}");
            }
        }
    }
    if common == 0 {
        return Err(format!(
            "compare: no configuration is in both {} and {}",
            base.name, cand.name
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(window: u64, rate: f64, p99: f64, ok: bool) -> String {
        let v = serde_json::json!({
            "schema_version": 1, "backend": "keel", "protocol": "udp", "address_family": "ipv4",
            "payload_bytes": 1024, "clients": 16, "window": window, "io_model": "shared",
            "handler_work": 0, "io_contexts": 1, "io_threads": 1, "server_io_lanes": 1,
            "batch": 64, "roundtrips_per_second": rate, "rtt_p99_us": p99, "ok": ok,
            "error": if ok { Value::Null } else { "udp_lost_messages = 1".into() },
        });
        format!("{v}\n")
    }

    fn files(name: &str, a: &str, b: &str) -> CompareConfig {
        let dir =
            std::env::temp_dir().join(format!("keel-bench-compare-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pa, pb) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
        std::fs::write(&pa, a).unwrap();
        std::fs::write(&pb, b).unwrap();
        CompareConfig {
            baseline: pa,
            candidate: pb,
        }
    }

    #[test]
    fn medians_spread_and_ratio_per_configuration() {
        let a = line(1, 100_000.0, 200.0, true)
            + &line(1, 110_000.0, 220.0, true)
            + &line(1, 120_000.0, 210.0, true)
            + &line(16, 50_000.0, 900.0, true);
        let b = line(1, 200_000.0, 100.0, true)
            + &line(1, 230_000.0, 105.0, true)
            + &line(1, 0.0, 0.0, false)
            + &line(4, 1.0, 1.0, true);
        let text = compare(&files("ok", &a, &b)).unwrap();
        assert!(text.contains("candidate "), "{text}");
        assert!(text.contains("4 runs, 1 failed and left out"), "{text}");
        assert!(
            text.contains("runs passed    baseline 3, candidate 2"),
            "{text}"
        );
        assert!(
            text.contains("baseline 110,000 [100,000 .. 120,000]"),
            "{text}"
        );
        // 215,000 / 110,000 = 1.95x, higher is better.
        assert!(text.contains("1.95x the baseline (better)"), "{text}");
        // p99: 102.5 / 210 = 0.49x, lower is better.
        assert!(text.contains("0.49x the baseline (better)"), "{text}");
        assert!(
            text.contains(
                "only in the baseline:\n  udp/ipv4, payload 1024 B, 16 clients, window 16"
            ),
            "{text}"
        );
        assert!(text.contains("only in the candidate:"), "{text}");
    }

    #[test]
    fn nothing_in_common_or_nothing_readable_is_an_error() {
        let e = compare(&files(
            "none",
            &line(1, 1.0, 1.0, true),
            &line(2, 1.0, 1.0, true),
        ))
        .unwrap_err();
        assert!(e.contains("no configuration is in both"), "{e}");
        let e = compare(&files("garbage", "junk\n", &line(1, 1.0, 1.0, true))).unwrap_err();
        assert!(e.contains("no result lines"), "{e}");
    }
}
