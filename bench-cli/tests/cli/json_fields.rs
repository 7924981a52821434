//! The JSON line carries every field of the contract, in its order, then
//! keel's additions. The contract's list is copied here from
//! `reference/loopback-benchmark.md` ("JSON output"), which lives outside
//! the repository, so this test does not depend on the crate's own copy in
//! `output::REFERENCE_FIELDS`.

use std::fmt;

use keel_bench::flags::{parse, Command, RunConfig};
use keel_bench::output::{RunReport, KEEL_FIELDS, REFERENCE_FIELDS};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

/// Copied verbatim from the reference's "JSON output" list.
const REFERENCE: &str = "
`schema_version`, `backend`, `protocol`, `address_family`, `payload_bytes`,
`clients`, `window`, `io_model`, `handler_work`, `io_contexts`, `io_threads`,
`server_io_lanes`, `requested_seconds`, `warmup_seconds`, `elapsed_seconds`,
`messages_sent`, `messages`, `payload_roundtrip_bytes`,
`roundtrips_per_second`, `payload_mib_per_second`, `rtt_samples`,
`rtt_observations`, `rtt_sample_limit`, `rtt_p50_us`, `rtt_p95_us`,
`rtt_p99_us`, `client_send_rejections`, `client_send_completion_errors`,
`server_send_rejections`, `server_send_completion_errors`, `content_errors`,
`order_errors`, `unexpected_messages`, `disconnect_errors`,
`udp_lost_messages`, `unfinished_messages`, `callback_exceptions`,
`drain_timeouts`, `duplicate_completions`, `pending_completions`,
`warmup_ok`, `warmup_errors`, `udp_send_buffer_requested_bytes`,
`udp_receive_buffer_requested_bytes`, `udp_server_send_buffer_bytes`,
`udp_server_receive_buffer_bytes`, `udp_client_send_buffer_min_bytes`,
`udp_client_send_buffer_max_bytes`, `udp_client_receive_buffer_min_bytes`,
`udp_client_receive_buffer_max_bytes`, `cpu_seconds`, `cpu_elapsed_seconds`,
`cpu_percent`, `peak_rss_bytes`, `ok`, `error`.
";

/// keel's additions required by the reference and the design.
const REQUIRED_ADDITIONS: &[&str] = &[
    "keel_version",
    "rtt_p90_us",
    "rtt_p999_us",
    "rtt_max_us",
    "rtt_mean_us",
    "udp_server_receive_buffer_requested_bytes",
    "batch",
    "loss_timeout_ms",
    "kernel_rcvbuf_drops",
    "snmp_udp_rcvbuf_errors",
    "snmp_udp_sndbuf_errors",
    "snmp_udp_in_errors",
];

fn reference_fields() -> Vec<&'static str> {
    REFERENCE.split('`').skip(1).step_by(2).collect::<Vec<_>>()
}

/// Top-level keys and values of a JSON object, in document order.
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn fields(line: &str) -> Vec<(String, Value)> {
    assert!(!line.contains('\n'), "one line: {line}");
    serde_json::from_str::<Ordered>(line).unwrap().0
}

fn names(line: &str) -> Vec<String> {
    fields(line).into_iter().map(|(k, _)| k).collect()
}

fn run_cfg(args: &[&str]) -> RunConfig {
    match parse(args.iter().copied()).unwrap() {
        Command::Run(c) => c,
        other => panic!("{other:?}"),
    }
}

#[test]
fn reference_list_parses() {
    let r = reference_fields();
    assert_eq!(r.len(), 56);
    assert_eq!(r.first(), Some(&"schema_version"));
    assert_eq!(r.last(), Some(&"error"));
}

#[test]
fn reference_fields_come_first_in_order_then_keel_additions() {
    let reference = reference_fields();
    for report in [
        RunReport::new(&RunConfig::default()),
        RunReport::new(&run_cfg(&["--connect", "10.0.0.1:7000"])),
        RunReport::error_report(None, "--clients: bad"),
    ] {
        let names = names(&report.to_json_line());
        assert_eq!(names[..reference.len()], reference[..], "contract prefix");
        let additions = &names[reference.len()..];
        for required in REQUIRED_ADDITIONS {
            assert!(
                additions.iter().any(|n| n == required),
                "missing keel field {required}"
            );
        }
        // No duplicates, and the crate's own lists describe the line.
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate field");
        assert_eq!(names[..REFERENCE_FIELDS.len()], REFERENCE_FIELDS[..]);
        assert_eq!(additions, KEEL_FIELDS);
    }
}

#[test]
fn values_of_a_default_loopback_report() {
    let line = RunReport::new(&RunConfig::default()).to_json_line();
    let f: std::collections::HashMap<String, Value> = fields(&line).into_iter().collect();
    assert_eq!(f["backend"], "keel");
    assert_eq!(f["protocol"], "udp");
    assert_eq!(f["address_family"], "ipv4");
    assert_eq!(f["payload_bytes"], 1024);
    assert_eq!(f["io_model"], "shared");
    assert_eq!(f["io_contexts"], 1);
    assert_eq!(f["server_io_lanes"], 1);
    assert_eq!(f["requested_seconds"], 1.0);
    assert_eq!(f["warmup_seconds"], 0.25);
    assert_eq!(f["udp_send_buffer_requested_bytes"], 65536);
    assert_eq!(f["udp_receive_buffer_requested_bytes"], 4194304);
    assert_eq!(f["udp_server_receive_buffer_requested_bytes"], 4194304);
    assert_eq!(f["batch"], 64);
    assert_eq!(f["keel_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(f["role"], "loopback");
    assert!(f["rtt_sample_limit"].is_null());
    assert!(f["loss_timeout_ms"].is_null());
    assert_eq!(f["drain_seconds"], 2.0);
    assert!(f["rtt_p50_us"].is_null(), "no samples yet");
}

#[test]
fn client_only_reports_null_for_the_remote_server() {
    let line = RunReport::new(&run_cfg(&["--connect", "[fd00::1]:7000"])).to_json_line();
    let f: std::collections::HashMap<String, Value> = fields(&line).into_iter().collect();
    for server_side in [
        "handler_work",
        "server_io_lanes",
        "server_send_rejections",
        "server_send_completion_errors",
        "udp_server_send_buffer_bytes",
        "udp_server_receive_buffer_bytes",
        "udp_server_receive_buffer_requested_bytes",
    ] {
        assert!(
            f[server_side].is_null(),
            "{server_side} = {}",
            f[server_side]
        );
    }
    assert_eq!(f["role"], "client");
    assert_eq!(f["connect"], "[fd00::1]:7000");
    assert_eq!(f["address_family"], "ipv6");
}

#[test]
fn error_report_for_bad_arguments() {
    let line = RunReport::error_report(
        None,
        "--clients: expected an integer in 1..=1024, got \"0\"",
    )
    .to_json_line();
    let f: std::collections::HashMap<String, Value> = fields(&line).into_iter().collect();
    assert_eq!(f["ok"], false);
    assert!(f["error"].as_str().unwrap().contains("--clients"));
    assert!(f["clients"].is_null());
    assert!(f["payload_bytes"].is_null());
    assert_eq!(f["backend"], "keel");
    assert_eq!(f["messages"], 0);
}
