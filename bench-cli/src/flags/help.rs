//! The help texts, written from the flag table ([`FLAGS`]) so that they
//! list exactly the flags the parser accepts: `--help` (long: every flag
//! with its default and what it accepts) and `-h` (short: the usage and a
//! line per flag), for the run and for each subcommand (`serve --help`,
//! `report -h`, ...). Every line fits [`HELP_WIDTH`] columns.

use std::fmt::Write as _;

use super::config::{MAX_IN_FLIGHT_BYTES, MAX_PAYLOAD_IPV4, MAX_PAYLOAD_IPV6};
use super::table::{FlagSpec, Subcommand, FLAGS};

/// The widest line of any help text, in columns (characters).
pub const HELP_WIDTH: usize = 100;

/// The top-level `--help` text: usage, every flag of every subcommand with
/// its default and accepted values, the differences from arknet, and the
/// exit codes. The same as `help_for(Subcommand::Run, true)`.
pub fn help_text() -> String {
    help_for(Subcommand::Run, true)
}

/// The help of `sub`: long (`--help`) or short (`-h`). The run's long help
/// lists the flags of every subcommand, each marked with the subcommands
/// that take it; a subcommand's lists its own.
pub fn help_for(sub: Subcommand, long: bool) -> String {
    let mut s = String::new();
    s.push_str(ABOUT);
    s.push_str("\nUSAGE:\n");
    s.push_str(usage_block(sub));
    if sub == Subcommand::Run && long {
        s.push('\n');
        for line in RULES {
            wrap(&mut s, line, "", "", HELP_WIDTH);
        }
    }
    if let Some(about) = subcommand_about(sub) {
        s.push('\n');
        for line in about {
            wrap(&mut s, line, "", "", HELP_WIDTH);
        }
    }
    let flags: Vec<&FlagSpec> = FLAGS
        .iter()
        .filter(|f| sub == Subcommand::Run && long || f.accepted_by(sub))
        .collect();
    s.push_str("\nFLAGS:\n");
    for f in &flags {
        if long {
            flag_entry(&mut s, f, sub == Subcommand::Run);
        } else {
            flag_line(&mut s, f);
        }
    }
    if !long {
        let _ = writeln!(
            s,
            "\n{} --help: every flag with its default and what it accepts, and the exit codes.",
            command(sub)
        );
        return s;
    }
    if sub == Subcommand::Run {
        cross_checks(&mut s);
        s.push_str(DIFFERENCES);
    }
    s.push_str(EXIT_CODES);
    s
}

/// `keel-bench`, `keel-bench serve`, ...
fn command(sub: Subcommand) -> String {
    match sub.word() {
        "" => "keel-bench".to_string(),
        word => format!("keel-bench {word}"),
    }
}

/// The usage lines of `sub`, as a rejected command line shows them.
pub fn usage(sub: Subcommand) -> String {
    let block = usage_block(sub);
    let mut out = String::new();
    for (i, line) in block.lines().enumerate() {
        let line = line.trim_start();
        if i == 0 {
            let _ = writeln!(out, "usage: {line}");
        } else {
            let _ = writeln!(out, "       {line}");
        }
    }
    out.trim_end().to_string()
}

/// What the program is.
const ABOUT: &str = "keel-bench: UDP loopback benchmark on keel, a drop-in for the UDP part \
of arknet's loopback\nbenchmark, with keel-rudp and KCP beside it\n";

