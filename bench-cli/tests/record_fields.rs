//! The JSON records keel-bench prints keep their field names and order.
//!
//! Scripts and the `report` command read these records by name, and the
//! contract fixes the order of its fields; a renamed, dropped, added or
//! moved field must be a deliberate change of
//! `tests/data/record-fields.txt`, not an accident of a refactoring.
//!
//! * [`records_keep_their_fields_in_order`]: the key sequence of every kind
//!   of record the binary prints (a UDP run, an open-loop UDP run, rudp and
//!   kcp echo and bulk runs, a client-only run against `serve`, `serve`'s
//!   summary and that of a `serve` that cannot bind, the error line for bad
//!   arguments and for a `report` that cannot read), and of the reports a run starts from (`RunReport::new`
//!   for each protocol) against the checked-in lists.
//! * [`a_full_record_is_byte_identical_to_the_golden_one`]: a report with
//!   every field set to a fixed value serializes to exactly
//!   `tests/data/run-record-golden.json` (values and their formatting too).
//! * [`docs_name_only_fields_that_exist`]: the field names the docs cite
//!   are fields of a record.
//!
//! To accept a deliberate change, run the tests with
//! `KEEL_BLESS_RECORDS=1` and review the diff of `tests/data/`.

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use keel_bench::flags::{parse, Command as Cli, RunConfig};
use keel_bench::output::{Role, RunReport};
use keel_bench::serve::ServeSummary;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use common::{repo_root, BIN};

/// Top-level keys of a JSON object, in document order.
struct Keys(Vec<String>);

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                let mut out = Vec::new();
                while let Some((k, _)) = map.next_entry::<String, IgnoredAny>()? {
                    out.push(k);
                }
                Ok(Keys(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn keys(line: &str) -> Vec<String> {
    let line = line.trim_end_matches('\n');
    assert!(!line.contains('\n'), "one line: {line}");
    serde_json::from_str::<Keys>(line)
        .unwrap_or_else(|e| panic!("{e}: {line}"))
        .0
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn bless() -> bool {
    std::env::var_os("KEEL_BLESS_RECORDS").is_some()
}

/// `[name]` sections of field names, one a line; `#` starts a comment.
fn parse_lists(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            assert!(
                out.insert(name.to_owned(), Vec::new()).is_none(),
                "section [{name}] twice"
            );
            current = Some(name.to_owned());
        } else {
            let name = current.as_ref().expect("a field before any [section]");
            out.get_mut(name).unwrap().push(line.to_owned());
        }
    }
    out
}

const LISTS_HEADER: &str = "\
# The key sequence of each kind of JSON record keel-bench prints, checked
# by tests/record_fields.rs. Each [section] names a record; its lines are
# the record's keys, in order. Change only on purpose (the contract fixes
# the order of its fields; scripts read them by name): run the test with
# KEEL_BLESS_RECORDS=1 and review the diff.
";

fn render_lists(lists: &BTreeMap<String, Vec<String>>) -> String {
    let mut out = String::from(LISTS_HEADER);
    for (name, fields) in lists {
        out.push_str(&format!("\n[{name}]\n"));
        for f in fields {
            out.push_str(f);
            out.push('\n');
        }
    }
    out
}

fn run_cfg(args: &[&str]) -> RunConfig {
    match parse(args.iter().copied()).unwrap() {
        Cli::Run(c) => c,
        other => panic!("{other:?}"),
    }
}

/// The one JSON line keel-bench prints on stdout with `args`; with
/// `expect_ok`, the record must say `"ok":true`.
fn record(args: &[&str], expect_ok: bool) -> String {
    let out = Command::new(BIN)
        .args(args)
        .args(["--format", "json"])
        .output()
        .expect("run keel-bench");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(stdout.lines().count(), 1, "{args:?}: {stdout:?}");
    if expect_ok {
        assert!(
            stdout.contains("\"ok\":true"),
            "{args:?}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    stdout
}

/// A short run (`--seconds 0.1 --warmup 0`) with `extra` flags.
fn short_run(extra: &[&str]) -> String {
    let mut args = vec!["--seconds", "0.1", "--warmup", "0"];
    args.extend_from_slice(extra);
    record(&args, true)
}

/// `serve` on 127.0.0.1, a client-only run against it, then SIGTERM:
/// (the client's record, serve's summary). Every wait is bounded.
fn client_and_serve() -> (String, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--bind", "127.0.0.1:0", "--seconds", "60"])
        .args(["--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn keel-bench serve");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .trim_end()
        .rsplit(' ')
        .next()
        .unwrap_or_else(|| panic!("no listening address in {line:?}"))
        .to_owned();
    let client = short_run(&["--connect", &addr]);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        let _ = child.wait();
        let _ = tx.send(s);
    });
    let summary = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("serve ends within 20 s of SIGTERM");
    drop(stderr);
    (client, summary)
}

/// Every kind of record, by section name: (name, the JSON line).
fn every_record() -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("run udp", short_run(&[])),
        (
            "run udp --rate",
            short_run(&["--rate", "200", "--clients", "2"]),
        ),
        ("run rudp", short_run(&["--protocol", "rudp"])),
        (
            "run rudp --rate",
            short_run(&["--protocol", "rudp", "--rate", "100"]),
        ),
        (
            "run rudp --transfer",
            short_run(&["--protocol", "rudp", "--transfer", "65536"]),
        ),
        ("run kcp", short_run(&["--protocol", "kcp"])),
        (
            "run kcp --transfer",
            short_run(&["--protocol", "kcp", "--transfer", "65536"]),
        ),
        ("bad arguments", record(&["--clients", "0"], false)),
        (
            "report that cannot read",
            record(&["report", "/nonexistent/keel-bench-runs.jsonl"], false),
        ),
    ];
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    out.push((
        "serve that cannot bind",
        record(&["serve", "--bind", &addr, "--seconds", "1"], false),
    ));
    drop(taken);
    let (client, serve) = client_and_serve();
    out.push(("run udp --connect", client));
    out.push(("serve", serve));
    for (name, args) in [
        ("new udp", &[][..]),
        ("new rudp", &["--protocol", "rudp"][..]),
        ("new kcp", &["--protocol", "kcp"][..]),
    ] {
        out.push((name, RunReport::new(&run_cfg(args)).to_json_line()));
    }
    out.push(("golden (every field set)", full_report().to_json_line()));
    out
}

