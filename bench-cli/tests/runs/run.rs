//! Whole runs of the built binary, as users and shell scripts run it: one
//! JSON line, the contract's fields, `ok` and the exit code.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel_bench::output::{KEEL_FIELDS, REFERENCE_FIELDS};
use serde_json::Value;

use crate::common::{json_line, keel_bench, BIN};

/// A short run with the canonical flags plus `extra` (later flags of the
/// same name are not allowed, so the canonical ones are filtered).
fn run(extra: &[&str]) -> (Option<i32>, Value) {
    let canonical = [
        ("--protocol", "udp"),
        ("--payload", "1024"),
        ("--clients", "16"),
        ("--window", "1"),
        ("--io-model", "shared"),
        ("--io-threads", "1"),
        ("--work", "0"),
        ("--warmup", "0.1"),
        ("--seconds", "0.3"),
    ];
    let mut args: Vec<&str> = Vec::new();
    for (flag, value) in canonical {
        if !extra.contains(&flag) {
            args.push(flag);
            args.push(value);
        }
    }
    args.extend_from_slice(extra);
    let out = keel_bench(&args);
    (out.status.code(), json_line(&out))
}

#[track_caller]
fn assert_ok(extra: &[&str]) -> Value {
    let (code, v) = run(extra);
    assert_eq!(v["ok"], true, "{extra:?}: {v}");
    assert_eq!(code, Some(0), "{extra:?}");
    assert!(v["messages"].as_u64().unwrap() > 0);
    assert_eq!(
        v["messages"], v["messages_sent"],
        "{extra:?}: every message came back"
    );
    assert_eq!(v["rtt_samples"], v["messages"]);
    assert_eq!(v["rtt_samples"], v["rtt_observations"]);
    v
}

#[test]
fn canonical_run_is_ok_and_emits_exactly_the_contract_fields_then_keel_additions() {
    let v = assert_ok(&[]);
    let Value::Object(map) = &v else {
        panic!("not an object: {v}")
    };
    // serde_json keeps insertion order only with preserve_order; compare sets
    // here (order is checked in json_fields.rs on the serializer itself).
    let mut emitted: Vec<&str> = map.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = REFERENCE_FIELDS
        .iter()
        .chain(KEEL_FIELDS)
        .copied()
        .collect();
    emitted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(emitted, expected);
    assert_eq!(v["backend"], "keel");
    assert_eq!(v["io_contexts"], 1);
    assert_eq!(v["server_io_lanes"], 1);
    for f in [
        "rtt_p50_us",
        "rtt_p90_us",
        "rtt_p95_us",
        "rtt_p99_us",
        "rtt_p999_us",
        "rtt_max_us",
    ] {
        assert!(v[f].as_f64().unwrap() > 0.0, "{f}: {v}");
    }
    let p50 = v["rtt_p50_us"].as_f64().unwrap();
    let p99 = v["rtt_p99_us"].as_f64().unwrap();
    assert!(p50 <= p99, "{v}");
    // Real buffer sizes: Linux doubles the request.
    assert!(v["udp_server_receive_buffer_bytes"].as_u64().unwrap() >= 4 * 1024 * 1024);
    assert!(v["udp_client_send_buffer_min_bytes"].as_u64().unwrap() >= 65_536);
    assert!(v["cpu_seconds"].as_f64().unwrap() > 0.0);
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["kernel_rcvbuf_drops"], 0);
}

#[test]
fn io_models_and_shapes_are_ok() {
    assert_ok(&["--io-threads", "2"]);
    assert_ok(&["--io-threads", "4"]);
    let v = assert_ok(&["--io-model", "sharded", "--io-threads", "4"]);
    assert_eq!(v["io_contexts"], 4);
    let v = assert_ok(&[
        "--io-model",
        "sharded",
        "--io-threads",
        "2",
        "--server-lanes",
        "2",
    ]);
    assert_eq!(v["server_io_lanes"], 2);
    // auto: sharded with several lanes steers by peer port.
    assert_eq!(v["lane_steering"], "peer-port");
    let v = assert_ok(&[
        "--io-model",
        "sharded",
        "--io-threads",
        "2",
        "--server-lanes",
        "2",
        "--lane-steering",
        "hash",
    ]);
    assert_eq!(v["lane_steering"], "kernel-hash");
    // More lanes than contexts, and shared with port steering on IPv6.
    assert_ok(&[
        "--io-model",
        "sharded",
        "--io-threads",
        "2",
        "--server-lanes",
        "3",
    ]);
    let v = assert_ok(&[
        "--server-lanes",
        "2",
        "--lane-steering",
        "port",
        "--address-family",
        "ipv6",
    ]);
    assert_eq!(v["lane_steering"], "peer-port");
    assert_ok(&["--window", "16"]);
    assert_ok(&["--work", "10000"]);
    assert_ok(&["--batch", "1"]);
}

