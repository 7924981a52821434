//! The open loop (`--rate`) of every protocol, the scale case's shape:
//! clients send at a game tick, the server runs apart from them, and the
//! line reports the server's CPU per message and memory per connection.

use crate::common::{f, run, u};
use serde_json::Value;

/// 64 clients of `proto` at 100 Hz for 0.6 s (3,840 messages, sends
/// spread), with `extra` arguments; checks that the run passed, that the
/// open loop paced its sends and that every message came back.
fn open_loop_run(proto: &str, extra: &[&str]) -> Value {
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    let (code, v) = run(&args);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["protocol"], proto);
    assert_eq!(v["rate_hz"], 100);
    // The schedule bounds the sends: client i of 64 sends at
    // (k + i/64) / 100 s from the warm-up's start, only before the
    // measured phase ends, so at most 64 x 100 x 0.7 = 4,480 in all
    // (one more per client for the rounding epsilon of `pump`). A
    // client that runs late catches up on what is due, but sends not
    // made by the end are not made: on a loaded machine (six busy
    // loops on two cores) 2,594 of the 3,840 were measured. A quarter
    // of the measured phase's 3,840 still fails an open loop that does
    // not pace at the rate (one send per client, or the warm-up's only).
    let sent = u(&v, "messages_sent");
    assert!((960..=4_544).contains(&sent), "{proto}: {sent} sent: {v}");
    assert_eq!(u(&v, "messages"), sent, "{v}");
    assert_eq!(u(&v, "udp_lost_messages"), 0, "{v}");
    v
}

#[test]
fn every_protocol_runs_open_loop_and_reports_the_servers_cost() {
    for proto in ["udp", "rudp", "kcp"] {
        let v = open_loop_run(proto, &[]);
        // CPU time comes in 10 ms ticks: a short run may see 0.
        assert!(f(&v, "server_cpu_us_per_message") >= 0.0, "{v}");
        assert!(f(&v, "server_cpu_percent") >= 0.0, "{v}");
        let datagrams = f(&v, "server_datagrams_per_message");
        match proto {
            // A UDP message is a datagram, whatever the timing.
            "udp" => assert_eq!(datagrams, 1.0, "{v}"),
            // keel-rudp and KCP: reported, and within what a message can
            // cost at no loss (its datagram, an acknowledgement alone, the
            // handshakes' share, a spurious resend). How many the server
            // gets is the scheduler's: at 100 Hz a client 5 ms late lets
            // its acknowledgement ride on the next message, and one that
            // catches up packs several messages into a datagram (six busy
            // loops on two cores: 0.26 to 0.84 for keel-rudp, 0.28 to 0.75
            // for KCP, against 1.50 and 1.74, 0.83 and 0.95 without the loops). The
            // acknowledgement accounting itself is checked at 20 Hz, with
            // 45 ms of margin, in the test below.
            _ => assert!(
                datagrams > 0.0 && datagrams < 4.0,
                "{proto}: {datagrams} datagrams per message: {v}"
            ),
        }
        let rss = f(&v, "rss_bytes_per_connection");
        assert!(
            rss > 0.0 && rss < 4.0 * 1024.0 * 1024.0,
            "{proto}: {rss}: {v}"
        );
    }
}

/// `--client-sockets shared`: a socket per client thread, each client
/// sending from its own 127.1.x.y. A reply routed to the wrong client, or
/// clients that share a source address (the server would see one peer:
/// echoes to one address, a keel-rudp connection replaced by the next
/// hello), shows as unexpected, lost or disconnected.
#[test]
fn shared_client_sockets_keep_every_client_apart() {
    for proto in ["udp", "rudp", "kcp"] {
        let v = open_loop_run(proto, &["--client-sockets", "shared"]);
        assert_eq!(v["client_sockets"], "shared", "{v}");
        assert_eq!(u(&v, "unexpected_messages"), 0, "{v}");
        assert_eq!(u(&v, "disconnect_errors"), 0, "{v}");
        assert_eq!(u(&v, "order_errors"), 0, "{v}");
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
fn acknowledgements_ride_on_the_next_tick_whatever_the_ack_delay() {
    // 8 clients at 20 Hz: an echo comes back well inside the tick. Before
    // keel-rudp's tick ack policy (Config::tick_ack_delay) a client's 5 ms
    // max_ack_delay sent its acknowledgement alone (2 datagrams per message
    // at the server, > 1.7 measured) and only 51 ms let it wait for the
    // next message; now a client sending at a steady tick holds it for that
    // tick either way, once it has measured its tick (the 1 s warm-up):
    // 1.1-1.2 at 5 ms and 1.04-1.08 at 51 ms here, 2.0 without the policy.
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
            "1",
            "--ack-delay",
            ack_delay,
        ]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(u(&v, "ack_delay_ms").to_string(), ack_delay);
        f(&v, "server_datagrams_per_message")
    };
    let short = per_message("5");
    let long = per_message("51");
    assert!(short < 1.5, "ack delay 5 ms: {short} datagrams per message");
    assert!(long < 1.5, "ack delay 51 ms: {long} datagrams per message");
}
