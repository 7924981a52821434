//! `--protocol rudp`: short real runs over keel-rudp on loopback, with and
//! without seeded loss, closed and open loop; and its flag errors.

use keel_bench::output::{KEEL_FIELDS, REFERENCE_FIELDS};
use serde_json::Value;

use crate::common::{keel_bench, run_with, u};

/// A `--protocol rudp` run (see [`crate::common::run`]).
fn run(args: &[&str]) -> (i32, Value) {
    run_with(&["--protocol", "rudp"], args)
}

#[test]
fn every_channel_echoes_without_loss() {
    for ch in [
        "reliable-ordered",
        "reliable-unordered",
        "unreliable-sequenced",
        "unreliable",
    ] {
        let (code, v) = run(&["--channel", ch, "--seconds", "0.3", "--warmup", "0.05"]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["protocol"], "rudp");
        assert_eq!(v["channel"], ch);
        assert_eq!(v["rate_hz"], Value::Null);
        assert!(u(&v, "messages") > 10, "{v}");
        assert_eq!(u(&v, "messages"), u(&v, "messages_sent"), "{v}");
        assert_eq!(u(&v, "messages"), u(&v, "messages_delivered"), "{v}");
        assert_eq!(u(&v, "udp_lost_messages"), 0);
        assert_eq!(u(&v, "messages_resent"), 0, "no loss, nothing resent: {v}");
        let wire = v["wire_bytes_per_payload_byte"].as_f64().unwrap();
        assert!((1.0..1.5).contains(&wire), "{v}");
        assert!(v["rtt_p99_us"].as_f64().unwrap() > 0.0);
        // Every field of the UDP line, then the rudp additions.
        let obj = v.as_object().unwrap();
        for f in REFERENCE_FIELDS.iter().chain(KEEL_FIELDS) {
            assert!(obj.contains_key(*f), "{f} missing: {v}");
        }
        for f in RUDP_FIELDS {
            assert!(obj.contains_key(*f), "{f} missing: {v}");
        }
        assert!(!obj.contains_key("kcp_mode"), "{v}");
    }
}

/// What only a rudp (or kcp) line has.
const RUDP_FIELDS: &[&str] = &[
    "channel",
    "rate_hz",
    "messages_delivered",
    "messages_resent",
    "redundant_copies",
    "recovered_by_redundancy",
    "wire_bytes_per_payload_byte",
];