#[test]
fn records_keep_their_fields_in_order() {
    let got: BTreeMap<String, Vec<String>> = every_record()
        .into_iter()
        .map(|(name, line)| (name.to_owned(), keys(&line)))
        .collect();
    for (name, fields) in &got {
        let mut sorted = fields.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), fields.len(), "[{name}]: a key twice");
    }
    let path = data("record-fields.txt");
    if bless() {
        std::fs::write(&path, render_lists(&got)).unwrap();
    }
    let want = parse_lists(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the kinds of record"
    );
    for (name, fields) in &want {
        let got = &got[name];
        if got != fields {
            let first = got
                .iter()
                .zip(fields)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(fields.len()));
            panic!(
                "[{name}]: key {first} is {:?}, {} expects {:?} \
                 ({} keys, expected {}); got {got:?}",
                got.get(first),
                path.display(),
                fields.get(first),
                got.len(),
                fields.len()
            );
        }
    }
}

/// A rudp bulk report with every field of [`RunReport`] set to a fixed,
/// distinct value (the kcp-only ones too, though no real run sets both).
fn full_report() -> RunReport {
    let cfg = run_cfg(&[
        "--protocol",
        "rudp",
        "--transfer",
        "65536",
        "--impair",
        "loss=0.01,delay=5ms,seed=7",
        "--impair-server",
        "loss=0.02,seed=8",
    ]);
    let mut r = RunReport::new(&cfg);
    r.throughput.elapsed_seconds = 2.5;
    r.throughput.messages_sent = 1001;
    r.throughput.messages = 1000;
    r.set_throughput(Duration::from_millis(2500));
    r.rtt.rtt_samples = 1000;
    r.rtt.rtt_observations = 1000;
    r.rtt.rtt_sample_limit = Some(8192);
    r.rtt.rtt_p50_us = Some(101.5);
    r.rtt.rtt_p95_us = Some(195.25);
    r.rtt.rtt_p99_us = Some(299.125);
    r.checks.client_send_rejections = 1;
    r.checks.client_send_completion_errors = 2;
    r.checks.server_send_rejections = Some(3);
    r.checks.server_send_completion_errors = Some(4);
    r.checks.content_errors = 5;
    r.checks.order_errors = 6;
    r.checks.unexpected_messages = 7;
    r.checks.disconnect_errors = 8;
    r.checks.udp_lost_messages = 9;
    r.checks.unfinished_messages = 10;
    r.checks.callback_exceptions = 11;
    r.checks.drain_timeouts = 12;
    r.checks.duplicate_completions = 13;
    r.checks.pending_completions = 14;
    r.checks.warmup_ok = true;
    r.checks.warmup_errors = 15;
    r.buffers.udp_server_send_buffer_bytes = Some(212_992);
    r.buffers.udp_server_receive_buffer_bytes = Some(8_388_608);
    r.buffers.udp_client_send_buffer_min_bytes = Some(131_072);
    r.buffers.udp_client_send_buffer_max_bytes = Some(131_073);
    r.buffers.udp_client_receive_buffer_min_bytes = Some(8_388_607);
    r.buffers.udp_client_receive_buffer_max_bytes = Some(8_388_609);
    r.set_cpu(Duration::from_millis(1250), Duration::from_millis(2500));
    r.cpu.peak_rss_bytes = Some(12_345_678);
    r.finish();
    r.rtt_extra.rtt_p90_us = Some(180.0);
    r.rtt_extra.rtt_p999_us = Some(400.0625);
    r.rtt_extra.rtt_max_us = Some(512.0);
    r.rtt_extra.rtt_mean_us = Some(120.333_333_333_333_33);
    r.setup.batch = Some(32);
    r.setup.loss_timeout_ms = Some(50);
    r.peer.bulk_channel = Some(true);
    r.drops.kernel_rcvbuf_drops = Some(16);
    r.drops.snmp_udp_rcvbuf_errors = Some(17);
    r.drops.snmp_udp_sndbuf_errors = Some(18);
    r.drops.snmp_udp_in_errors = Some(19);
    r.drops.late_echoes = Some(20);
    r.drops.udp_lost_warmup_messages = Some(21);
    r.impair.conditioner_dropped = Some(22);
    r.impair.conditioner_duplicated = Some(23);
    r.lane_steering = Some("peer-port");
    r.keel_version = "0.0.0-golden";
    r.connect = Some("127.0.0.1:7000".into());
    r.role = Some(Role::Client);
    r.delivery.channel = Some("reliable-ordered");
    r.delivery.rate_hz = Some(Some(60));
    r.delivery.messages_delivered = Some(999);
    r.delivery.messages_resent = Some(24);
    r.delivery.redundant_copies = Some(25);
    r.delivery.recovered_by_redundancy = Some(26);
    r.delivery.wire_bytes_per_payload_byte = Some(1.0625);
    r.peer.kcp_mode = Some("fast");
    r.peer.encrypted = Some(true);
    r.peer.server_datagrams_per_message = Some(2.5);
    r.peer.kcp_window = Some(256);
    r.scale.server_cpu_us_per_message = Some(Some(12.75));
    r.scale.server_cpu_percent = Some(Some(33.5));
    r.scale.rss_bytes_per_connection = Some(Some(4096.0));
    r.rtt_min_us = Some(50.5);
    r.rtt_stddev_us = Some(33.25);
    r
}

