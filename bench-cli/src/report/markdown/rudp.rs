//! The keel-rudp benchmark's part of `report.md`: the intro when it has
//! runs, and its section: latency under loss, bulk transfers and scale
//! (each a table of medians over the seeds with its chart), then failed
//! runs and runs with mixed settings.

use std::fmt::{Display, Write as _};

use super::text::{cell, code, fmt_opt, fmt_us, unreadable_count, UDP_HOW};
use crate::report::charts::{RUDP_BULK_FILE, RUDP_P99_FILE, RUDP_SCALE_FILE};
use crate::report::fields::{count, opt};
use crate::report::rudp::{
    dims_label, split_dims, Case, RudpDim, RudpGroup, CLIENTS, IO, LINK, LOSS, PAYLOAD, RATE,
    TRANSFER, WINDOW,
};
use crate::report::summary::{fmt_lost, Report, Spread};

/// Inputs and counts when there are runs of the keel-rudp benchmark; the
/// UDP echo matrix's counts and how-to-read only when it has runs too.
pub(super) fn intro(md: &mut String, report: &Report) {
    let inputs = report
        .inputs
        .iter()
        .map(|s| code(s))
        .collect::<Vec<_>>()
        .join(", ");
    let rudp_runs: usize = report.rudp.iter().map(|g| g.runs.len()).sum();
    let rudp = format!(
        "{rudp_runs} of the keel-rudp benchmark in {}",
        count(Some(report.rudp.len() as u64), "configuration")
    );
    if report.groups.is_empty() {
        let _ = writeln!(
            md,
            "Inputs: {inputs} ({}, all {rudp}{}).\n",
            count(Some(report.run_count() as u64), "run"),
            unreadable_count(report)
        );
        return;
    }
    let _ = writeln!(
        md,
        "Inputs: {inputs} ({}: {} of the UDP echo matrix in {} \
         ({} summarised, {} excluded), {rudp} (section *keel-rudp and KCP*){}).\n",
        count(Some(report.run_count() as u64), "run"),
        report.udp_run_count(),
        count(Some(report.groups.len() as u64), "configuration"),
        report.summarised().count(),
        report.excluded().count(),
        unreadable_count(report)
    );
    md.push_str(UDP_HOW);
}

/// Milliseconds from µs, one decimal.
fn ms(us: Option<Spread>) -> String {
    fmt_opt(us.map(|s| s.median / 1000.0), |v| format!("{v:.1}"))
}

/// A column of a table: its head, alignment row and cell.
struct Column {
    head: &'static str,
    align: &'static str,
    cell: fn(&RudpGroup) -> String,
}

const LOSS_COL: Column = Column {
    head: "loss each way",
    align: "---",
    cell: |g| g.key.loss_label(),
};
const PROTOCOL_COL: Column = Column {
    head: "protocol",
    align: "---",
    cell: |g| g.key.protocol_label(),
};
const RUNS_OK_COL: Column = Column {
    head: "runs ok",
    align: "---",
    cell: RudpGroup::runs_ok_label,
};
const WIRE_COL: Column = Column {
    head: "wire bytes / payload byte",
    align: "---:",
    cell: |g| fmt_opt(g.summary.wire.map(|s| s.median), |v| format!("{v:.3}")),
};
const RESENT_COL: Column = Column {
    head: "resent",
    align: "---:",
    cell: |g| fmt_opt(g.summary.resent.map(|s| s.median), fmt_lost),
};

/// The latency case's columns, as `scripts/rudp-matrix.sh` printed them.
const LATENCY: [&[Column]; 2] = [
    &[LOSS_COL, PROTOCOL_COL, RUNS_OK_COL],
    &[
        Column {
            head: "p50 ms",
            align: "---:",
            cell: |g| ms(g.summary.p50_us),
        },
        Column {
            head: "p99 ms",
            align: "---:",
            cell: |g| ms(g.summary.p99_us),
        },
        Column {
            head: "p99.9 ms",
            align: "---:",
            cell: |g| ms(g.summary.p999_us),
        },
        Column {
            head: "max ms",
            align: "---:",
            cell: |g| ms(g.summary.max_us),
        },
        WIRE_COL,
        RESENT_COL,
    ],
];

