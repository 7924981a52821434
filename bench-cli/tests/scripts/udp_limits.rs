//! scripts/udp-limits.sh end to end: options and exit codes, the files it
//! writes (with the fake benchmark, tests/fixtures/fake-keel-bench, for the
//! runs and the real `keel-bench report`), and one tiny real probe that
//! checks the relation the probe exists to show: lost echoes never exceed
//! the part of the opening burst that does not fit the server's receive
//! buffer, and every loss is a kernel receive-buffer drop.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{fake_bench, repo_root, s, scratch, stderr, stdout, BIN};

/// A benchmark for the script: runs go to the fake, `report` to the real
/// keel-bench.
fn fake_with_real_report(dir: &Path) -> PathBuf {
    let fake = fake_bench();
    let path = dir.join("bench");
    std::fs::write(
        &path,
        format!(
            "#!/usr/bin/env bash\n\
             if [[ \"${{1:-}}\" == report ]]; then exec '{}' \"$@\"; fi\n\
             exec '{}' \"$@\"\n",
            BIN,
            fake.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn limits(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/udp-limits.sh"))
        .args(args);
    cmd.env_remove("FAKE_BENCH_MODE")
        .env_remove("FAKE_BENCH_LOSS_WINDOW");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run scripts/udp-limits.sh")
}

fn summary(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("limits.json")).unwrap()).unwrap()
}

fn cell(json: &Value, payload: u64, window: u64) -> &Value {
    json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["payload_bytes"] == payload && c["window"] == window)
        .unwrap_or_else(|| panic!("no cell {payload} x {window}"))
}

