//! `report.md`: the UDP echo matrix's summary table, excluded
//! configurations with their errors, loss per payload × window and links
//! to its charts; the keel-rudp benchmark's section (`rudp`); unreadable
//! lines. One function per section.

mod rudp;
mod text;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::charts::{LOSS_FILE, P99_FILE, RTT_CDF_FILE, THROUGHPUT_FILE};
use super::fields::opt;
use super::summary::{fmt_lost, Group, Report, Summary};
use crate::report::fields::count;
use text::{cell, code, fmt_opt, fmt_us, unreadable_count, UDP_HOW};

impl Report {
    /// The Markdown document; `charts` are the chart files written beside
    /// it, linked by name. The UDP echo matrix's sections are left out
    /// when the inputs hold only runs of the keel-rudp benchmark.
    pub(super) fn markdown(&self, charts: &[&str]) -> String {
        let mut md = String::new();
        intro(&mut md, self);
        if !self.groups.is_empty() || self.rudp.is_empty() {
            summary_table(&mut md, self);
            mixed_settings(&mut md, self);
            chart_links(&mut md, charts);
            excluded(&mut md, self);
            loss_table(&mut md, self);
        }
        rudp::section(&mut md, self, charts);
        rtt_distribution(&mut md, self, charts);
        unreadable(&mut md, self);
        md
    }
}

/// Round trips per second, whole.
fn fmt_rate(v: f64) -> String {
    format!("{v:.0}")
}

/// Title, inputs and counts, and how to read the numbers.
fn intro(md: &mut String, report: &Report) {
    let _ = writeln!(md, "# keel-bench report\n");
    if !report.rudp.is_empty() {
        rudp::intro(md, report);
        return;
    }
    let _ = writeln!(
        md,
        "Inputs: {} ({}, {}: {} summarised, {} excluded{}).\n",
        report
            .inputs
            .iter()
            .map(|s| code(s))
            .collect::<Vec<_>>()
            .join(", "),
        count(Some(report.run_count() as u64), "run"),
        count(Some(report.groups.len() as u64), "configuration"),
        report.summarised().count(),
        report.excluded().count(),
        unreadable_count(report)
    );
    md.push_str(UDP_HOW);
}

/// One row per summarised configuration.
fn summary_table(md: &mut String, report: &Report) {
    md.push_str("## Summary\n\n");
    let summarised: Vec<_> = report.summarised().collect();
    if summarised.is_empty() {
        md.push_str("No configuration passed every repetition.\n\n");
        return;
    }
    md.push_str(
        "| protocol | payload B | clients | window | IO model | IO threads | server lanes \
         | work | batch | runs | round trips/s median [min, max] | payload MiB/s | p50 µs \
         | p99 µs | p99.9 µs | CPU % |\n",
    );
    md.push_str(
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
         | ---: | ---: | ---: | ---: |\n",
    );
    for (g, s) in &summarised {
        summary_row(md, g, s);
    }
    md.push('\n');
}

fn summary_row(md: &mut String, g: &Group, s: &Summary) {
    let k = &g.key;
    let _ = writeln!(
        md,
        "| {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} [{}, {}] | {} | {} | {} | {} | {} |",
        cell(&opt(&k.protocol)),
        cell(&opt(&k.address_family)),
        opt(&k.payload_bytes),
        opt(&k.clients),
        opt(&k.window),
        cell(&opt(&k.io_model)),
        opt(&k.io_threads),
        opt(&k.server_io_lanes),
        opt(&k.handler_work),
        opt(&k.batch),
        s.runs,
        fmt_rate(s.throughput.median),
        fmt_rate(s.throughput.min),
        fmt_rate(s.throughput.max),
        fmt_opt(s.mib_per_second.map(|x| x.median), |v| format!("{v:.1}")),
        fmt_opt(s.p50_us.map(|x| x.median), fmt_us),
        fmt_opt(s.p99_us.map(|x| x.median), fmt_us),
        fmt_opt(s.p999_us.map(|x| x.median), fmt_us),
        fmt_opt(s.cpu_percent.map(|x| x.median), |v| format!("{v:.1}")),
    );
}

/// Configurations whose runs differ outside the grouping key.
fn mixed_settings(md: &mut String, report: &Report) {
    let mixed: Vec<_> = report
        .groups
        .iter()
        .filter(|g| !g.mixed.is_empty())
        .collect();
    if mixed.is_empty() {
        return;
    }
    md.push_str(
        "Runs of these configurations differ in settings outside the grouping key; \
         their numbers may not be comparable:\n\n",
    );
    for g in mixed {
        let _ = writeln!(md, "- {}: {}", g.key, g.mixed.join("; "));
    }
    md.push('\n');
}