/// How `sub` is called, one line each, indented by two.
fn usage_block(sub: Subcommand) -> &'static str {
    match sub {
        Subcommand::Run => {
            "  keel-bench [RUN FLAGS]                       one run in this process, one JSON line\n  \
             keel-bench --connect ADDR:PORT [RUN FLAGS]   clients only, against `keel-bench serve`\n  \
             keel-bench serve --bind ADDR:PORT [FLAGS]    the echo server alone\n  \
             keel-bench report FILES... --out DIR         a Markdown table and SVG charts of runs\n  \
             keel-bench compare BASELINE CANDIDATE        two result files, configuration by one\n  \
             keel-bench completions bash|zsh|fish         a shell completion script\n  \
             keel-bench relay --bind A --upstream S       an impairment relay between clients and S\n  \
             keel-bench -h | --help | -V | --version\n"
        }
        Subcommand::Serve => {
            "  keel-bench serve --bind ADDR:PORT [--io-model M] [--io-threads N] [--server-lanes N]\n                   \
             [--seconds S] [--work R] [--batch N] [--udp-server-receive-buffer B] [--sockperf]\n                   \
             [--idle-timeout S|off] [--max-sessions N] [--full-policy refuse|evict-idlest]\n                   \
             [--format F] [--output FILE]\n  \
             keel-bench serve --protocol rudp|kcp --bind ADDR:PORT [--channel K] [--payload B]\n                   \
             [--kcp-mode M] [--kcp-window N] [--seconds S] [--io-model M] [--io-threads N]\n                   \
             [--work R]\n"
        }
        Subcommand::Report => "  keel-bench report FILES... --out DIR\n",
        Subcommand::Compare => "  keel-bench compare BASELINE.jsonl CANDIDATE.jsonl\n",
        Subcommand::Completions => "  keel-bench completions bash|zsh|fish\n",
        Subcommand::Relay => {
            "  keel-bench relay --bind ADDR:PORT --upstream ADDR:PORT [--impair SPEC]\n                   \
             [--impair-server SPEC] [--seed N] [--seconds S] [--max-flows N]\n"
        }
    }
}

/// A subcommand's own paragraph.
fn subcommand_about(sub: Subcommand) -> Option<&'static [&'static str]> {
    match sub {
        Subcommand::Run => None,
        Subcommand::Serve => Some(&[
            "Serves the benchmark's echo (or sockperf's ping-pong with --sockperf) until --seconds \
             or SIGINT/SIGTERM, for clients on another host (keel-bench --connect). Prints \
             \"listening on ADDR\" on stderr once it serves, and one JSON summary line on stdout \
             when it ends.",
        ]),
        Subcommand::Report => Some(&[
            "Reads JSON-lines result files (one run a line, as keel-bench, matrix.sh and \
             rudp-matrix.sh write them) and writes DIR/report.md with a table per configuration \
             (median [min, max] over repetitions) and SVG charts. Exit 1 when no line is a run and no \
             file a histogram.",
            "DIR/rtt-cdf.svg is each configuration's RTT distribution as a CDF (latency on a log \
             axis when spread, the percentile on a nines scale), from the percentiles the lines \
             record (rtt_min_us, p50, p90, p95, p99, p99.9, rtt_max_us; medians over the passing \
             runs). A FILE that is a run's --histogram output (HdrHistogram's \
             percentile-distribution format: a first line starting \"Value Percentile\") adds \
             its whole distribution, a line of its own named by the file.",
        ]),
        Subcommand::Compare => Some(&[
            "Compares two JSON-lines result files the way hyperfine compares commands: for each \
             configuration in both, the median and min-max of round trips per second and of the \
             p99 RTT over the runs that passed, and the candidate's ratio to the baseline \
             (throughput: higher is better; p99: lower is better). Configurations in one file \
             only are listed apart. Exit 1 when no configuration is in both.",
        ]),
        Subcommand::Relay => Some(&[
            "Relays UDP datagrams between clients and one server (--upstream), each client address \
             from an upstream socket of its own (so the server sees one address per client), \
             impairing each direction with keel's link model (keel-impair, the model of keel-udp's \
             conditioner): --impair for client->server, --impair-server for server->client. The \
             fate of a datagram is decided from (seed, direction, its index in that direction). \
             Prints \"ready ADDR\" on stderr once bound and, at --seconds or SIGINT/SIGTERM, one \
             JSON line on stdout (role relay: flows, datagrams, bytes, drops and duplicates each \
             way, CPU seconds). Bytes are UDP payload bytes as received, before impairment.",
        ]),
        Subcommand::Completions => Some(&[
            "Prints a completion script for the shell on stdout. Install: bash: \
             `keel-bench completions bash > ~/.local/share/bash-completion/completions/keel-bench`; \
             zsh: `keel-bench completions zsh > ~/.zfunc/_keel-bench` (with ~/.zfunc in fpath); \
             fish: `keel-bench completions fish > ~/.config/fish/completions/keel-bench.fish`.",
        ]),
    }
}