#[test]
fn largest_payloads_and_ipv6_are_ok() {
    assert_ok(&["--payload", "65507", "--clients", "4"]);
    let v = assert_ok(&["--address-family", "ipv6"]);
    assert_eq!(v["address_family"], "ipv6");
    assert_ok(&[
        "--address-family",
        "ipv6",
        "--payload",
        "65527",
        "--clients",
        "4",
    ]);
}

/// The seed's burst-loss case: 16 clients x 64 x 16 KiB in flight against a
/// server receive buffer of 64 KiB requested (128 KiB granted). The run
/// fails, and the kernel's own counters account for every lost echo, of
/// either phase (the opening burst is the warm-up's: its losses are
/// `udp_lost_warmup_messages`, and `udp_lost_messages <= messages_sent`).
#[test]
fn burst_over_a_small_server_buffer_fails_with_kernel_drops_accounting_for_the_loss() {
    let (code, v) = run(&[
        "--payload",
        "16384",
        "--window",
        "64",
        "--udp-server-receive-buffer",
        "65536",
    ]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false);
    let measured = v["udp_lost_messages"].as_u64().unwrap();
    assert!(measured <= v["messages_sent"].as_u64().unwrap(), "{v}");
    let lost = measured + v["udp_lost_warmup_messages"].as_u64().unwrap();
    assert!(lost > 0, "{v}");
    assert_eq!(v["udp_server_receive_buffer_bytes"], 131_072);
    // Each lost message is one datagram the kernel dropped on one of our
    // sockets (SO_RXQ_OVFL).
    assert_eq!(v["kernel_rcvbuf_drops"].as_u64().unwrap(), lost, "{v}");
    assert!(v["error"].as_str().unwrap().contains("udp_lost_"), "{v}");
}

#[test]
fn loss_timeout_keeps_measuring_and_accounts_for_every_message() {
    // The same burst with --loss-timeout: slots of lost messages are reused,
    // so the measured phase goes on; sent = completed + lost (measured).
    let (_, v) = run(&[
        "--payload",
        "16384",
        "--window",
        "64",
        "--udp-server-receive-buffer",
        "65536",
        "--loss-timeout",
        "50",
        "--warmup",
        "0",
    ]);
    let sent = v["messages_sent"].as_u64().unwrap();
    let done = v["messages"].as_u64().unwrap();
    let lost = v["udp_lost_messages"].as_u64().unwrap();
    let warm = v["udp_lost_warmup_messages"].as_u64().unwrap();
    assert_eq!(warm, 0);
    assert!(lost > 0, "{v}");
    assert_eq!(sent, done + lost, "{v}");
    assert_eq!(v["drain_timeouts"], 0, "{v}");
    assert_eq!(v["unexpected_messages"], 0, "{v}");
}

/// A server lane still busy when the run stops it (10M rounds of work per
/// echo, 512 echoes queued) has counters that are not final: the run says
/// so, and ends without waiting for the backlog (seconds more).
#[test]
fn a_server_that_cannot_stop_in_time_fails_the_run_instead_of_reporting_partial_counters() {
    let t = Instant::now();
    let (code, v) = run(&[
        "--work",
        "10000000",
        "--clients",
        "8",
        "--window",
        "64",
        "--io-threads",
        "2",
        "--warmup",
        "0",
        "--seconds",
        "0.1",
    ]);
    let took = t.elapsed();
    assert_eq!(code, Some(1), "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.starts_with("the server did not close") && error.contains("not final"),
        "{error}"
    );
    // 0.1 s + 2 s drain + the 1.5 s shutdown deadline, plus a margin.
    assert!(took < Duration::from_secs(8), "took {took:?}");
}