/// Links to the UDP echo matrix's charts among `charts`.
fn chart_links(md: &mut String, charts: &[&str]) {
    let udp = [THROUGHPUT_FILE, P99_FILE, LOSS_FILE];
    let charts: Vec<&str> = charts.iter().copied().filter(|c| udp.contains(c)).collect();
    if charts.is_empty() {
        return;
    }
    md.push_str("## Charts\n\n");
    for name in charts {
        let alt = match name {
            THROUGHPUT_FILE => "Round trips per second by IO model",
            P99_FILE => "p99 RTT by IO model",
            LOSS_FILE => "Lost echoes per payload x window",
            other => other,
        };
        let _ = writeln!(md, "![{alt}]({name})\n");
    }
}

/// The RTT distribution chart, if it was written.
fn rtt_distribution(md: &mut String, report: &Report, charts: &[&str]) {
    if !charts.contains(&RTT_CDF_FILE) {
        return;
    }
    md.push_str(
        "## RTT distribution\n\n\
         Each summarised configuration's RTT (a bulk transfer's completion time) as a \
         cumulative distribution: a dot at each percentile its runs record (`rtt_min_us`, \
         `rtt_p50_us`, `rtt_p90_us`, `rtt_p95_us`, `rtt_p99_us`, `rtt_p999_us`, \
         `rtt_max_us`), the median over its passing runs, on a nines scale (50, 90, 99, \
         99.9 % a decade apart, the max above them).",
    );
    if !report.histograms.is_empty() {
        let names: Vec<String> = report.histograms.iter().map(|h| code(&h.name)).collect();
        let _ = write!(
            md,
            " A line without dots is the whole distribution of a run's `--histogram` file \
             (HdrHistogram's percentile-distribution format, µs): {}.",
            names.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "\n\n![RTT distribution by configuration]({RTT_CDF_FILE})\n"
    );
}

/// Each excluded configuration with its failed runs, their errors and
/// commands.
fn excluded(md: &mut String, report: &Report) {
    let excluded: Vec<_> = report.excluded().collect();
    if excluded.is_empty() {
        return;
    }
    md.push_str("## Excluded configurations\n\n");
    md.push_str("A repetition failed, so these are not in the summary or the throughput and latency charts.\n\n");
    for g in &excluded {
        let failed: Vec<_> = g.failed().collect();
        let _ = writeln!(
            md,
            "### {}\n\n{} of {} runs failed:\n",
            g.key,
            failed.len(),
            g.runs.len()
        );
        for run in failed {
            let _ = writeln!(md, "- {}: {}", run.label(), run.errors.join("; "));
            if let Some(cmd) = &run.command {
                let _ = writeln!(md, "  - command: {}", code(cmd));
            }
        }
        md.push('\n');
    }
}

/// Lost echoes, payload rows × window columns.
fn loss_table(md: &mut String, report: &Report) {
    if report.loss.is_empty() {
        return;
    }
    md.push_str("## Loss by payload and window\n\n");
    md.push_str(
        "Lost echoes per run, both phases (`udp_lost_messages` + `udp_lost_warmup_messages`), \
         from every run that reports them (failed runs included; all other settings pooled): \
         median per run, max in one run, runs.\n\n",
    );
    let windows: BTreeSet<u64> = report.loss.iter().map(|c| c.window).collect();
    let payloads: BTreeSet<u64> = report.loss.iter().map(|c| c.payload_bytes).collect();
    md.push_str("| payload B \\ window |");
    for w in &windows {
        let _ = write!(md, " {w} |");
    }
    md.push_str("\n| ---: |");
    for _ in &windows {
        md.push_str(" ---: |");
    }
    md.push('\n');
    for p in &payloads {
        let _ = write!(md, "| {p} |");
        for w in &windows {
            match report
                .loss
                .iter()
                .find(|c| c.payload_bytes == *p && c.window == *w)
            {
                Some(c) => {
                    let _ = write!(
                        md,
                        " {} (max {}, {} runs) |",
                        fmt_lost(c.median()),
                        c.max(),
                        c.lost.len()
                    );
                }
                None => md.push_str(" – |"),
            }
        }
        md.push('\n');
    }
    md.push('\n');
}

fn unreadable(md: &mut String, report: &Report) {
    if report.unreadable.is_empty() {
        return;
    }
    md.push_str("## Unreadable lines\n\n");
    for u in &report.unreadable {
        let _ = writeln!(md, "- {}: {}", u.source, u.reason);
    }
    md.push('\n');
}
