//! `keel-bench report` as a command: files in, table and charts out, exit
//! codes and the JSON error line when it cannot.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

use crate::common::{scratch, BIN};

fn report(args: &[&Path]) -> Output {
    Command::new(BIN)
        .arg("report")
        .args(args)
        .output()
        .expect("run keel-bench report")
}

fn run_line(model: &str, window: u64, rate: f64, ok: bool, rep: u64) -> String {
    let v = json!({
        "schema_version": 1, "backend": "keel", "protocol": "udp", "address_family": "ipv4",
        "payload_bytes": 1024, "clients": 4, "window": window, "io_model": model,
        "handler_work": 0, "io_contexts": 1, "io_threads": 1, "server_io_lanes": 1, "batch": 64,
        "roundtrips_per_second": rate, "rtt_p50_us": 20.0, "rtt_p99_us": 45.0,
        "rtt_p999_us": 90.0, "cpu_percent": 99.0,
        "udp_lost_messages": if ok { 0 } else { 12 },
        "ok": ok, "error": if ok { Value::Null } else { json!("udp_lost_messages = 12") },
        "repetition": rep, "command": format!("keel-bench --window {window}"),
    });
    format!("{v}\n")
}

#[test]
fn writes_table_and_charts_and_excludes_failed_configurations() {
    let dir = scratch(module_path!(), "ok");
    let a = dir.join("a.jsonl");
    let b = dir.join("b.jsonl");
    let mut first = String::new();
    for rep in 1..=3 {
        first += &run_line("shared", 1, 1000.0 * rep as f64, true, rep);
        first += &run_line("sharded", 1, 2000.0 * rep as f64, true, rep);
    }
    // A second file with a configuration whose second repetition failed.
    let second = run_line("shared", 16, 5000.0, true, 1)
        + &run_line("shared", 16, 0.0, false, 2)
        + "this line is not JSON\n";
    std::fs::write(&a, first).unwrap();
    std::fs::write(&b, second).unwrap();
    let out = dir.join("out");

    let o = report(&[&a, &b, Path::new("--out"), &out]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        o.stdout.is_empty(),
        "report prints nothing on stdout when it works"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("8 runs, 2 configurations summarised, 1 excluded"),
        "{stderr}"
    );
    assert!(stderr.contains("1 unreadable line"), "{stderr}");

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains(
            "| udp/ipv4 | 1024 | 4 | 1 | shared | 1 | 1 | 0 | 64 | 3 | 2000 [1000, 3000] |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| sharded | 1 | 1 | 0 | 64 | 3 | 4000 [2000, 6000] |"),
        "{md}"
    );
    assert!(md.contains("1 of 2 runs failed"), "{md}");
    assert!(md.contains("b.jsonl:2): udp_lost_messages = 12"), "{md}");
    assert!(md.contains("`keel-bench --window 16`"), "{md}");
    assert!(md.contains("b.jsonl:3: not JSON"), "{md}");
    for chart in ["throughput.svg", "p99.svg", "loss.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{chart}"
        );
        assert!(
            md.contains(&format!("]({chart})")),
            "report.md links {chart}"
        );
        // Sized for a docs page, not for the number of configurations.
        let width: u32 = svg
            .split_once("width=\"")
            .and_then(|(_, rest)| rest.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{chart} has no width"));
        assert!(width <= 1200, "{chart} is {width} px wide");
    }

    // Only failed runs without any configuration: no throughput/p99 chart,
    // and the old ones go.
    let c = dir.join("c.jsonl");
    std::fs::write(&c, run_line("shared", 1, 0.0, false, 1)).unwrap();
    let o = report(&[&c, Path::new("--out"), &out]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(!out.join("throughput.svg").exists());
    assert!(!out.join("p99.svg").exists());
    assert!(out.join("loss.svg").exists());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("No configuration passed every repetition."),
        "{md}"
    );
}

/// Exactly one JSON line on stdout with ok false and an error containing
/// `needle`, exit 1.
#[track_caller]
fn fails_with(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let stdout = String::from_utf8(o.stdout.clone()).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], false);
    let e = v["error"].as_str().unwrap();
    assert!(e.contains(needle), "{e}");
}

#[test]
fn unreadable_inputs_fail_with_one_json_line() {
    let dir = scratch(module_path!(), "errors");
    let out = dir.join("out");
    fails_with(
        &report(&[&dir.join("missing.jsonl"), Path::new("--out"), &out]),
        "cannot read",
    );
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "\n\n").unwrap();
    fails_with(
        &report(&[&empty, Path::new("--out"), &out]),
        "no result lines",
    );
    assert!(!out.exists(), "nothing written when nothing was read");

    // --out is a file: cannot create the directory.
    let good = dir.join("good.jsonl");
    std::fs::write(&good, run_line("shared", 1, 10.0, true, 1)).unwrap();
    fails_with(
        &report(&[&good, Path::new("--out"), &good]),
        "cannot create",
    );
}

/// Issue 24 defect 7: `report garbage.jsonl` exited 0 with "0
/// configurations summarised", and one run was "1 runs", "1
/// configurations".
#[test]
fn garbage_fails_and_one_run_is_singular() {
    let dir = scratch(module_path!(), "garbage");
    let out = dir.join("out");
    let garbage = dir.join("garbage.jsonl");
    std::fs::write(&garbage, "hello\n{\"not\": \"a record\"}\n[1, 2]\n").unwrap();
    let o = report(&[&garbage, Path::new("--out"), &out]);
    fails_with(&o, "no result lines");
    fails_with(&o, "all 3 lines are unreadable");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("garbage.jsonl:1: not JSON"), "{stderr}");
    assert!(!out.exists(), "nothing written");

    let one = dir.join("one.jsonl");
    std::fs::write(&one, run_line("shared", 1, 10.0, true, 1)).unwrap();
    let o = report(&[&one, Path::new("--out"), &out]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("report: 1 run, 1 configuration summarised, none excluded"),
        "{stderr}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("(1 run, 1 configuration: 1 summarised, 0 excluded)"),
        "{md}"
    );
}
