//! The charts of `scripts/rudp-peers.sh`'s records (`report::peers`): per
//! case and channel, p99 latency, server CPU per message and wire bytes
//! per payload byte against loss, one line per library (and tuning), drawn
//! as the keel-rudp benchmark's line charts (`lines`).

use super::lines::{draw, Lines, Point, Series};
use crate::report::peers::{case_words, Group};

/// One chart: file prefix, field, title, y axis words, scale, log axis.
struct Metric {
    prefix: &'static str,
    field: &'static str,
    title: &'static str,
    y_desc: &'static str,
    y_fmt: fn(f64) -> String,
    scale: f64,
    log: bool,
}

const METRICS: [Metric; 3] = [
    Metric {
        prefix: "peers-p99",
        field: "rtt_p99_us",
        title: "p99 delivery latency against loss",
        y_desc: "p99 latency, ms (lower is better)",
        y_fmt: |v| format!("{v:.0}"),
        scale: 1000.0,
        log: true,
    },
    Metric {
        prefix: "peers-cpu",
        field: "server_cpu_us_per_message",
        title: "Server CPU per message against loss (whole process)",
        y_desc: "server CPU, µs per message (lower is better)",
        y_fmt: |v| format!("{v:.0}"),
        scale: 1.0,
        log: false,
    },
    Metric {
        prefix: "peers-wire",
        field: "wire_bytes_per_payload_byte",
        title: "Wire bytes per payload byte at the relay against loss",
        y_desc: "wire bytes / payload byte (lower is better)",
        y_fmt: |v| format!("{v:.2}"),
        scale: 1.0,
        log: false,
    },
];

/// Every chart of `groups`: (file name, SVG), for each case and channel
/// with at least two loss levels measured (in-process calibration runs
/// are tabled only).
pub(in crate::report) fn peers_svgs(groups: &[Group<'_>]) -> Result<Vec<(String, String)>, String> {
    let mut sections: Vec<(&str, &str)> = Vec::new();
    for g in groups {
        let k = (g.case.as_str(), g.channel.as_str());
        if !["calibration-inprocess", "relay-cost", "relay-load"].contains(&g.case.as_str())
            && !sections.contains(&k)
        {
            sections.push(k);
        }
    }
    let mut out = Vec::new();
    for (case, channel) in sections {
        let mine: Vec<&Group<'_>> = groups
            .iter()
            .filter(|g| g.case == case && g.channel == channel)
            .collect();
        let mut losses: Vec<u64> = mine.iter().map(|g| (g.loss * 1e6) as u64).collect();
        losses.sort_unstable();
        losses.dedup();
        if losses.len() < 2 {
            continue;
        }
        for m in &METRICS {
            let mut series: Vec<Series> = Vec::new();
            for g in &mine {
                let Some(s) = g.spread(m.field) else { continue };
                let point = Point {
                    x: g.loss * 100.0,
                    y: crate::report::stats::Spread {
                        median: s.median / m.scale,
                        min: s.min / m.scale,
                        max: s.max / m.scale,
                    },
                    partial: g
                        .runs
                        .iter()
                        .any(|r| r.get("ok") != Some(&serde_json::Value::Bool(true))),
                };
                match series.iter_mut().find(|s| s.name == g.library) {
                    Some(s) => s.points.push(point),
                    None => series.push(Series {
                        name: g.library.clone(),
                        points: vec![point],
                    }),
                }
            }
            if series.is_empty() {
                continue;
            }
            let name = format!("{}-{case}-{channel}.svg", m.prefix);
            let lines = Lines {
                title: m.title.to_string(),
                subtitle: vec![format!(
                    "{}, {channel}; 50 ms RTT, loss each way; median over seeds, min-max whiskers; hollow: a seed failed",
                    case_words(case)
                )],
                x_desc: "loss each way, %".to_string(),
                y_desc: m.y_desc.to_string(),
                x_fmt: |v| format!("{v}"),
                y_fmt: m.y_fmt,
                log_when_apart: m.log,
                series,
            };
            out.push((name.clone(), draw(&lines, &name)?));
        }
    }
    Ok(out)
}