#[test]
fn help_and_bad_options() {
    let o = limits(&["--help"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Usage: scripts/udp-limits.sh"));

    for (args, says) in [
        (&["--windows", "1,x"][..], "--windows"),
        (&["--payloads", ""][..], "--payloads"),
        (&["--repetitions", "0"][..], "--repetitions"),
        (&["--seconds", "fast"][..], "--seconds"),
        (&["--clients"][..], "--clients: missing value"),
        (&["--bogus"][..], "unknown option --bogus"),
    ] {
        let o = limits(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }

    // Out of keel-bench's ranges: refused before --out is touched (not by
    // the matrix after the snmp snapshot).
    let dir = scratch(module_path!(), "ranges");
    let out = dir.join("probe");
    let bench = fake_bench();
    for (args, says) in [
        (
            &["--windows", "1,0"][..],
            "--windows: 0 is out of range; accepted: integers 1..1024",
        ),
        (
            &["--windows", "2000"][..],
            "--windows: 2000 is out of range",
        ),
        (
            &["--payloads", "8"][..],
            "--payloads: 8 is out of range; accepted: integers 16..65535",
        ),
        (
            &["--clients", "0"][..],
            "--clients: expected an integer 1..1024",
        ),
        (
            &["--seconds", "0"][..],
            "--seconds: expected a decimal number of seconds, 0 < s",
        ),
        (
            &["--warmup", "4000"][..],
            "--warmup: expected a decimal number of seconds, 0 <= s",
        ),
    ] {
        let mut all = vec!["--bench", s(&bench), "--out", s(&out)];
        all.extend_from_slice(args);
        let o = limits(&all, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!out.exists(), "{args:?} made {}", out.display());
    }
}

#[test]
fn fake_probe_writes_runs_snmp_report_and_tables() {
    let dir = scratch(module_path!(), "fake");
    let bench = fake_with_real_report(&dir);
    let out = dir.join("probe");
    let o = limits(
        &[
            "--bench",
            s(&bench),
            "--out",
            s(&out),
            "--payloads",
            "1472,65507",
            "--windows",
            "1,16",
            "--repetitions",
            "2",
            "--seconds",
            "0.1",
        ],
        &[("FAKE_BENCH_LOSS_WINDOW", "16")],
    );
    // Lossy cells fail their runs by design; the probe itself succeeds.
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for f in [
        "runs.jsonl",
        "snmp-before.txt",
        "snmp-after.txt",
        "limits.json",
        "limits.md",
        "report/report.md",
        "report/loss.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
        assert!(
            stdout(&o).contains(s(&out.join(f))),
            "{f} not announced: {}",
            stdout(&o)
        );
    }
    let runs = std::fs::read_to_string(out.join("runs.jsonl")).unwrap();
    assert_eq!(runs.lines().count(), 8, "2 payloads x 2 windows x 2 runs");

    let json = summary(&out);
    assert_eq!(json["settings"]["clients"], 16);
    assert_eq!(json["settings"]["io_model"], "shared");
    assert_eq!(json["settings"]["io_threads"], 1);
    assert_eq!(json["totals"]["runs"], 8);
    assert_eq!(json["totals"]["failed_by_loss"], 4);
    assert_eq!(json["totals"]["failed_otherwise"], 0);
    let lossy = cell(&json, 65507, 16);
    assert_eq!(lossy["burst_datagrams"], 16 * 16);
    assert_eq!(lossy["burst_payload_bytes"], 16 * 16 * 65507);
    // The fake loses 3 x window echoes per run.
    assert_eq!(lossy["lost_per_run"], serde_json::json!([48, 48]));
    assert_eq!(cell(&json, 1472, 1)["passed"], 2);
    if cfg!(target_os = "linux") {
        // The fill test measured the receive buffer: a datagram costs at
        // least its payload, and at least one fits.
        let fill = &json["fill"][1];
        assert_eq!(fill["payload_bytes"], 65507);
        assert!(fill["charged_bytes_per_datagram"].as_u64().unwrap() >= 65507);
        assert!(fill["datagrams_that_fit"].as_u64().unwrap() >= 1);
        assert!(json["snmp_delta"]["Udp"]["RcvbufErrors"].is_i64());
    }

    let md = std::fs::read_to_string(out.join("limits.md")).unwrap();
    assert!(md.contains("## Lost echoes per cell"), "{md}");
    assert!(
        md.contains("| 65507 | 0 (0/2 failed) | 48 (2/2 failed) |"),
        "{md}"
    );
    assert!(md.contains("## Loss, burst and the server's receive buffer"));
    assert!(md.contains("| Udp RcvbufErrors |"));
    assert!(md.contains("Command: `scripts/udp-limits.sh --bench"));

    // A second probe into the same directory would mix two runs: refused.
    let again = limits(&["--bench", s(&bench), "--out", s(&out)], &[]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("exists and is not empty"));
}

#[test]
fn a_run_failing_for_another_reason_than_loss_exits_1() {
    let dir = scratch(module_path!(), "crash");
    let bench = fake_with_real_report(&dir);
    let out = dir.join("probe");
    let o = limits(
        &[
            "--bench",
            s(&bench),
            "--out",
            s(&out),
            "--payloads",
            "1472",
            "--windows",
            "1",
            "--repetitions",
            "1",
        ],
        &[("FAKE_BENCH_MODE", "garbage")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("other than lost echoes"),
        "{}",
        stderr(&o)
    );
    let json = summary(&out);
    assert_eq!(json["totals"]["failed_otherwise"], 1);
    let md = std::fs::read_to_string(out.join("limits.md")).unwrap();
    assert!(md.contains("## Runs that failed for another reason than loss"));
}

/// The real benchmark, two short runs: 16 clients with 64 KiB datagrams,
/// window 1 and 16. Whatever the host's buffer limits, a lost echo must be
/// a kernel receive-buffer drop, and no more are lost than the opening burst
/// exceeds what the server's buffer holds.
#[cfg(target_os = "linux")]
#[test]
fn real_probe_loss_is_bounded_by_the_burst_over_the_buffer() {
    let dir = scratch(module_path!(), "real");
    let out = dir.join("probe");
    let o = limits(
        &[
            "--bench",
            BIN,
            "--out",
            s(&out),
            "--payloads",
            "65507",
            "--windows",
            "1,16",
            "--repetitions",
            "1",
            "--seconds",
            "0.1",
            "--warmup",
            "0",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let json = summary(&out);
    assert_eq!(json["totals"]["failed_otherwise"], 0);
    for w in [1, 16] {
        let c = cell(&json, 65507, w);
        let excess = c["opening_burst_excess"].as_u64().unwrap();
        let lost = c["lost_per_run"][0].as_u64().unwrap();
        let drops = c["kernel_rcvbuf_drops_per_run"][0].as_u64().unwrap();
        assert!(lost <= excess, "window {w}: lost {lost} > excess {excess}");
        assert_eq!(lost, drops, "window {w}: every lost echo is a kernel drop");
        assert_eq!(
            c["server_receive_buffer_bytes"], json["fill"][0]["receive_buffer_granted_bytes"],
            "the fill test used the server's buffer size"
        );
    }
}

/// The probe's own output says which failures are its results: runs that
/// lose echoes are "lost as expected", FAILED is kept for surprises; and
/// a second probe into the same directory replaces the first with
/// --overwrite.
#[test]
fn expected_losses_are_not_called_failed_and_overwrite_reruns() {
    let dir = scratch(module_path!(), "expected");
    let bench = fake_with_real_report(&dir);
    let out = dir.join("probe");
    let args = [
        "--bench",
        s(&bench),
        "--out",
        s(&out),
        "--payloads",
        "1472",
        "--windows",
        "1,16",
        "--repetitions",
        "1",
        "--seconds",
        "0.1",
    ];
    let env = [("FAKE_BENCH_LOSS_WINDOW", "16")];
    let o = limits(&args, &env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("-> lost as expected: 48 echoes"), "{err}");
    assert!(!err.contains("FAILED"), "{err}");
    assert!(
        err.contains("2 runs: 1 passed, 1 lost echoes as expected") && err.contains("no surprise"),
        "{err}"
    );

    let again = limits(&[&args[..], &["--overwrite"]].concat(), &env);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let runs = std::fs::read_to_string(out.join("runs.jsonl")).unwrap();
    assert_eq!(runs.lines().count(), 2, "replaced, not appended");
}

/// A payload over the IPv4 limit is refused by keel-bench: the probe
/// reports it as expected (exit 0), in its progress, its tables and its
/// data.
#[test]
fn real_payload_over_the_ipv4_limit_is_refused_as_expected() {
    let dir = scratch(module_path!(), "refused");
    let out = dir.join("probe");
    let o = limits(
        &[
            "--bench",
            BIN,
            "--out",
            s(&out),
            "--payloads",
            "65508",
            "--windows",
            "1",
            "--repetitions",
            "1",
            "--seconds",
            "0.1",
            "--warmup",
            "0",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("-> refused as expected: payload 65508 B is over the IPv4 limit (65507 B)"),
        "{err}"
    );
    assert!(!err.contains("FAILED"), "{err}");
    let json = summary(&out);
    assert_eq!(json["totals"]["refused_over_limit"], 1);
    assert_eq!(json["totals"]["failed_otherwise"], 0);
    let md = std::fs::read_to_string(out.join("limits.md")).unwrap();
    assert!(md.contains("| 65508 | refused: over 65507 B |"), "{md}");
}
