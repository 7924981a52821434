//! `keel-bench report FILES... --out DIR`: summarise result files into a
//! Markdown table and SVG charts.
//!
//! # Input
//!
//! Each file holds JSON lines (or is a run's `--histogram` file: see
//! `rtt-cdf.svg` below): one [`RunReport`](crate::output::RunReport)
//! object per run, as `keel-bench` prints it, optionally augmented by
//! `scripts/matrix.sh` with `command`, `repetition`, `requested` (the
//! settings it asked for, under their JSON names) and `matrix_errors` (its
//! own validation failures). Blank lines are skipped. A line that is not a
//! JSON object is listed under "Unreadable lines" and otherwise ignored.
//! Fields are read leniently: a missing field, a `null` or a value of the
//! wrong type counts as unknown, never as 0.
//!
//! # Two kinds of runs
//!
//! A line of the keel-rudp benchmark (issue 13) is one whose `protocol` is
//! `rudp` (keel-rudp) or `kcp` (KCP), or that has a `rate_hz` or a
//! `transfer_bytes` number (plain keel-udp at a rate: the scale case's
//! baseline). It is reported in its own section (see *The keel-rudp
//! benchmark* below) and never in the UDP echo matrix's table, charts or
//! loss cells; every other line is a run of the UDP echo matrix, reported
//! exactly as before the keel-rudp benchmark existed.
//!
//! # The UDP echo matrix: grouping and statistics
//!
//! Runs are grouped by configuration, the `ConfigKey`: `protocol`,
//! `address_family`, `payload_bytes`, `clients`, `window`, `handler_work`,
//! `batch`, `server_io_lanes`, `io_model`, `io_threads`. A key field the
//! run did not echo (`null`, e.g. the line of a run whose arguments were
//! rejected) falls back to the same name in `requested`, so a failed run
//! still lands in the configuration that was asked for.
//!
//! A run passes when `ok` is `true`, `matrix_errors` is empty or absent and
//! `roundtrips_per_second` is a number. A configuration is summarised only
//! when every one of its repetitions passed; otherwise it is excluded from
//! the table and throughput/latency charts and listed with each failed
//! repetition's errors. For a summarised configuration:
//!
//! * throughput: median [min, max] of `roundtrips_per_second` over runs;
//! * latency: for each percentile, the median of the runs' own percentiles
//!   (percentiles of different runs are never pooled or averaged into one
//!   distribution);
//! * CPU: median of `cpu_percent` (100 = one core).
//!
//! # The keel-rudp benchmark: grouping and statistics
//!
//! Runs are grouped by the `RudpKey`: `protocol`, `channel`, `kcp_mode`,
//! `encrypted`, `rate_hz`, `transfer_bytes`, `payload_bytes`, `clients`,
//! `window`, `io_model`, `io_threads`, and the link conditioner of each
//! direction, `impair` (clients' sends) and `impair_server`, parsed into a
//! `Link`: loss, delay, jitter and any other non-default setting, but
//! not the seed. So the seeds of one setting (`scripts/rudp-matrix.sh`
//! runs each cell under seeds 1, 2, 3) are its repetitions. A missing or
//! `null` `impair` is no conditioner (loss 0); one that does not parse
//! keeps its text without the seed and an unknown loss. Every other field
//! is read leniently too: `goodput_bytes_per_second`,
//! `server_cpu_us_per_message`, `rss_bytes_per_connection`,
//! `messages_resent`, `wire_bytes_per_payload_byte`, `rtt_max_us` may be
//! missing or `null` (unknown, shown as –).
//!
//! A run passes as above (`ok` true, no `matrix_errors`). Each number is
//! the median [min, max] over the seeds that passed (percentiles: of each
//! run's own percentile, never pooled); a failed seed is left out of the
//! numbers, counted in *runs ok* (`2/3`) and listed with its errors; a
//! configuration none of whose seeds passed keeps its row, with no
//! numbers. Each configuration is in one `Case`: the one its lines' `case`
//! field names (`latency`, `bulk` or `scale`, added by
//! `scripts/rudp-matrix.sh` and `scripts/rudp-scale.sh`, so a scale run
//! of 10 connections is still a scale run), else:
//!
//! * bulk: `transfer_bytes` is set (1 MiB transfers; the `rtt_*` fields
//!   are per-transfer completion times, `goodput_bytes_per_second` the
//!   goodput);
//! * scale: `protocol` `udp` (the baseline), or at least
//!   `rudp_key::SCALE_MIN_CLIENTS` (100) clients (1,000 and 5,000 connections at 20
//!   to 60 Hz; `server_cpu_us_per_message`, `rss_bytes_per_connection`);
//! * latency: the rest (the game-tick matrix: 400-byte messages at 60 Hz
//!   under loss).
//!
//! # Output (in `DIR`, created if needed)
//!
//! * `report.md`: for the UDP echo matrix, the table, excluded
//!   configurations with their errors, loss per payload × window and
//!   links to the charts (left out when the inputs have only keel-rudp
//!   benchmark runs); then the section *keel-rudp and KCP*: one table per
//!   case with runs in it, each followed by its chart: latency under loss
//!   (loss each way, protocol, runs ok, p50, p99, p99.9 and max ms, wire
//!   bytes per payload byte, resent: the table `scripts/rudp-matrix.sh`
//!   used to print), bulk transfers (completion p50, p99, max, goodput),
//!   scale (connections, rate, server CPU µs per message, RSS per
//!   connection, lost messages, p99); settings every row shares are said
//!   once above a table, those that vary get a `settings` column; then
//!   the failed runs and runs with mixed settings; unreadable lines last;
//! * `throughput.svg`: round trips per second by IO model (median bars,
//!   min–max whiskers): on the x axis, the thread (shared) or context
//!   (sharded) count, grouped by IO model; one bar colour per series
//!   (server lanes and whatever else of the workload varies), named in a
//!   legend;
//! * `p99.svg`: p99 RTT, the same layout with median dots on a log axis, so
//!   one slow configuration does not flatten the others;
//! * `loss.svg`: lost echoes per run (`udp_lost_messages`) for each payload ×
//!   window cell, from every run that reports it, failed runs included (loss
//!   fails a run, and the chart is there to show where it starts). It is
//!   written whenever some run has `payload_bytes`, `window` and
//!   `udp_lost_messages`; when nothing was lost it says "no loss" rather
//!   than being left out, so "no chart" never has to be read as "no loss";
//! * `rudp-p99.svg`: p99 latency (ms) against loss (%) in the latency
//!   case, one line per protocol (keel-rudp channel, KCP mode; plus
//!   whatever else varies), median dots with min–max whiskers over the
//!   seeds, hollow where a seed failed;
//! * `rudp-bulk.svg`: p99 transfer completion time (ms) against loss, the
//!   same way, when there are bulk runs;
//! * `rudp-scale.svg`: server CPU µs per message against connections, one
//!   line per protocol, when scale runs report it;
//! * `rtt-cdf.svg`: the RTT distribution of every summarised
//!   configuration (both parts) as a CDF: a dot at each percentile the
//!   records hold (`rtt_min_us`, `rtt_p50_us`, `rtt_p90_us`, `rtt_p95_us`,
//!   `rtt_p99_us`, `rtt_p999_us`, `rtt_max_us`; each the median over the
//!   configuration's passing runs, percentiles capped at the run's max),
//!   joined by lines; latency on x (µs, or ms from 10 ms; log scale when
//!   the values span more than 10×), the percentile on y on a nines scale
//!   (50, 90, 99, 99.9 % a decade apart; the max one decade above), one
//!   colour per configuration. An input file that is a run's
//!   `--histogram FILE` (HdrHistogram's percentile-distribution format,
//!   told from JSON lines by its first line, `Value Percentile ...`; µs)
//!   adds that run's whole distribution, a line without dots named by the
//!   file (keel-bench's JSON lines do not name their histogram file, so it
//!   is not tied to a configuration); such a file alone is a report too.
//!
//! The charts are sized to be read in a docs page about 900 px wide: at
//! most 960 px wide whatever the number of configurations, no text under
//! 16 px.
//!
//! The throughput and p99 charts are written when at least one
//! configuration is summarised, the RTT distribution when one of them
//! records at least two of its points (`report.md` embeds it in a
//! section of its own, *RTT distribution*), the keel-rudp charts when at least one
//! configuration of their case has a passing seed with the charted value.
//! A chart this run does not write is removed from `DIR` if an earlier
//! report left it there, so the directory never mixes two reports.
//!
//! # Where things live
//!
//! The report is a module tree of its own behind one entry: [`write()`]
//! (with what it returns, [`Written`], and [`MARKDOWN_FILE`]) is all that
//! is public; the submodules are private and their items `pub(crate)` at
//! most. `fields` reads a line's fields leniently; `rudp_key` reads a
//! keel-rudp benchmark line's key and measurements; `input` reads a line
//! into a `Run`; `stats` holds the `Spread` both parts use; `rudp` groups
//! and summarises the keel-rudp benchmark's part; `summary` groups and
//! summarises runs into a `Report`; `markdown` writes `report.md`;
//! `charts` draws the SVGs; this module reads the files and writes the
//! output directory. Submodules use each other (one way), never this
//! module.