/// The bulk case's columns.
const BULK: [&[Column]; 2] = [
    &[LOSS_COL, PROTOCOL_COL, RUNS_OK_COL],
    &[
        Column {
            head: "completion p50 ms",
            align: "---:",
            cell: |g| ms(g.summary.p50_us),
        },
        Column {
            head: "completion p99 ms",
            align: "---:",
            cell: |g| ms(g.summary.p99_us),
        },
        Column {
            head: "completion max ms",
            align: "---:",
            cell: |g| ms(g.summary.max_us),
        },
        Column {
            head: "goodput MiB/s",
            align: "---:",
            cell: |g| {
                fmt_opt(g.summary.goodput.map(|s| s.median / 1_048_576.0), |v| {
                    format!("{v:.2}")
                })
            },
        },
        WIRE_COL,
        RESENT_COL,
    ],
];

/// The scale case's columns.
const SCALE: [&[Column]; 2] = [
    &[
        Column {
            head: "connections",
            align: "---:",
            cell: |g| opt(&g.key.clients),
        },
        Column {
            head: "rate",
            align: "---:",
            cell: |g| (RATE.get)(&g.key),
        },
        PROTOCOL_COL,
        RUNS_OK_COL,
    ],
    &[
        Column {
            head: "server CPU µs / message",
            align: "---:",
            cell: |g| fmt_opt(g.summary.cpu_us_per_message.map(|s| s.median), fmt_us),
        },
        Column {
            head: "server datagrams / message",
            align: "---:",
            cell: |g| {
                fmt_opt(g.summary.datagrams_per_message.map(|s| s.median), |v| {
                    format!("{v:.2}")
                })
            },
        },
        Column {
            head: "RSS per connection KiB",
            align: "---:",
            cell: |g| {
                fmt_opt(
                    g.summary.rss_per_connection.map(|s| s.median / 1024.0),
                    |v| format!("{v:.1}"),
                )
            },
        },
        Column {
            head: "lost messages",
            align: "---:",
            cell: |g| match g.summary.lost {
                Some(s) => format!("{} (max {})", fmt_lost(s.median), fmt_lost(s.max)),
                None => "–".to_string(),
            },
        },
        Column {
            head: "p99 ms",
            align: "---:",
            cell: |g| ms(g.summary.p99_us),
        },
    ],
];

/// Settings outside the lead columns, said once above a table when every
/// row shares them, else in a `settings` column.
const LOSS_TABLE_SETTINGS: &[RudpDim] = &[PAYLOAD, CLIENTS, RATE, TRANSFER, WINDOW, IO, LINK];
const SCALE_TABLE_SETTINGS: &[RudpDim] = &[LOSS, PAYLOAD, TRANSFER, WINDOW, IO, LINK];

/// A table of `groups`: the sentence of shared settings, then the lead
/// columns, a `settings` column when some vary, the value columns.
fn table(md: &mut String, groups: &[&RudpGroup], columns: [&[Column]; 2], dims: &[RudpDim]) {
    let keys: Vec<_> = groups.iter().map(|g| &g.key).collect();
    let (constant, varying) = split_dims(&keys, dims);
    if !constant.is_empty() {
        let _ = writeln!(md, "All rows: {}.\n", constant.join(" · "));
    }
    let settings = !varying.is_empty();
    line(md, columns, settings.then_some("settings"), |c| c.head);
    line(md, columns, settings.then_some("---"), |c| c.align);
    for g in groups {
        let label = settings.then(|| cell(&dims_label(&g.key, &varying)));
        line(md, columns, label, |c| cell(&(c.cell)(g)));
    }
    md.push('\n');
}

/// One line of a table: `text` of each lead column, then `settings` (the
/// `settings` column, when the table has one), then `text` of each value
/// column.
fn line<T: Display>(
    md: &mut String,
    [lead, values]: [&[Column]; 2],
    settings: Option<T>,
    text: impl Fn(&Column) -> T,
) {
    md.push('|');
    for t in lead
        .iter()
        .map(&text)
        .chain(settings)
        .chain(values.iter().map(&text))
    {
        let _ = write!(md, " {t} |");
    }
    md.push('\n');
}

/// The groups of `case`, in key order.
fn of_case(report: &Report, case: Case) -> Vec<&RudpGroup> {
    report.rudp.iter().filter(|g| g.case() == case).collect()
}

/// `![alt](name)` when `name` was written.
fn embed(md: &mut String, charts: &[&str], name: &str, alt: &str) {
    if charts.contains(&name) {
        let _ = writeln!(md, "![{alt}]({name})\n");
    }
}

