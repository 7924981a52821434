//! The built binary: exit codes and the one JSON line on stdout.

use std::process::Output;

use serde_json::Value;

use crate::common::keel_bench;

/// [`crate::common::json_line`], the line ended by a newline.
fn json_line(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with('\n'), "{stdout:?}");
    crate::common::json_line(out)
}

#[track_caller]
fn bad_args(args: &[&str], flag: &str) {
    let out = keel_bench(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let v = json_line(&out);
    assert_eq!(v["ok"], false, "{v}");
    let error = v["error"].as_str().expect("error string");
    assert!(error.contains(flag), "{args:?}: {error}");
}

#[test]
fn bad_flags_exit_2_with_one_json_line_naming_the_flag() {
    bad_args(&["--clients", "0"], "--clients");
    bad_args(&["--clients", "0"], "1..=1024");
    bad_args(&["--payload", "70000"], "--payload");
    bad_args(&["--seconds", "nan"], "--seconds");
    bad_args(&["--warmup", "-1"], "--warmup");
    bad_args(&["--window"], "--window");
    bad_args(&["--bogus"], "--bogus");
    bad_args(&["--protocol", "tcp"], "--protocol");
    bad_args(&["--io-model", "owned"], "--io-model");
    bad_args(
        &["serve", "--bind", "0.0.0.0:1", "--connect", "1.2.3.4:5"],
        "--connect",
    );
    bad_args(&["--clients", "1024", "--window", "1024"], "--window");
}

#[test]
fn help_exits_0_and_lists_flags_and_exit_codes() {
    let out = keel_bench(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--payload",
        "--loss-timeout",
        "--connect",
        "serve",
        "report",
        "EXIT CODES",
    ] {
        assert!(text.contains(needle), "{needle}");
    }
}

#[test]
fn failed_checks_exit_1_with_a_json_line() {
    // Nothing listens on port 9 of the loopback address (discard is not
    // served here): every client gets ICMP port unreachable.
    let out = keel_bench(&[
        "--connect",
        "127.0.0.1:9",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_line(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(v["backend"], "keel");
    assert_eq!(v["requested_seconds"], 0.1);
    assert!(v["disconnect_errors"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn connect_to_a_closed_port_says_the_peer_refused_and_where() {
    // A port nothing listens on: bind a socket for a free port, then close it.
    let addr = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let out = keel_bench(&[
        "--connect",
        &addr.to_string(),
        "--seconds",
        "0.1",
        "--warmup",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1), "a failed run");
    let v = json_line(&out);
    assert_eq!(v["ok"], false);
    let error = v["error"].as_str().expect("an error");
    assert!(
        error.contains(&format!("connection refused by {addr}")),
        "names the refusing address: {error}"
    );
    assert!(error.contains("ICMP port unreachable"), "{error}");
    // The counter is still there, and the error still starts with it.
    assert!(v["disconnect_errors"].as_u64().unwrap() > 0, "{v}");
    assert!(error.starts_with("disconnect_errors = "), "{error}");
}