mod charts;
mod compare;
mod fields;
mod input;
mod markdown;
mod peers;
mod rudp;
mod rudp_key;
mod stats;
mod summary;

use std::path::{Path, PathBuf};

use crate::flags::ReportConfig;

use charts::{
    LOSS_FILE, P99_FILE, RTT_CDF_FILE, RUDP_BULK_FILE, RUDP_P99_FILE, RUDP_SCALE_FILE,
    THROUGHPUT_FILE,
};
use summary::Report;

pub use compare::compare;

/// Name of the Markdown file written in the output directory.
pub const MARKDOWN_FILE: &str = "report.md";

/// What [`write()`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Every file written, the Markdown first.
    pub files: Vec<PathBuf>,
    /// Runs read.
    pub runs: usize,
    /// Configurations summarised: of the UDP echo matrix, those whose
    /// repetitions all passed; of the keel-rudp benchmark, those with a
    /// seed that passed.
    pub summarised: usize,
    /// Configurations excluded: of the UDP echo matrix, those with a
    /// failed repetition; of the keel-rudp benchmark, those whose every
    /// seed failed.
    pub excluded: usize,
    /// Unreadable lines.
    pub unreadable: usize,
}

/// Reads `cfg.inputs`, writes the report into `cfg.out`. `Err` names the
/// file that could not be read or written, or says that the inputs held no
/// line at all.
pub fn write(cfg: &ReportConfig) -> Result<Written, String> {
    let (report, peer_records) = read_inputs(&cfg.inputs)?;
    let out = &cfg.out;
    std::fs::create_dir_all(out)
        .map_err(|e| format!("report: cannot create {}: {e}", out.display()))?;
    // scripts/rudp-peers.sh's records: peers.md and its charts, apart.
    let peer_files = match peer_records.is_empty() {
        true => Vec::new(),
        false => write_peers(&peer_records, out)?,
    };
    if report.run_count() == 0 {
        return Ok(Written {
            runs: peer_records.len(),
            summarised: peers::groups(&peer_records).len(),
            excluded: 0,
            unreadable: report.unreadable.len(),
            files: peer_files,
        });
    }
    let charts = [
        (THROUGHPUT_FILE, charts::throughput_svg(&report)?),
        (P99_FILE, charts::p99_svg(&report)?),
        (LOSS_FILE, charts::loss_svg(&report)?),
        (RUDP_P99_FILE, charts::rudp_p99_svg(&report)?),
        (RUDP_BULK_FILE, charts::rudp_bulk_svg(&report)?),
        (RUDP_SCALE_FILE, charts::rudp_scale_svg(&report)?),
        (RTT_CDF_FILE, charts::rtt_cdf_svg(&report)?),
    ];
    let mut files = Vec::new();
    let mut linked = Vec::new();
    for (name, svg) in &charts {
        match svg {
            Some(svg) => {
                files.push(write_file(out, name, svg)?);
                linked.push(*name);
            }
            None => remove_stale(&out.join(name))?,
        }
    }
    files.insert(
        0,
        write_file(out, MARKDOWN_FILE, &report.markdown(&linked))?,
    );
    files.extend(peer_files);
    let rudp_ok = report.rudp.iter().filter(|g| g.summary.runs_ok > 0).count();
    Ok(Written {
        files,
        runs: report.run_count(),
        summarised: report.summarised().count() + rudp_ok,
        excluded: report.excluded().count() + (report.rudp.len() - rudp_ok),
        unreadable: report.unreadable.len(),
    })
}

