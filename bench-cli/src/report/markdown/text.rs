//! What the sections of `report.md` share: numbers, table cells and code
//! in Markdown, and the words about the inputs.

use crate::report::summary::Report;

/// Microseconds: 2 decimals below 10, 1 below 1000, else whole.
pub(super) fn fmt_us(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub(super) fn fmt_opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| "–".to_string(), f)
}

/// Text safe inside a Markdown table cell.
pub(super) fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Inline code that survives backticks inside.
pub(super) fn code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

/// How the UDP echo matrix's numbers are made.
pub(super) const UDP_HOW: &str =
    "Each configuration is summarised over its repetitions (fresh processes). \
     Throughput is the median [min, max] of `roundtrips_per_second`. Latency columns \
     are the median of each run's own percentile (percentiles are never pooled across \
     runs). CPU % is the median of `cpu_percent` (process user + system time over the \
     measured phase; 100 = one core). A configuration with a failed repetition is not \
     summarised: it is listed under *Excluded configurations* with its errors.\n\n";

/// `; 2 unreadable lines`, or nothing.
pub(super) fn unreadable_count(report: &Report) -> String {
    if report.unreadable.is_empty() {
        String::new()
    } else {
        match report.unreadable.len() {
            1 => "; 1 unreadable line".to_string(),
            n => format!("; {n} unreadable lines"),
        }
    }
}
