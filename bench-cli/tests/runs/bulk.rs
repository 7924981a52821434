//! The bulk case (`--transfer BYTES`): short real runs over keel-rudp and
//! KCP (stream mode) on loopback, with and without seeded loss; the line's
//! bulk fields agree with each other.

use serde_json::Value;

use crate::common::{f, keel_bench, run, u};

/// The fields of a passing bulk line of `bytes` agree: completed transfers,
/// goodput from them, completion times, what the server received.
fn coherent(v: &Value, bytes: u64) {
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(u(v, "transfer_bytes"), bytes, "{v}");
    assert_eq!(u(v, "payload_bytes"), bytes, "{v}");
    assert_eq!(u(v, "window"), 1, "{v}");
    let n = u(v, "messages");
    assert!(n >= 1, "{v}");
    assert_eq!(n, u(v, "messages_sent"), "{v}");
    assert_eq!(n, u(v, "messages_delivered"), "{v}");
    assert_eq!(
        n,
        u(v, "rtt_samples"),
        "one completion time per transfer: {v}"
    );
    let elapsed = f(v, "elapsed_seconds");
    let goodput = f(v, "goodput_bytes_per_second");
    assert!(goodput > 0.0, "{v}");
    let want = (bytes * n) as f64 / elapsed;
    assert!(
        (goodput - want).abs() <= want * 1e-9,
        "{goodput} vs {want}: {v}"
    );
    assert_eq!(u(v, "payload_roundtrip_bytes"), n * (bytes + 16), "{v}");
    // Completion times: positive, ordered, and within the run.
    let (p50, p99, max) = (f(v, "rtt_p50_us"), f(v, "rtt_p99_us"), f(v, "rtt_max_us"));
    assert!(0.0 < p50 && p50 <= p99 && max <= elapsed * 1e6, "{v}");
    // Every byte went over the wire at least once, and not many times.
    let wire = f(v, "wire_bytes_per_payload_byte");
    assert!((1.0..2.0).contains(&wire), "{v}");
    assert_eq!(
        u(v, "content_errors") + u(v, "unexpected_messages"),
        0,
        "{v}"
    );
}

#[test]
fn rudp_and_kcp_complete_transfers_and_report_goodput() {
    for proto in [
        &["--protocol", "rudp"][..],
        &["--protocol", "rudp", "--bulk-channel"][..],
        &["--protocol", "kcp"][..],
    ] {
        let mut args = proto.to_vec();
        args.extend(["--transfer", "65536", "--seconds", "0.4", "--warmup", "0.1"]);
        let (code, v) = run(&args);
        assert_eq!(code, 0, "{args:?}: {v}");
        coherent(&v, 65536);
        assert_eq!(v["protocol"], proto[1], "{v}");
        assert_eq!(u(&v, "udp_lost_warmup_messages"), 0, "{v}");
    }
}

/// Loss on both directions: transfers still complete whole (the server
/// checks every byte before its receipt), through resends.
#[test]
fn transfers_complete_through_seeded_loss() {
    for proto in ["rudp", "kcp"] {
        let (code, v) = run(&[
            "--protocol",
            proto,
            "--transfer",
            "65536",
            "--clients",
            "2",
            "--seconds",
            "0.5",
            "--warmup",
            "0",
            "--impair",
            "loss=0.05,seed=3",
            "--impair-server",
            "loss=0.05,seed=4",
        ]);
        assert_eq!(code, 0, "{proto}: {v}");
        coherent(&v, 65536);
        assert!(u(&v, "conditioner_dropped") > 0, "{v}");
        if proto == "rudp" {
            assert!(u(&v, "messages_resent") > 0, "{v}");
        }
    }
}

/// A KCP transfer larger than KCP's message mode can carry (128 fragments
/// of 1,376 bytes) goes through in stream mode, with the window given.
#[test]
fn kcp_carries_transfers_beyond_its_message_limit() {
    let (code, v) = run(&[
        "--protocol",
        "kcp",
        "--transfer",
        "300000",
        "--kcp-window",
        "512",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
    ]);
    assert_eq!(code, 0, "{v}");
    coherent(&v, 300_000);
    assert_eq!(v["kcp_window"], 512, "{v}");
}

#[test]
fn the_echo_lines_carry_null_bulk_fields() {
    let (code, v) = run(&["--protocol", "kcp", "--seconds", "0.1", "--warmup", "0"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["transfer_bytes"], Value::Null, "{v}");
    assert_eq!(v["goodput_bytes_per_second"], Value::Null, "{v}");
    assert_eq!(v["kcp_window"], 128, "{v}");
}

#[test]
fn the_summary_says_goodput() {
    let out = keel_bench(&[
        "--protocol",
        "rudp",
        "--transfer",
        "20000",
        "--seconds",
        "0.2",
        "--warmup",
        "0",
        "--format",
        "human",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("transfers of") && text.contains("goodput"),
        "{text}"
    );
}

#[test]
fn bulk_flags_are_checked_on_the_command_line() {
    for (args, flag) in [
        (&["--transfer", "65536"][..], "--transfer"),
        (
            &["--protocol", "rudp", "--transfer", "1M"][..],
            "--transfer",
        ),
        (
            &["--protocol", "rudp", "--transfer", "65536", "--window", "2"][..],
            "--window",
        ),
        (
            &["--protocol", "kcp", "--transfer", "65536", "--rate", "60"][..],
            "--rate",
        ),
        (
            &["--protocol", "rudp", "--kcp-window", "256"][..],
            "--kcp-window",
        ),
        (
            &["--protocol", "kcp", "--bulk-channel"][..],
            "--bulk-channel",
        ),
    ] {
        let (code, v) = run(args);
        assert_eq!(code, 2, "{args:?}: {v}");
        assert_eq!(v["ok"], false);
        let e = v["error"].as_str().unwrap();
        assert!(e.starts_with(flag), "{args:?}: {e}");
    }
}
