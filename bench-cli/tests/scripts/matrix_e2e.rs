//! scripts/matrix.sh end to end: with a fake benchmark
//! (tests/fixtures/fake-keel-bench) for its validation, progress lines and
//! exit codes, and with the real keel-bench for a tiny matrix followed by
//! `keel-bench report`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{fake_bench, repo_root, s, scratch, stderr, BIN};

/// Runs scripts/matrix.sh with `args` and extra environment `env`.
fn matrix(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/matrix.sh")).args(args);
    cmd.env_remove("FAKE_BENCH_MODE")
        .env_remove("FAKE_BENCH_LOSS_WINDOW");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run scripts/matrix.sh")
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each output line is JSON"))
        .collect()
}

fn report(inputs: &[&Path], out: &Path) -> Output {
    Command::new(BIN)
        .arg("report")
        .args(inputs)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run keel-bench report")
}

#[test]
fn fake_matrix_annotates_each_run_with_repetitions_outermost() {
    let dir = scratch(module_path!(), "ok");
    let out = dir.join("res.jsonl");
    let bench = fake_bench();
    let o = matrix(
        &[
            "--bench",
            s(&bench),
            "--output",
            s(&out),
            "--payloads",
            "64,1024",
            "--clients=4",
            "--io-models",
            "shared,sharded",
            "--io-threads",
            "1, 2",
            "--seconds",
            "0.2",
            "--warmup",
            "0",
            "--repetitions",
            "2",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let runs = lines(&out);
    assert_eq!(runs.len(), 16);
    // One progress line per run, in order, with rate and p99.
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(progress.len(), 16, "{err}");
    for (i, line) in progress.iter().enumerate() {
        assert!(line.starts_with(&format!("[{}/16] ", i + 1)), "{line}");
        assert!(
            line.contains(" rt/s, p99 ") && line.ends_with(" us"),
            "{line}"
        );
    }
    // Repetitions outermost: all 8 configurations, then all 8 again.
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(run["repetition"], (i / 8 + 1) as u64, "line {i}");
        assert_eq!(run["matrix_errors"], serde_json::json!([]));
        assert_eq!(run["exit_status"], 0);
        assert_eq!(run["requested"]["payload_bytes"], run["payload_bytes"]);
        let cmd = run["command"].as_str().unwrap();
        assert!(
            cmd.contains("fake-keel-bench --protocol udp --payload"),
            "{cmd}"
        );
        assert!(cmd.contains("--seconds 0.2 --warmup 0"), "{cmd}");
    }
    let first: Vec<_> = runs[..8].iter().map(|r| r["command"].clone()).collect();
    let second: Vec<_> = runs[8..].iter().map(|r| r["command"].clone()).collect();
    assert_eq!(first, second);

    let o = report(&[&out], &dir.join("report"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = std::fs::read_to_string(dir.join("report/report.md")).unwrap();
    assert_eq!(md.matches("\n| udp/ipv4 |").count(), 8, "{md}");
}

#[test]
fn fake_loss_fails_runs_keep_going_finishes_the_matrix() {
    let dir = scratch(module_path!(), "loss");
    let out = dir.join("res.jsonl");
    let bench = fake_bench();
    let args = |out: &Path, keep_going: bool| {
        let mut a = vec![
            "--bench".to_string(),
            s(&bench).to_string(),
            "--output".to_string(),
            s(out).to_string(),
            "--windows".to_string(),
            "1,16".to_string(),
            "--seconds".to_string(),
            "0.2".to_string(),
            "--repetitions".to_string(),
            "2".to_string(),
        ];
        if keep_going {
            a.push("--keep-going".to_string());
        }
        a
    };
    let env = [("FAKE_BENCH_LOSS_WINDOW", "16")];

    let a = args(&out, true);
    let o = matrix(&a.iter().map(String::as_str).collect::<Vec<_>>(), &env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(lines(&out).len(), 4, "the whole matrix ran");
    assert!(
        err.contains("[2/4] rep 1 payload=1024 clients=16 window=16 io=shared/1 lanes=1 work=0 -> FAILED: udp_lost_messages = 48"),
        "{err}"
    );
    assert!(err.contains("2 of 4 runs failed"), "{err}");

    let o = report(&[&out], &dir.join("report"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = std::fs::read_to_string(dir.join("report/report.md")).unwrap();
    assert!(md.contains("2 of 2 runs failed"), "{md}");
    assert!(md.contains("| 1024 | 48 (max 48, 2 runs) |") || md.contains("48 (max 48, 2 runs)"));
    let loss = std::fs::read_to_string(dir.join("report/loss.svg")).unwrap();
    assert!(loss.contains("48 lost/run"), "{loss}");

    // Without --keep-going it stops at the first failure.
    let out2 = dir.join("stop.jsonl");
    let a = args(&out2, false);
    let o = matrix(&a.iter().map(String::as_str).collect::<Vec<_>>(), &env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(lines(&out2).len(), 2, "stopped after run 2");
    assert!(
        err.contains("stopped at the first failed run (2 of 4)"),
        "{err}"
    );
}

#[test]
fn fake_bad_outputs_are_caught_by_validation() {
    let dir = scratch(module_path!(), "bad");
    let bench = fake_bench();
    for (mode, needle) in [
        ("mismatch", "payload_bytes: requested 1024, got 1025"),
        ("garbage", "stdout is not JSON"),
        ("liar", "exit status 1 although ok is true"),
    ] {
        let out = dir.join(format!("{mode}.jsonl"));
        let o = matrix(
            &[
                "--bench",
                s(&bench),
                "--output",
                s(&out),
                "--repetitions",
                "1",
                "--keep-going",
            ],
            &[("FAKE_BENCH_MODE", mode)],
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {err}");
        assert!(
            err.contains("[1/1]") && err.contains("FAILED") && err.contains(needle),
            "{mode}: {err}"
        );
        let runs = lines(&out);
        assert_eq!(runs.len(), 1, "{mode}: a failed run still gets its line");
        let errors = runs[0]["matrix_errors"].to_string();
        assert!(errors.contains(needle), "{mode}: {errors}");
        assert_eq!(runs[0]["repetition"], 1);
        // The report groups it under the requested configuration and excludes it.
        let o = report(&[&out], &dir.join(format!("report-{mode}")));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let md = std::fs::read_to_string(dir.join(format!("report-{mode}/report.md"))).unwrap();
        assert!(md.contains("1 of 1 runs failed"), "{mode}: {md}");
        assert!(md.contains(needle), "{mode}: {md}");
        if mode == "garbage" {
            assert_eq!(runs[0]["exit_status"], 139);
            assert!(runs[0]["stderr_tail"]
                .as_str()
                .unwrap()
                .contains("crashed on purpose"));
            assert!(md.contains("payload 1024 B, 16 clients, window 1"), "{md}");
        }
    }
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    let dir = scratch(module_path!(), "usage");
    let bench = fake_bench();
    let out = dir.join("r.jsonl");
    std::fs::write(dir.join("full.jsonl"), "{}\n").unwrap();
    let full = dir.join("full.jsonl");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--bogus"], "unknown option --bogus"),
        (vec!["--payloads"], "--payloads: missing value"),
        (
            vec!["--bench", s(&bench), "--payloads", "1k"],
            "--payloads: bad item \"1k\"",
        ),
        (
            vec!["--bench", s(&bench), "--io-models", ","],
            "--io-models: empty list",
        ),
        (
            vec!["--bench", s(&bench), "--seconds", "-1"],
            "--seconds: expected a decimal",
        ),
        (
            vec!["--bench", s(&bench), "--repetitions", "0"],
            "--repetitions: expected an integer >= 1",
        ),
        // Ranges too, before the first run (not at the run that uses it).
        (
            vec!["--bench", s(&bench), "--io-threads", "0"],
            "--io-threads: 0 is out of range; accepted: integers 1..64",
        ),
        (
            vec!["--bench", s(&bench), "--io-threads", "1,2,65"],
            "--io-threads: 65 is out of range",
        ),
        (
            vec!["--bench", s(&bench), "--io-models", "shared,owned"],
            "--io-models: unknown IO model \"owned\"; accepted: shared, sharded",
        ),
        (
            vec!["--bench", s(&bench), "--payloads", "1024,65508"],
            "--payloads: 65508 is out of range; accepted: integers 16..65507",
        ),
        (
            vec!["--bench", s(&bench), "--payloads", "8"],
            "--payloads: 8 is out of range",
        ),
        (
            vec!["--bench", s(&bench), "--clients", "0"],
            "--clients: 0 is out of range; accepted: integers 1..1024",
        ),
        (
            vec!["--bench", s(&bench), "--windows", "1025"],
            "--windows: 1025 is out of range",
        ),
        (
            vec!["--bench", s(&bench), "--server-lanes", "0"],
            "--server-lanes: 0 is out of range",
        ),
        (
            vec!["--bench", s(&bench), "--work-values", "99999999999"],
            "--work-values: 99999999999 is out of range",
        ),
        (
            vec!["--bench", s(&bench), "--seconds", "0"],
            "--seconds: expected a decimal number of seconds, 0 < s <= 3600",
        ),
        (
            vec!["--bench", s(&bench), "--warmup", "3601"],
            "--warmup: expected a decimal number of seconds, 0 <= s <= 3600",
        ),
        (vec!["--keep-going=yes"], "--keep-going takes no value"),
        (
            vec!["--bench", "/nonexistent/keel-bench"],
            "not an executable file",
        ),
        (
            vec!["--bench", s(&bench), "--output", s(&full)],
            "exists and is not empty",
        ),
    ];
    for (args, needle) in cases {
        let mut args = args;
        if !args.contains(&"--output") {
            args.extend(["--output", s(&out)]);
        }
        let o = matrix(&args, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(!out.exists() || std::fs::read_to_string(&out).unwrap().is_empty());
    let o = matrix(&["--help"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--keep-going"));
}

/// The real benchmark: a tiny matrix of 0.2 s runs, then the report.
/// Every run of the matrix must pass.
#[test]
fn real_tiny_matrix_then_report() {
    let dir = scratch(module_path!(), "real");
    let out = dir.join("res.jsonl");
    let bench = PathBuf::from(BIN);
    let o = matrix(
        &[
            "--bench",
            s(&bench),
            "--output",
            s(&out),
            "--payloads",
            "1024",
            "--clients",
            "2",
            "--windows",
            "1",
            "--io-models",
            "shared,sharded",
            "--io-threads",
            "1,2",
            "--seconds",
            "0.2",
            "--warmup",
            "0.05",
            "--repetitions",
            "2",
        ],
        &[],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let runs = lines(&out);
    assert_eq!(runs.len(), 8);
    assert!(runs
        .iter()
        .all(|r| r["ok"] == true && r["backend"] == "keel"));

    let dest = dir.join("report");
    let o = report(&[&out], &dest);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = std::fs::read_to_string(dest.join("report.md")).unwrap();
    assert_eq!(
        md.matches("\n| udp/ipv4 | 1024 | 2 | 1 |").count(),
        4,
        "{md}"
    );
    assert!(!md.contains("## Excluded"), "{md}");
    let mut charts = 0;
    for chart in ["throughput.svg", "p99.svg", "loss.svg"] {
        let svg = std::fs::read_to_string(dest.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{chart}"
        );
        charts += 1;
    }
    assert!(charts >= 2);
    let t = std::fs::read_to_string(dest.join("throughput.svg")).unwrap();
    // Grouped by IO model, with each group's caption.
    assert!(
        t.contains("threads, 1 context") && t.contains("contexts, 1 thread each"),
        "{t}"
    );
}

/// A rerun of the same command: refused without --overwrite (a long
/// matrix is not lost to a repeated command), replaced with it.
#[test]
fn an_existing_output_is_kept_unless_overwrite_is_given() {
    let dir = scratch(module_path!(), "overwrite");
    let out = dir.join("runs.jsonl");
    let bench = fake_bench();
    let args = [
        "--bench",
        s(&bench),
        "--output",
        s(&out),
        "--repetitions",
        "1",
        "--seconds",
        "0.1",
    ];
    let o = matrix(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let first = std::fs::read_to_string(&out).unwrap();

    let o = matrix(&args, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("exists and is not empty") && err.contains("pass --overwrite to replace it"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), first, "untouched");

    let again = [&args[..], &["--overwrite"]].concat();
    let o = matrix(&again, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(lines(&out).len(), 1, "replaced, not appended");
}

/// A limits probe's expected failures are said to be expected, and only
/// a surprise is FAILED.
#[test]
fn expect_limits_reports_lost_echoes_as_expected_not_failed() {
    let dir = scratch(module_path!(), "expect");
    let out = dir.join("runs.jsonl");
    let bench = fake_bench();
    let o = matrix(
        &[
            "--bench",
            s(&bench),
            "--output",
            s(&out),
            "--windows",
            "1,16",
            "--repetitions",
            "1",
            "--seconds",
            "0.1",
            "--keep-going",
            "--expect-limits",
        ],
        &[("FAKE_BENCH_LOSS_WINDOW", "16")],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("window=16 io=shared/1 lanes=1 work=0 -> lost as expected: 48 echoes"),
        "{err}"
    );
    assert!(!err.contains("FAILED"), "{err}");
    assert!(
        err.contains("all 2 runs as expected: 1 valid, 1 lost echoes"),
        "{err}"
    );
    // The data is unchanged: the lossy run's line still says ok: false.
    let runs = lines(&out);
    assert_eq!(runs[1]["ok"], false);
    assert_eq!(runs[1]["matrix_errors"], serde_json::json!([]));

    // A surprise is still FAILED, and fails the matrix.
    let out2 = dir.join("garbage.jsonl");
    let o = matrix(
        &[
            "--bench",
            s(&bench),
            "--output",
            s(&out2),
            "--repetitions",
            "1",
            "--expect-limits",
        ],
        &[("FAKE_BENCH_MODE", "garbage")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("-> FAILED: "), "{}", stderr(&o));
}