/// The rules every flag follows.
const RULES: &[&str] = &[
    "Every flag takes exactly one value (--flag V or --flag=V) except the switches --sockperf, \
     --encrypt, --bulk-channel, --help/-h and --version/-V.",
    "Integers are whole digit tokens (no sign, spaces or suffix); seconds are digits with an \
     optional fraction (1, 0.25, .5; no sign, exponent or unit), as are the numbers in --impair \
     specs.",
    "A flag given twice, an unknown flag or a flag of another subcommand is an error.",
    "A run longer than about 2 s shows a progress line on stderr when stderr is a terminal; \
     Ctrl-C (SIGINT) ends a run early with the results so far (the record's error says it was \
     interrupted) and its summary.",
];

/// Appends `text` wrapped at spaces to `width` columns: the first line
/// after `first`, the others after `rest`. A word longer than a line goes
/// on a line of its own.
fn wrap(s: &mut String, text: &str, first: &str, rest: &str, width: usize) {
    let mut line = String::from(first);
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = line.chars().count();
        if !empty && len + 1 + word.chars().count() > width {
            s.push_str(&line);
            s.push('\n');
            line = String::from(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    s.push_str(&line);
    s.push('\n');
}

/// `--name VALUE`, or `--name` for a switch.
fn head(f: &FlagSpec) -> String {
    if f.is_switch() {
        format!("--{}", f.name)
    } else {
        format!("--{} {}", f.name, f.value)
    }
}

/// One flag in full: name and value, the subcommands that take it (when
/// `scopes`), what it does, its default and what it accepts.
fn flag_entry(s: &mut String, f: &FlagSpec, scopes: bool) {
    let scope = if !scopes || Subcommand::ALL.iter().all(|sub| f.accepted_by(*sub)) {
        String::new()
    } else {
        let names: Vec<&str> = Subcommand::ALL
            .iter()
            .filter(|sub| f.accepted_by(**sub))
            .map(|sub| match sub.word() {
                "" => "run",
                w => w,
            })
            .collect();
        format!(" [{}]", names.join(", "))
    };
    let _ = writeln!(s, "  {}{scope}", head(f));
    wrap(s, f.help, "      ", "      ", HELP_WIDTH);
    if !f.default.is_empty() {
        wrap(
            s,
            &format!("default: {}", f.default),
            "      ",
            "        ",
            HELP_WIDTH,
        );
    }
    wrap(
        s,
        &format!("accepted: {}", f.accepted),
        "      ",
        "        ",
        HELP_WIDTH,
    );
}

/// One flag on one line: its name and the first words of what it does.
fn flag_line(s: &mut String, f: &FlagSpec) {
    let mut what = f.help;
    // "keel: ...", "keel, --protocol rudp: ...", "serve: ..." say where the
    // flag applies, which the long help says; the short line says what.
    if let Some((prefix, rest)) = what.split_once(": ") {
        if ["keel", "serve", "report"]
            .iter()
            .any(|p| prefix.starts_with(p))
        {
            what = rest;
        }
    }
    let end = ["; ", " (", ", e.g.", ", i.e."]
        .iter()
        .filter_map(|sep| what.find(sep))
        .min()
        .unwrap_or(what.len());
    let what = &what[..end];
    let head = format!("  {:<34} ", head(f));
    let room = HELP_WIDTH - head.chars().count();
    let what = if what.chars().count() <= room {
        what.to_string()
    } else {
        let mut cut: String = what.chars().take(room - 1).collect();
        if let Some(space) = cut.rfind(' ') {
            cut.truncate(space);
        }
        cut + "…"
    };
    let _ = writeln!(s, "{}{what}", head);
}

/// The checks between flags, with the limits they use.
fn cross_checks(s: &mut String) {
    s.push_str("\nCROSS-CHECKS:\n");
    for line in [
        format!("clients x window x payload <= {MAX_IN_FLIGHT_BYTES} (256 MiB in flight)"),
        format!("payload <= {MAX_PAYLOAD_IPV4} for ipv4, <= {MAX_PAYLOAD_IPV6} for ipv6"),
        "--connect: --address-family (if given) must match the address; --work, --server-lanes \
         and --udp-server-receive-buffer belong to `serve`; --impair-server needs the in-process \
         server"
            .to_string(),
        format!(
            "--transfer: --protocol rudp or kcp; clients x transfer <= {MAX_IN_FLIGHT_BYTES}; not \
             with --window, --rate or --payload; --channel reliable-ordered or \
             reliable-unordered only"
        ),
        "--io-threads above the machine's cores: a warning on stderr (the run goes ahead; \
         threads then share cores)"
            .to_string(),
    ] {
        wrap(s, &line, "  ", "    ", HELP_WIDTH);
    }
}

/// How keel-bench differs from arknet's benchmark.
const DIFFERENCES: &str = "\n\
DIFFERENCES FROM ARKNET (additive; no field renamed):\n  \
backend is \"keel\"; percentiles come from every sample (rtt_sample_limit is null) and are never\n  \
above rtt_max_us; rtt_min_us and rtt_stddev_us are appended at the end of the record;\n  \
--protocol accepts udp, and keel's rudp and kcp (not tcp); --io-model owned is rejected; keel\n  \
flags and JSON fields are marked keel above; with --transfer (the bulk case) messages counts\n  \
completed transfers and rtt_* are completion times (transfer_bytes and goodput_bytes_per_second\n  \
say so); --format human (opt-in) shows a summary instead of the JSON line.\n";

/// The exit codes.
const EXIT_CODES: &str = "\n\
EXIT CODES:\n  \
0  ok: the run passed every check (or --help, --version, a report, a comparison)\n  \
1  the run failed its checks, or serve, report or compare could not run (the JSON line has\n     \
\"ok\": false and \"error\"; the reason in words on stderr)\n  \
2  bad arguments: the error and the usage on stderr, and one small JSON line on stdout\n     \
{\"schema_version\", \"backend\", \"keel_version\", \"ok\": false, \"error\" naming the flag}\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_help_fits_the_width_and_lists_its_flags() {
        for sub in Subcommand::ALL {
            for long in [false, true] {
                let text = help_for(sub, long);
                for line in text.lines() {
                    assert!(
                        line.chars().count() <= HELP_WIDTH,
                        "{sub:?} long={long}: {} columns: {line}",
                        line.chars().count()
                    );
                }
                for f in FLAGS.iter().filter(|f| f.accepted_by(sub)) {
                    assert!(
                        text.contains(&format!("--{}", f.name)),
                        "{sub:?}: --{}",
                        f.name
                    );
                }
            }
        }
        // The short help is short; a subcommand's has no run flag.
        assert!(help_for(Subcommand::Run, false).lines().count() < 70);
        let serve = help_for(Subcommand::Serve, true);
        assert!(
            serve.contains("--bind") && !serve.contains("--window"),
            "{serve}"
        );
        assert!(help_for(Subcommand::Report, true).contains("--out DIR"));
    }

    #[test]
    fn wrap_breaks_at_spaces() {
        let mut s = String::new();
        wrap(&mut s, "aaa bbb ccc ddd", "> ", "  ", 9);
        assert_eq!(s, "> aaa bbb\n  ccc ddd\n");
    }
}
