//! `--impair` and `--impair-server`: the link conditioner through the
//! built binary. A lossy run keeps measuring with `--loss-timeout` and
//! accounts for every message (`messages_sent = messages +
//! udp_lost_messages` with `--warmup 0`), duplicates show as
//! `unexpected_messages`, reordering as `order_errors`, a delay as RTT, and
//! bad specs exit 2 naming the flag and the key. Runs go one at a time, so
//! timing-based expectations do not compete for the CPU.

mod common;

use std::process::Output;
use std::sync::Mutex;

use serde_json::Value;

use common::{json_line, u};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// [`common::keel_bench`], one run at a time.
fn keel_bench(args: &[&str]) -> Output {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    common::keel_bench(args)
}

/// Runs; returns the exit code and the JSON line.
fn run(args: &[&str]) -> (Option<i32>, Value) {
    let out = keel_bench(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.code(), json_line(&out))
}

/// Asserts `observed` is within 4 standard deviations (plus `slack`) of
/// `trials * p`.
#[track_caller]
fn about(what: &str, observed: u64, trials: u64, p: f64, slack: f64) {
    let mean = trials as f64 * p;
    let sd = (trials as f64 * p * (1.0 - p)).sqrt();
    eprintln!(
        "{what}: {observed} of {trials} = {:.4} (configured {p})",
        observed as f64 / trials as f64
    );
    assert!(
        (observed as f64 - mean).abs() <= 4.0 * sd + slack,
        "{what}: {observed} of {trials}, expected {mean:.1} +/- 4 x {sd:.1} + {slack}"
    );
}

#[test]
fn a_lossy_path_keeps_measuring_and_accounts_for_every_message() {
    for flag in ["--impair", "--impair-server"] {
        let (code, v) = run(&[
            flag,
            "loss=0.05,seed=1",
            "--loss-timeout",
            "50",
            "--warmup",
            "0",
            "--seconds",
            "0.5",
            "--clients",
            "2",
            "--window",
            "8",
        ]);
        let sent = u(&v, "messages_sent");
        let lost = u(&v, "udp_lost_messages");
        assert!(u(&v, "messages") > 0, "{flag}: {v}");
        assert_eq!(sent, u(&v, "messages") + lost, "{flag}: {v}");
        for clean in [
            "content_errors",
            "order_errors",
            "unexpected_messages",
            "late_echoes",
            "kernel_rcvbuf_drops",
        ] {
            assert_eq!(u(&v, clean), 0, "{flag} {clean}: {v}");
        }
        // Losses make the run fail its checks, by name, with exit 1.
        assert_eq!(v["ok"], false, "{flag}: {v}");
        assert_eq!(v["error"], format!("udp_lost_messages = {lost}"), "{flag}");
        assert_eq!(code, Some(1), "{flag}");
        about(&format!("{flag} loss"), lost, sent, 0.05, 0.0);
    }
}

#[test]
fn duplicates_show_as_unexpected_messages() {
    let (code, v) = run(&[
        "--impair",
        "dup=0.1,seed=2",
        "--warmup",
        "0",
        "--seconds",
        "0.3",
    ]);
    let sent = u(&v, "messages_sent");
    assert_eq!(u(&v, "messages"), sent, "every message came back: {v}");
    assert_eq!(u(&v, "udp_lost_messages"), 0, "{v}");
    assert_eq!(u(&v, "order_errors"), 0, "{v}");
    assert_eq!(code, Some(1));
    // The last message's duplicate may come after the tally is taken.
    about("duplicates", u(&v, "unexpected_messages"), sent, 0.1, 1.0);
}

#[test]
fn reordering_shows_as_order_errors() {
    let window = 16;
    let (code, v) = run(&[
        "--impair",
        "reorder=0.2,reorder-delay=5ms,seed=3",
        "--window",
        &window.to_string(),
        "--warmup",
        "0",
        "--seconds",
        "0.3",
    ]);
    let sent = u(&v, "messages_sent");
    let order = u(&v, "order_errors");
    assert_eq!(sent, u(&v, "messages") + order, "{v}");
    assert_eq!(u(&v, "udp_lost_messages"), 0, "{v}");
    assert_eq!(u(&v, "unexpected_messages"), 0, "{v}");
    assert_eq!(code, Some(1));
    // Held back at the very end, a message may find nothing to overtake it.
    about("reordered", order, sent, 0.2, f64::from(window));
}

