//! The open loop (`--rate`) of every protocol, the scale case's shape:
//! clients send at a game tick, the server runs apart from them, and the
//! line reports the server's CPU per message and memory per connection.

mod common;

use common::{f, run, u};

#[test]
fn every_protocol_runs_open_loop_and_reports_the_servers_cost() {
    for proto in ["udp", "rudp", "kcp"] {
        // 64 clients at 100 Hz for 0.6 s: 3,840 messages, sends spread.
        let (code, v) = run(&[
            "--protocol",
            proto,
            "--rate",
            "100",
            "--clients",
            "64",
            "--payload",
            "100",
            "--seconds",
            "0.6",
            "--warmup",
            "0.1",
        ]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["protocol"], proto);
        assert_eq!(v["rate_hz"], 100);
        let sent = u(&v, "messages_sent");
        assert!((3_000..=4_700).contains(&sent), "{proto}: {sent} sent: {v}");
        assert_eq!(u(&v, "messages"), sent, "{v}");
        assert_eq!(u(&v, "udp_lost_messages"), 0, "{v}");
        // CPU time comes in 10 ms ticks: a short run may see 0.
        assert!(f(&v, "server_cpu_us_per_message") >= 0.0, "{v}");
        assert!(f(&v, "server_cpu_percent") >= 0.0, "{v}");
        let rss = f(&v, "rss_bytes_per_connection");
        assert!(
            rss > 0.0 && rss < 4.0 * 1024.0 * 1024.0,
            "{proto}: {rss}: {v}"
        );
    }
}

#[test]
fn the_open_loop_takes_thousands_of_clients_the_closed_loop_does_not() {
    let (code, v) = run(&[
        "--protocol",
        "udp",
        "--rate",
        "5",
        "--clients",
        "2000",
        "--payload",
        "64",
        "--seconds",
        "0.4",
        "--warmup",
        "0",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["clients"], 2000);
    assert!(u(&v, "messages") >= 2000, "{v}");
    let (code, v) = run(&["--clients", "2000"]);
    assert_eq!(code, 2, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("--clients") && e.contains("1..=1024"), "{e}");
}