#[test]
fn the_udp_line_has_none_of_the_rudp_fields() {
    let out = keel_bench(&["--seconds", "0.05", "--warmup", "0", "--format", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let obj = v.as_object().unwrap();
    for f in RUDP_FIELDS.iter().chain(&["kcp_mode"]) {
        assert!(!obj.contains_key(*f), "{f} in a UDP line: {v}");
    }
    assert_eq!(obj.len(), REFERENCE_FIELDS.len() + KEEL_FIELDS.len(), "{v}");
}

#[test]
fn reliable_channels_deliver_everything_through_seeded_loss() {
    for ch in ["reliable-ordered", "reliable-unordered"] {
        let (code, v) = run(&[
            "--channel",
            ch,
            "--seconds",
            "0.3",
            "--warmup",
            "0",
            "--window",
            "8",
            "--impair",
            "loss=0.2,delay=2ms,seed=3",
            "--impair-server",
            "loss=0.2,delay=2ms,seed=4",
        ]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert!(u(&v, "conditioner_dropped") > 0, "{v}");
        assert!(
            u(&v, "messages_resent") > 0,
            "loss is repaired by resends: {v}"
        );
        assert_eq!(u(&v, "messages"), u(&v, "messages_sent"), "{v}");
        assert_eq!(u(&v, "order_errors"), 0, "{v}");
        assert!(v["impair"].as_str().unwrap().contains("loss"), "{v}");
    }
}

#[test]
fn an_unreliable_channel_reports_its_losses() {
    let (code, v) = run(&[
        "--channel",
        "unreliable",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
        "--window",
        "8",
        "--impair",
        "loss=0.3,seed=5",
    ]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["ok"], false);
    let lost = u(&v, "udp_lost_messages");
    assert!(lost > 0, "{v}");
    assert_eq!(u(&v, "messages") + lost, u(&v, "messages_sent"), "{v}");
    assert_eq!(u(&v, "messages_resent"), 0, "{v}");
}

#[test]
fn open_loop_sends_at_the_rate() {
    let (code, v) = run(&[
        "--rate",
        "100",
        "--clients",
        "2",
        "--seconds",
        "0.5",
        "--warmup",
        "0",
        "--payload",
        "400",
        "--impair",
        "loss=0.05,delay=5ms,seed=9",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["rate_hz"], 100);
    // 2 clients x 100 Hz x 0.5 s, give or take a tick at each end.
    let sent = u(&v, "messages_sent");
    assert!((96..=104).contains(&sent), "{v}");
    assert_eq!(u(&v, "messages_delivered"), sent, "{v}");
    for k in ["rtt_p50_us", "rtt_p99_us", "rtt_p999_us", "rtt_max_us"] {
        // At least the 5 ms the conditioner adds to each message.
        assert!(v[k].as_f64().unwrap() >= 5_000.0, "{k}: {v}");
    }
}

#[test]
fn small_messages_lost_are_recovered_by_redundancy() {
    // 64-byte messages ride again in the next packets (redundancy covers
    // messages up to 128 bytes): 10 % of packets lost each way, about 100
    // messages' first copies among them, most of them recovered so.
    let (code, v) = run(&[
        "--rate",
        "100",
        "--clients",
        "4",
        "--seconds",
        "1",
        "--warmup",
        "0",
        "--payload",
        "64",
        "--impair",
        "loss=0.1,delay=5ms,seed=3",
        "--impair-server",
        "loss=0.1,delay=5ms,seed=4",
    ]);
    assert_eq!(code, 0, "{v}");
    let recovered = u(&v, "recovered_by_redundancy");
    assert!(recovered > 20, "{v}");
    assert!(u(&v, "redundant_copies") > recovered, "{v}");
    assert!(u(&v, "messages_resent") < recovered, "{v}");
}

#[test]
fn rudp_flags_are_checked() {
    let bad = |args: &[&str], flag: &str| {
        let out = keel_bench(args);
        assert_eq!(out.status.code(), Some(2));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let e = v["error"].as_str().unwrap();
        assert!(e.contains(flag), "{e}");
        e.to_string()
    };
    let e = bad(
        &["--protocol", "rudp", "--channel", "reliable"],
        "--channel",
    );
    assert!(e.contains("reliable-ordered"), "{e}");
    bad(&["--channel", "unreliable"], "--channel");
    bad(&["--rate", "60", "--channel", "unreliable"], "--channel");
    bad(&["--rate", "60", "--connect", "127.0.0.1:9"], "--connect");
    let e = bad(&["--clients", "1025"], "--clients");
    assert!(e.contains("1..=1024"), "{e}");
    let e = bad(&["--rate", "60", "--clients", "10001"], "--clients");
    assert!(e.contains("1..=10000"), "{e}");
    bad(&["--protocol", "rudp", "--rate", "0"], "--rate");
    bad(&["--protocol", "rudp", "--batch", "4"], "--batch");
    // --connect runs against `serve --protocol rudp`, insecure only.
    bad(
        &[
            "--protocol",
            "rudp",
            "--connect",
            "127.0.0.1:9",
            "--encrypt",
        ],
        "--encrypt",
    );
    let e = bad(&["--protocol", "quic"], "--protocol");
    assert!(e.contains("udp, rudp or kcp"), "{e}");
}

/// A `--protocol kcp` run (see [`crate::common::run`]).
fn kcp(args: &[&str]) -> (i32, Value) {
    run_with(&["--protocol", "kcp"], args)
}

#[test]
fn kcp_echoes_in_both_modes_and_through_loss() {
    for mode in ["fast", "default", "normal"] {
        let (code, v) = kcp(&["--kcp-mode", mode, "--seconds", "0.4", "--warmup", "0"]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["protocol"], "kcp");
        assert_eq!(v["kcp_mode"], mode);
        assert!(u(&v, "messages") > 0, "{v}");
        assert_eq!(u(&v, "messages"), u(&v, "messages_delivered"), "{v}");
        // KCP sends at its flush interval (10 ms), once each way.
        assert!(v["rtt_p50_us"].as_f64().unwrap() >= 9_000.0, "{v}");
    }
    let (code, v) = kcp(&[
        "--rate",
        "60",
        "--clients",
        "2",
        "--payload",
        "400",
        "--seconds",
        "0.5",
        "--warmup",
        "0",
        "--impair",
        "loss=0.2,delay=2ms,seed=1",
        "--impair-server",
        "loss=0.2,delay=2ms,seed=2",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert!(u(&v, "conditioner_dropped") > 0, "{v}");
    assert_eq!(u(&v, "messages"), u(&v, "messages_sent"), "{v}");
    assert!(v["wire_bytes_per_payload_byte"].as_f64().unwrap() > 1.0);
}

#[test]
fn kcp_flags_are_checked() {
    let out = keel_bench(&["--protocol", "kcp", "--channel", "unreliable"]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("reliable-ordered only"),
        "{v}"
    );
    for args in [
        &["--protocol", "kcp", "--kcp-mode", "turbo"][..],
        &["--protocol", "rudp", "--kcp-mode", "fast"][..],
        &["--kcp-mode", "fast"][..],
    ] {
        let out = keel_bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["error"].as_str().unwrap().contains("--kcp-mode"), "{v}");
    }
}

/// `--encrypt` connects every client with a connect token and seals every
/// packet; the line says so. KCP has no such mode.
#[test]
fn encrypt_runs_keel_rudp_with_tokens_and_sealed_packets() {
    for (extra, want) in [(None, false), (Some("--encrypt"), true)] {
        let mut args = vec!["--protocol", "rudp", "--clients", "2", "--seconds", "0.2"];
        args.extend(["--warmup", "0", "--format", "json"]);
        args.extend(extra);
        let out = keel_bench(&args);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["encrypted"], want, "{v}");
        assert!(v["messages"].as_u64().unwrap() > 0, "{v}");
    }
    let out = keel_bench(&["--protocol", "kcp", "--encrypt", "--seconds", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--encrypt")
            || String::from_utf8_lossy(&out.stdout).contains("--encrypt"),
        "{out:?}"
    );
}