#[test]
fn a_delay_adds_latency_and_keeps_order() {
    let (code, v) = run(&[
        "--impair-server",
        "delay=5ms",
        "--window",
        "4",
        "--warmup",
        "0",
        "--seconds",
        "0.3",
    ]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(code, Some(0));
    assert_eq!(u(&v, "messages"), u(&v, "messages_sent"));
    let p50 = v["rtt_p50_us"].as_f64().unwrap();
    assert!(p50 >= 5000.0, "p50 {p50} us under the 5 ms delay: {v}");
}

#[test]
fn off_is_the_default_and_can_be_said() {
    let (code, v) = run(&[
        "--impair",
        "off",
        "--impair-server",
        "delay=0",
        "--warmup",
        "0",
        "--seconds",
        "0.2",
    ]);
    assert_eq!((code, &v["ok"]), (Some(0), &Value::Bool(true)), "{v}");
    assert_eq!(u(&v, "messages"), u(&v, "messages_sent"));
}

#[test]
fn bad_specs_exit_2_naming_the_flag_the_key_and_what_is_accepted() {
    for (args, needles) in [
        (
            &["--impair", "loss=2"][..],
            &["--impair: loss: expected a probability", "\"2\""][..],
        ),
        (&["--impair", "loss=5"], &["--impair: loss:", "5%"]),
        (
            &["--impair", "lost=0.1"],
            &["--impair:", "unknown key \"lost\"", "accepted: loss, delay"],
        ),
        (&["--impair", ""], &["--impair:", "KEY=VALUE"]),
        (&["--impair", "0.05"], &["--impair:", "KEY=VALUE"]),
        (&["--impair", "delay=20"], &["--impair: delay:", "20ms"]),
        (
            &["--impair", "delay=5ms,jitter=6ms"],
            &["--impair: jitter: expected at most delay (5ms)"],
        ),
        (
            &["--impair", "dup=0.1,dup=0.2"],
            &["--impair: dup: given more than once"],
        ),
        (
            &["--impair", "reorder=0.1,reorder-delay=0"],
            &["--impair: reorder-delay:", "positive"],
        ),
        (
            &["--impair", "seed=-1"],
            &["--impair: seed:", "unsigned integer"],
        ),
        (
            &["--impair-server", "loss=nan"],
            &["--impair-server: loss:"],
        ),
        (
            &["--impair=off", "--impair", "off"],
            &["--impair: given more than once"],
        ),
        (
            &["--connect", "127.0.0.1:9", "--impair-server", "loss=0.1"],
            &["--impair-server:", "--connect runs no server"],
        ),
    ] {
        let (code, v) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {v}");
        assert_eq!(v["ok"], false);
        let error = v["error"].as_str().unwrap();
        for needle in needles {
            assert!(
                error.contains(needle),
                "{args:?}: {error:?} lacks {needle:?}"
            );
        }
    }
}

#[test]
fn help_documents_both_flags() {
    let out = keel_bench(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--impair SPEC [run, relay]",
        "--impair-server SPEC [run, relay]",
        "loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1",
        "reorder-delay=D",
        "--loss-timeout",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
}

/// Issue 19, point 6: `udp_lost_messages` counts measured-phase messages
/// only, so it never exceeds `messages_sent`, whatever the window. A path
/// that loses everything loses the warm-up's whole window (each lost echo
/// holds its slot until the drain ends): the measured phase sends nothing,
/// and those losses are the warm-up's (`udp_lost_warmup_messages`, among
/// `warmup_errors`), not more lost than sent.
#[test]
fn warm_up_losses_are_the_warm_ups_so_lost_never_exceeds_sent() {
    let (clients, window) = (2, 8);
    let (code, v) = run(&[
        "--impair",
        "loss=1,seed=4",
        "--clients",
        &clients.to_string(),
        "--window",
        &window.to_string(),
        "--warmup",
        "0.05",
        "--seconds",
        "0.05",
        "--drain",
        "0.05",
    ]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false, "{v}");
    let sent = u(&v, "messages_sent");
    assert!(u(&v, "udp_lost_messages") <= sent, "lost > sent: {v}");
    assert_eq!(
        sent, 0,
        "every window slot waits for a lost warm-up echo: {v}"
    );
    assert_eq!(u(&v, "udp_lost_messages"), 0, "{v}");
    let warmup_lost = u(&v, "udp_lost_warmup_messages");
    assert_eq!(warmup_lost, clients * window, "{v}");
    assert!(u(&v, "warmup_errors") >= warmup_lost, "{v}");
    assert_eq!(v["warmup_ok"], false, "{v}");
    assert_eq!(
        v["error"],
        format!(
            "warm-up failed: warmup_errors = {} (udp_lost_warmup_messages = {warmup_lost})",
            u(&v, "warmup_errors")
        ),
        "{v}"
    );
}

/// With a warm-up and losses in both phases, each phase accounts for its
/// own: `messages_sent = messages + udp_lost_messages` (measured), and the
/// warm-up's losses are apart (they used to be added to
/// `udp_lost_messages`, so the identity needed `--warmup 0`).
#[test]
fn a_lossy_path_with_a_warm_up_accounts_for_each_phase_apart() {
    let (code, v) = run(&[
        "--impair",
        "loss=0.2,seed=5",
        "--loss-timeout",
        "20",
        "--warmup",
        "0.15",
        "--seconds",
        "0.15",
        "--clients",
        "2",
        "--window",
        "8",
    ]);
    assert_eq!(code, Some(1), "{v}");
    let sent = u(&v, "messages_sent");
    let lost = u(&v, "udp_lost_messages");
    assert!(lost <= sent, "lost > sent: {v}");
    assert_eq!(sent, u(&v, "messages") + lost, "{v}");
    assert!(lost > 0, "{v}");
    assert!(u(&v, "udp_lost_warmup_messages") > 0, "{v}");
    assert_eq!(u(&v, "order_errors"), 0, "{v}");
}