#[test]
fn a_run_always_ends_on_time() {
    // Clients against a port where a plain socket swallows everything: no
    // echo ever comes back. The run must end after warm-up + seconds + 2 s
    // drain + a small margin.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sink.local_addr().unwrap().to_string();
    let t = Instant::now();
    let out = keel_bench(&["--connect", &addr, "--seconds", "0.2", "--warmup", "0.1"]);
    let took = t.elapsed();
    let v = json_line(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(v["drain_timeouts"], 1, "{v}");
    // The default: one client, window 1; its one message, sent in the
    // warm-up, is the warm-up's loss (the measured phase sent nothing, so
    // it lost nothing).
    assert_eq!(v["udp_lost_warmup_messages"], 1, "{v}");
    assert_eq!(v["udp_lost_messages"], 0, "{v}");
    assert_eq!(v["messages_sent"], 0, "{v}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
    // Client-only runs know nothing of the server.
    assert!(v["server_io_lanes"].is_null());
    assert!(v["udp_server_receive_buffer_bytes"].is_null());
    assert_eq!(v["role"], "client");
}

/// `serve` in one process, `--connect` clients in another: same JSON, server
/// fields null; serve ends on SIGTERM with its summary line.
#[test]
fn split_roles_on_loopback_and_serve_summary_on_sigterm() {
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let bind = format!("127.0.0.1:{port}");
    let mut server = Command::new(BIN)
        .args(["serve", "--bind", &bind, "--seconds", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it listens (it says so on stderr).
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    let out = keel_bench(&["--connect", &bind, "--seconds", "0.3", "--warmup", "0.1"]);
    let v = json_line(&out);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["handler_work"].is_null());
    assert_eq!(v["connect"], bind.as_str());
    let status = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = server.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["ended_by"], "SIGTERM");
    assert_eq!(summary["ok"], true);
    assert!(summary["datagrams_in"].as_u64().unwrap() >= v["messages"].as_u64().unwrap());
    assert_eq!(summary["datagrams_in"], summary["datagrams_out"]);
}

/// sockperf's ping-pong client against `serve --sockperf` gets its replies.
#[test]
fn sockperf_ping_pong_gets_replies() {
    if Command::new("sockperf").arg("--version").output().is_err() {
        eprintln!("SKIPPED sockperf_ping_pong_gets_replies: sockperf is not installed (scripts/test.sh installs it from Debian's sockperf package when apt-get works)");
        return;
    }
    let port = {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap().port()
    };
    let mut server = Command::new(BIN)
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--sockperf",
            "--seconds",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    assert!(line.contains("listening"), "{line}");
    let out = Command::new("timeout")
        .args([
            "20",
            "sockperf",
            "ping-pong",
            "-i",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .args(["-m", "1024", "--full-rtt", "-t", "1"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let served = server.wait_with_output().unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Summary: Round trip"), "{text}");
    // sockperf reports "[Total Run] ... ReceivedMessages=N" and drops.
    let received = text
        .split("ReceivedMessages=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(received > 0, "{text}");
    for line in text.lines().filter(|l| l.contains("dropped messages")) {
        assert!(
            line.trim_end().ends_with("= 0"),
            "sockperf saw drops: {line}"
        );
    }
    let summary: Value = serde_json::from_slice(&served.stdout).unwrap();
    assert!(summary["datagrams_out"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(summary["invalid_messages"], 0, "{summary}");
}

/// Split roles across two network namespaces (scripts/netns-pair.sh).
#[test]
fn split_roles_across_network_namespaces() {
    let probe = Command::new("ip")
        .args(["netns", "add", "keel-test-probe"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {
            let _ = Command::new("ip")
                .args(["netns", "del", "keel-test-probe"])
                .status();
        }
        Ok(o) => {
            eprintln!(
                "SKIPPED split_roles_across_network_namespaces: cannot create a network namespace ({}); needs root",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!(
                "SKIPPED split_roles_across_network_namespaces: iproute2 `ip` not available ({e})"
            );
            return;
        }
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/netns-pair.sh");
    let out = Command::new("bash")
        .args([script, "--bench", BIN, "--"])
        .args(["--clients", "4", "--seconds", "0.3", "--warmup", "0.1"])
        .output()
        .unwrap();
    let v = json_line(&out);
    assert_eq!(
        v["ok"],
        true,
        "{v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(v["connect"], "192.0.2.1:9400");
    assert_eq!(out.status.code(), Some(0));
}
