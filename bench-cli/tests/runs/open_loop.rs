//! The open loop (`--rate`) of every protocol, the scale case's shape:
//! clients send at a game tick, the server runs apart from them, and the
//! line reports the server's CPU per message and memory per connection.

use crate::common::{f, run, u};

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
        let datagrams = f(&v, "server_datagrams_per_message");
        match proto {
            "udp" => assert_eq!(datagrams, 1.0, "{v}"),
            // At 100 Hz the 10 ms tick outlasts the 5 ms ack delay.
            "rudp" => assert!(datagrams > 1.5, "acknowledgements alone: {v}"),
            // KCP packs its acknowledgements with data every 10 ms.
            _ => assert!(datagrams > 0.5, "{v}"),
        }
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

#[test]
fn acknowledgements_ride_on_the_next_tick_with_an_ack_delay_above_it() {
    // 8 clients at 20 Hz: an echo comes back well inside the tick, so with
    // keel-rudp's 5 ms its acknowledgement goes alone (2 datagrams per
    // message at the server); at 51 ms it waits for the next message.
    let per_message = |ack_delay: &str| {
        let (code, v) = run(&[
            "--protocol",
            "rudp",
            "--rate",
            "20",
            "--clients",
            "8",
            "--payload",
            "100",
            "--seconds",
            "1",
            "--warmup",
            "0.2",
            "--ack-delay",
            ack_delay,
        ]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(u(&v, "ack_delay_ms").to_string(), ack_delay);
        f(&v, "server_datagrams_per_message")
    };
    let alone = per_message("5");
    let riding = per_message("51");
    assert!(alone > 1.7, "ack delay 5 ms: {alone} datagrams per message");
    assert!(
        riding < 1.3,
        "ack delay 51 ms: {riding} datagrams per message"
    );
}