/// The section: how runs are grouped, one table (and chart) per case, the
/// failed runs, the runs with mixed settings.
pub(super) fn section(md: &mut String, report: &Report, charts: &[&str]) {
    if report.rudp.is_empty() {
        return;
    }
    md.push_str("## keel-rudp and KCP\n\n");
    md.push_str(
        "Runs of the keel-rudp benchmark: `protocol` `rudp` (keel-rudp) or `kcp` (KCP), or \
         plain keel-udp at a `rate_hz` (the scale case's baseline). Runs are grouped by \
         protocol, channel, KCP mode, encryption, rate, transfer size, payload, clients, \
         window, IO and the link conditioner of each direction (`impair`, `impair_server`) \
         without its seed: the seeds are the repetitions. Each number is the median over \
         the seeds that passed (latency: of each run's own percentile, never pooled); a \
         seed that failed is left out of the numbers, counted in *runs ok* and listed \
         under *Failed runs* with its errors. – is a number no passing run reports.\n\n",
    );
    let latency = of_case(report, Case::Latency);
    if !latency.is_empty() {
        md.push_str("### Latency under loss\n\n");
        table(md, &latency, LATENCY, LOSS_TABLE_SETTINGS);
        md.push_str(
            "Latency is per message, from the client handing it to the protocol to the \
             client's handler getting the echo. *wire bytes / payload byte* is \
             `wire_bytes_per_payload_byte` (every UDP payload byte both ends sent over the \
             message bytes); *resent* is `messages_resent` (– for KCP, which does not \
             report it).\n\n",
        );
        embed(md, charts, RUDP_P99_FILE, "p99 latency against loss");
    }
    let bulk = of_case(report, Case::Bulk);
    if !bulk.is_empty() {
        md.push_str("### Bulk transfers\n\n");
        table(md, &bulk, BULK, LOSS_TABLE_SETTINGS);
        md.push_str(
            "Completion time is per transfer (the run's `rtt_*` fields); goodput is \
             `goodput_bytes_per_second`.\n\n",
        );
        embed(
            md,
            charts,
            RUDP_BULK_FILE,
            "p99 transfer completion time against loss",
        );
    }
    let mut scale = of_case(report, Case::Scale);
    if !scale.is_empty() {
        scale.sort_by_key(|g| (g.key.clients, g.key.rate_hz));
        md.push_str("### Scale\n\n");
        table(md, &scale, SCALE, SCALE_TABLE_SETTINGS);
        md.push_str(
            "*server CPU µs / message* is `server_cpu_us_per_message`, *RSS per connection* \
             `rss_bytes_per_connection`; *lost messages* is `udp_lost_messages` per run, \
             median (max), over every run, failed ones included. keel-udp rows are the \
             plain UDP echo at the same rate, the baseline. *server datagrams / message* is \
             `server_datagrams_per_message`, the datagrams the server's socket received per \
             message its handler received (handshakes, acknowledgements and probes \
             included): 1 for plain UDP, raised by every acknowledgement that travels in a \
             datagram of its own instead of riding on a message.\n\n",
        );
        embed(
            md,
            charts,
            RUDP_SCALE_FILE,
            "Server CPU per message against connections",
        );
    }
    failed_runs(md, report);
    mixed(md, report);
}

/// Each configuration with a failed seed, and the errors.
fn failed_runs(md: &mut String, report: &Report) {
    let failed: Vec<_> = report
        .rudp
        .iter()
        .filter(|g| g.failed().next().is_some())
        .collect();
    if failed.is_empty() {
        return;
    }
    md.push_str("### Failed runs\n\n");
    md.push_str("Left out of the numbers above.\n\n");
    for g in failed {
        let _ = writeln!(md, "- {} ({} ok):", g.key, g.runs_ok_label());
        for run in g.failed() {
            let seed = run.rudp.as_ref().and_then(|x| x.seed);
            let label = match seed {
                Some(s) => format!("seed {s} ({})", run.source),
                None => run.label(),
            };
            let _ = writeln!(md, "  - {label}: {}", run.errors.join("; "));
            if let Some(cmd) = &run.command {
                let _ = writeln!(md, "    - command: {}", code(cmd));
            }
        }
    }
    md.push('\n');
}

/// Configurations whose runs differ outside the grouping key.
fn mixed(md: &mut String, report: &Report) {
    let mixed: Vec<_> = report.rudp.iter().filter(|g| !g.mixed.is_empty()).collect();
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
