//! The `--help` text, written from the flag table ([`FLAGS`]) so that it
//! lists exactly the flags the parser accepts.

use std::fmt::Write as _;

use super::config::{MAX_IN_FLIGHT_BYTES, MAX_PAYLOAD_IPV4, MAX_PAYLOAD_IPV6};
use super::table::{FlagSpec, Subcommand, FLAGS};

/// The `--help` text: usage, every flag with its default and accepted
/// values, the differences from arknet, and the exit codes.
pub fn help_text() -> String {
    let mut s = String::new();
    s.push_str(USAGE);
    s.push_str("\nFLAGS:\n");
    for f in FLAGS {
        flag_entry(&mut s, f);
    }
    cross_checks(&mut s);
    s.push_str(DIFFERENCES_AND_EXIT_CODES);
    s
}

/// The usage lines of `sub`, as a rejected command line shows them.
pub fn usage(sub: Subcommand) -> &'static str {
    match sub {
        Subcommand::Run => {
            "usage: keel-bench [RUN FLAGS]                       one run in this process\n       \
             keel-bench --connect ADDR:PORT [RUN FLAGS]   clients only, against `serve`\n       \
             keel-bench serve --bind ADDR:PORT [FLAGS]    the echo server alone\n       \
             keel-bench report FILES... --out DIR         tables and charts of result files"
        }
        Subcommand::Serve => "usage: keel-bench serve --bind ADDR:PORT [SERVE FLAGS]",
        Subcommand::Report => "usage: keel-bench report FILES... --out DIR",
    }
}

/// What the program is, how it is called, and the rules every flag follows.
const USAGE: &str =
        "keel-bench: UDP loopback benchmark on keel, a drop-in for the UDP part of \
         arknet's loopback benchmark\n\
         \n\
         USAGE:\n  \
         keel-bench [RUN FLAGS]                       one run in this process, one JSON line on stdout\n  \
         keel-bench --connect ADDR:PORT [RUN FLAGS]   clients only, against `keel-bench serve`\n  \
         keel-bench serve --bind ADDR:PORT [--io-model M] [--io-threads N] [--server-lanes N]\n                   \
         [--seconds S] [--work R] [--batch N] [--udp-server-receive-buffer B] [--sockperf]\n                   \
         [--idle-timeout S|off] [--max-sessions N] [--full-policy refuse|evict-idlest]\n  \
         keel-bench report FILES... --out DIR\n  \
         keel-bench --help\n\
         \n\
         Every flag takes exactly one value (--flag V or --flag=V) except the switches \
         --sockperf, --encrypt, --bulk-channel and --help.\nIntegers are whole digit tokens (no sign, spaces or suffix); \
         seconds are digits with an optional\nfraction (1, 0.25, .5; no sign, exponent or unit), \
         as are the numbers in --impair specs.\nA flag given twice, an unknown flag or a flag of another \
         subcommand is an error.\n";

/// One flag: name and value, the subcommands that take it, what it does,
/// its default and what it accepts.
fn flag_entry(s: &mut String, f: &FlagSpec) {
    let head = if f.is_switch() {
        format!("--{}", f.name)
    } else {
        format!("--{} {}", f.name, f.value)
    };
    let scope = match (f.for_run(), f.for_serve(), f.for_report()) {
        (true, true, true) => "",
        (true, true, false) => " [run, serve]",
        (true, false, _) => " [run]",
        (false, true, _) => " [serve]",
        (false, false, _) => " [report]",
    };
    let _ = writeln!(s, "  {head}{scope}\n      {}", f.help);
    if !f.default.is_empty() {
        let _ = writeln!(s, "      default: {}", f.default);
    }
    let _ = writeln!(s, "      accepted: {}", f.accepted);
}

/// The checks between flags, with the limits they use.
fn cross_checks(s: &mut String) {
    let _ = write!(
        s,
        "\nCROSS-CHECKS:\n  \
         clients x window x payload <= {MAX_IN_FLIGHT_BYTES} (256 MiB in flight)\n  \
         payload <= {MAX_PAYLOAD_IPV4} for ipv4, <= {MAX_PAYLOAD_IPV6} for ipv6\n  \
         --connect: --address-family (if given) must match the address; --work, \
         --server-lanes and\n  --udp-server-receive-buffer belong to `serve`; \
         --impair-server needs the in-process server\n  \
         --transfer: --protocol rudp or kcp; clients x transfer <= {MAX_IN_FLIGHT_BYTES}; \
         not with --window, --rate\n  or --payload; --channel reliable-ordered or \
         reliable-unordered only\n"
    );
}

/// How keel-bench differs from arknet's benchmark, and the exit codes.
const DIFFERENCES_AND_EXIT_CODES: &str = "\n\
         DIFFERENCES FROM ARKNET (additive; no field renamed):\n  \
         backend is \"keel\"; percentiles come from every sample (rtt_sample_limit is null);\n  \
         --protocol accepts udp, and keel's rudp and kcp (not tcp); --io-model owned is \
         rejected; keel flags and JSON fields\n  are marked keel above; with --transfer (the bulk \
         case) messages counts completed transfers and\n  rtt_* are completion times \
         (transfer_bytes and goodput_bytes_per_second say so);\n  --format human (opt-in) shows a summary instead of the JSON line.\n\
         \n\
         EXIT CODES:\n  \
         0  ok: the run passed every check (or --help)\n  \
         1  the run failed its checks, or serve or report could not run (the JSON line has\n     \
         \"ok\": false and \"error\"; the reason in words on stderr)\n  \
         2  bad arguments: the error and the usage on stderr, and one small JSON line on stdout\n     \
         {\"schema_version\", \"backend\", \"keel_version\", \"ok\": false, \"error\" naming the flag}\n";
