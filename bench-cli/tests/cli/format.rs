//! `--format json|human|both` and the default: the human summary a person
//! reads (configuration, throughput, p50/p99/p99.9 RTT, CPU, losses,
//! errors, ok or why not), where it goes, and that scripts see nothing new
//! when they do not ask for it.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{keel_bench, BIN};

/// A short passing run.
const RUN: &[&str] = &["--seconds", "0.2", "--warmup", "0.05", "--clients", "2"];

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// The summary's lines are there, with the run's own figures.
#[track_caller]
fn assert_summary(summary: &str, json: &Value) {
    for label in [
        "keel-bench: udp/ipv4, payload 1024 B, 2 clients, window 1",
        "throughput",
        "round trips/s",
        "RTT         p50 ",
        ", p99 ",
        ", p99.9 ",
        "CPU",
        "losses      none: 0 of ",
        "errors      none",
        "result      ok",
    ] {
        assert!(summary.contains(label), "{label:?} missing in\n{summary}");
    }
    let samples = json["rtt_samples"].as_u64().unwrap();
    assert!(samples > 0);
    // The sample count, with thousands separators, is the JSON's.
    let mut grouped = String::new();
    let digits = samples.to_string();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    assert!(
        summary.contains(&format!("{grouped} samples")),
        "{grouped} samples missing in\n{summary}"
    );
}

#[test]
fn human_prints_the_summary_instead_of_the_json_line() {
    let mut args = RUN.to_vec();
    args.extend(["--format", "human"]);
    let out = keel_bench(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains('{'), "no JSON on stdout: {stdout}");
    assert!(stdout.lines().count() <= 8, "a few lines: {stdout}");
    for label in [
        "round trips/s",
        "p50 ",
        "p99 ",
        "p99.9 ",
        "CPU",
        "result      ok",
    ] {
        assert!(stdout.contains(label), "{label:?} missing in\n{stdout}");
    }
    assert_eq!(text(&out.stderr), "", "nothing else");
}

#[test]
fn both_keeps_the_json_line_on_stdout_and_puts_the_summary_on_stderr() {
    let mut args = RUN.to_vec();
    args.extend(["--format", "both"]);
    let out = keel_bench(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let json: Value = serde_json::from_str(stdout.trim_end()).expect("one JSON line");
    assert_eq!(json["ok"], true);
    assert_summary(&text(&out.stderr), &json);
}

#[test]
fn without_format_and_without_a_terminal_scripts_see_only_the_json_line() {
    for args in [RUN.to_vec(), [RUN, &["--format", "json"]].concat()] {
        let out = keel_bench(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        let json: Value = serde_json::from_str(stdout.trim_end()).expect("one JSON line");
        assert_eq!(json["ok"], true);
        // --format is how the result is shown, not part of it.
        assert!(json.get("format").is_none());
        assert_eq!(text(&out.stderr), "", "{args:?}: no summary on stderr");
    }
}

/// With stdout a terminal (here the pseudo-terminal of util-linux's
/// `script`) and no `--format`, the summary goes to stderr.
#[test]
fn without_format_a_terminal_gets_the_summary_on_stderr() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux `script` (a pseudo-terminal for stdout) is not installed");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("format-tty");
    std::fs::create_dir_all(&dir).unwrap();
    let err = dir.join("stderr.txt");
    let _ = std::fs::remove_file(&err);
    let inner = format!("{BIN} {} 2>{}", RUN.join(" "), err.display());
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .output()
        .expect("run script");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // stdout (through the terminal) still has the JSON line.
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {stdout:?}"));
    let json: Value = serde_json::from_str(line.trim()).expect("the JSON line");
    assert_summary(&std::fs::read_to_string(&err).unwrap(), &json);
}

#[test]
fn a_failed_run_says_why_in_its_summary() {
    // Nothing listens on the discard port: the peer refuses.
    let out = keel_bench(&[
        "--connect",
        "127.0.0.1:9",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--format",
        "human",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("errors      disconnect_errors = "),
        "{stdout}"
    );
    assert!(
        stdout.contains("result      FAILED: disconnect_errors = ")
            && stdout.contains("connection refused by 127.0.0.1:9"),
        "{stdout}"
    );
}

#[test]
fn bad_arguments_in_human_format_are_words_and_still_exit_2() {
    // Errors are words on stderr (issue 24); human asks for no JSON line.
    let out = keel_bench(&["--format", "human", "--clients", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--clients: expected an integer in 1..=1024, got \"0\""),
        "{stderr}"
    );
    assert!(stderr.contains("--help"), "{stderr}");

    // A bad --format is itself reported as the JSON line (the format is
    // unknown), naming what it accepts.
    let out = keel_bench(&["--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let json: Value = serde_json::from_str(text(&out.stdout).trim_end()).unwrap();
    let error = json["error"].as_str().unwrap();
    assert!(
        error.starts_with("--format: expected json, human or both, got \"yaml\""),
        "{error}"
    );
    // report has no summary to format.
    let out = keel_bench(&["report", "a.jsonl", "--out", "o", "--format", "human"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serve_summary_in_human_format() {
    let out = keel_bench(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--seconds",
        "0.2",
        "--format",
        "human",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains('{'), "{stdout}");
    for label in [
        "keel-bench serve: 127.0.0.1:",
        "ended by --seconds after 0.2 s",
        "traffic     0 datagrams in, 0 out",
        "sessions    0 opened",
        "drops       0 kernel receive-buffer drops",
        "result      ok",
    ] {
        assert!(stdout.contains(label), "{label:?} missing in\n{stdout}");
    }
    // The "listening on" line stays on stderr, as scripts wait for it.
    assert!(text(&out.stderr).contains("listening on 127.0.0.1:"));
}

#[test]
fn help_documents_format() {
    let help = text(&keel_bench(&["--help"]).stdout);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("--format FORMAT [run, serve]"), "{help}");
    assert!(help.contains("accepted: json, human, both"), "{help}");
    assert!(
        help.contains("summary on stderr when stdout is a terminal"),
        "{help}"
    );
}