#[test]
fn a_full_record_is_byte_identical_to_the_golden_one() {
    let line = full_report().to_json_line() + "\n";
    let path = data("run-record-golden.json");
    if bless() {
        std::fs::write(&path, &line).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    if line != want {
        let at = line
            .bytes()
            .zip(want.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(line.len().min(want.len()));
        let from = at.saturating_sub(60);
        panic!(
            "the serialized record differs from {} at byte {at}:\n got  ...{}\n want ...{}",
            path.display(),
            line.get(from..(at + 60).min(line.len())).unwrap_or(&line),
            want.get(from..(at + 60).min(want.len())).unwrap_or(&want),
        );
    }
    // Every field is there and none is null (`finish` set `error`, since
    // the counters are not 0), so the golden line holds every field's
    // formatting.
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let nulls: Vec<_> = v
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    assert!(
        nulls.is_empty(),
        "null fields in the golden record: {nulls:?}"
    );
}

/// The serve summary with fixed values: its keys are in the lists too (the
/// real one is checked there), this holds their formatting.
#[test]
fn serve_summary_serializes_its_fields_in_order() {
    let s = ServeSummary {
        role: "serve",
        backend: "keel",
        keel_version: "0.1.0",
        bind: "127.0.0.1:7000".into(),
        mode: "bench",
        io_model: "shared",
        io_threads: 1,
        server_io_lanes: 2,
        idle_timeout_seconds: Some(30.0),
        max_sessions: 4096,
        full_policy: "evict-idlest",
        elapsed_seconds: 1.5,
        ended_by: "SIGTERM".into(),
        datagrams_in: 1,
        datagrams_out: 2,
        bytes_in: 3,
        bytes_out: 4,
        kernel_rcvbuf_drops: 5,
        answered: 6,
        unanswered_warmup: 7,
        unanswered_no_reply: 8,
        invalid_messages: 9,
        send_rejections: 10,
        send_errors: 11,
        truncated: 12,
        recv_discarded: 13,
        sessions_opened: 14,
        sessions_refused: 15,
        sessions_rejected: 16,
        sessions_timed_out: 17,
        sessions_evicted: 18,
        udp_server_send_buffer_bytes: 19,
        udp_server_receive_buffer_bytes: 20,
        ok: true,
        error: None,
    };
    let line = serde_json::to_string(&s).unwrap();
    let want = parse_lists(&std::fs::read_to_string(data("record-fields.txt")).unwrap());
    assert_eq!(keys(&line), want["serve"]);
}

/// Names in backticks that look like record fields (`snake_case`) in the
/// docs that describe the records; the ones that are not fields.
const NOT_FIELDS: &[&str] = &["epoll_wait", "hash_if_first_byte_has"];

#[test]
fn docs_name_only_fields_that_exist() {
    let lists = parse_lists(&std::fs::read_to_string(data("record-fields.txt")).unwrap());
    let fields: std::collections::BTreeSet<&str> =
        lists.values().flatten().map(String::as_str).collect();
    let root = repo_root();
    let mut unknown = Vec::new();
    for doc in ["README.md", "docs/methodology.md", "docs/io-models.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for quoted in text.split('`').skip(1).step_by(2) {
            let snake = quoted.contains('_')
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if snake && !fields.contains(quoted) && !NOT_FIELDS.contains(&quoted) {
                unknown.push(format!("{doc}: `{quoted}`"));
            }
        }
    }
    assert!(unknown.is_empty(), "not a field of any record: {unknown:?}");
    // And the test sees the names it should: the contract's RTT fields.
    assert!(fields.contains("rtt_p99_us") && fields.contains("cpu_percent"));
}