/// Reads every input file into one [`Report`]; `Err` names a file that
/// cannot be read, or says that the files hold no line at all.
fn read_inputs(inputs: &[PathBuf]) -> Result<(Report, Vec<serde_json::Value>), String> {
    let mut texts = Vec::new();
    let mut peer_records = Vec::new();
    for path in inputs {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("report: cannot read {}: {e}", path.display()))?;
        let (text, records) = peers::split(&text);
        peer_records.extend(records);
        texts.push((path.display().to_string(), text));
    }
    let report = Report::from_texts(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())));
    let names = || {
        texts
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if report.run_count() == 0 && report.histograms.is_empty() && peer_records.is_empty() {
        // Nothing to summarise: an empty table would pass for a report.
        return Err(match report.unreadable.first() {
            None => format!("report: no result lines in {}", names()),
            Some(first) => format!(
                "report: no result lines in {}: {} unreadable ({}: {})",
                names(),
                match report.unreadable.len() {
                    1 => "its 1 line is".to_string(),
                    n => format!("all {n} lines are"),
                },
                first.source,
                first.reason
            ),
        });
    }
    Ok((report, peer_records))
}

fn write_file(out: &Path, name: &str, text: &str) -> Result<PathBuf, String> {
    let path = out.join(name);
    std::fs::write(&path, text)
        .map_err(|e| format!("report: cannot write {}: {e}", path.display()))?;
    Ok(path)
}

fn remove_stale(path: &Path) -> Result<(), String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "report: cannot remove the stale {}: {e}",
            path.display()
        )),
    }
}

/// Writes `peers.md` and the charts into `out`; the files written.
fn write_peers(records: &[serde_json::Value], out: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut names = Vec::new();
    for (name, svg) in charts::peers_svgs(&peers::groups(records))? {
        let path = out.join(&name);
        std::fs::write(&path, svg)
            .map_err(|e| format!("report: cannot write {}: {e}", path.display()))?;
        files.push(path);
        names.push(name);
    }
    let path = out.join(peers::PEERS_FILE);
    std::fs::write(&path, peers::markdown(records, &names))
        .map_err(|e| format!("report: cannot write {}: {e}", path.display()))?;
    files.insert(0, path);
    Ok(files)
}

#[cfg(test)]
mod rudp_tests;
#[cfg(test)]
mod tests;
