//! Errors reach a person in words on stderr, whatever stdout is (issue 24
//! defect 4), while scripts keep one JSON line on stdout: the small error
//! record for a rejected command line (not a run record of nulls), the
//! serve summary's shape for a `serve` that could not start, and the full
//! record of a run that failed. `--output FILE` puts the JSON line in FILE.

mod common;

use std::process::Output;

use serde_json::Value;

use common::keel_bench;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The keys of the one JSON line on stdout, sorted (their order is
/// record_fields.rs's business), and the line.
fn keys_and_line(out: &Output) -> (Vec<String>, Value) {
    let v = common::json_line(out);
    let keys = v.as_object().unwrap().keys().cloned().collect();
    (keys, v)
}

const ERROR_RECORD: [&str; 5] = ["schema_version", "backend", "keel_version", "ok", "error"];

#[test]
fn a_usage_error_is_words_and_usage_on_stderr_and_a_small_record_on_stdout() {
    for (args, flag, usage) in [
        (
            &["--payload", "70000"][..],
            "--payload: expected an integer in 16..=65507",
            "usage: keel-bench [RUN FLAGS]",
        ),
        (
            &["report"][..],
            "FILES: report needs at least one result file",
            "usage: keel-bench report FILES... --out DIR",
        ),
        (
            &["serve", "--seconds", "1"][..],
            "--bind: required by serve",
            "usage: keel-bench serve --bind ADDR:PORT",
        ),
    ] {
        let out = keel_bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&format!("keel-bench: {flag}")),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(usage), "{args:?}: {stderr}");
        assert!(stderr.contains("--help` lists every flag"), "{stderr}");
        let (keys, v) = keys_and_line(&out);
        let mut want = ERROR_RECORD.to_vec();
        want.sort_unstable();
        assert_eq!(keys, want, "{args:?}: {v}");
        assert_eq!(v["ok"], false);
        assert!(v["error"].as_str().unwrap().starts_with(flag), "{v}");
    }
}

#[test]
fn a_failed_run_says_why_on_stderr_when_stdout_is_not_a_terminal() {
    let out = keel_bench(&[
        "--connect",
        "127.0.0.1:9",
        "--seconds",
        "0.1",
        "--warmup",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("keel-bench: FAILED: disconnect_errors = ")
            && stderr.contains("connection refused by 127.0.0.1:9"),
        "{stderr}"
    );
    // The full record is still on stdout.
    let (_, v) = keys_and_line(&out);
    assert_eq!(v["role"], "client");
    assert_eq!(v["requested_seconds"], 0.1);
}

#[test]
fn a_serve_that_cannot_bind_prints_the_serve_summarys_shape() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = keel_bench(&["serve", "--bind", &addr, "--seconds", "1"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("FAILED") && stderr.contains("in use"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
    let (keys, v) = keys_and_line(&out);
    assert_eq!(v["role"], "serve", "{v}");
    assert_eq!(v["bind"], addr.as_str());
    assert_eq!(v["ended_by"], "error");
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().unwrap().contains(&addr), "{v}");
    assert!(keys.iter().any(|k| k == "datagrams_in") && !keys.iter().any(|k| k == "messages"));
    // The same keys as a serve that ran.
    let ran = keel_bench(&["serve", "--bind", "127.0.0.1:0", "--seconds", "0.1"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(keys_and_line(&ran).0, keys);
}

#[test]
fn output_writes_the_json_line_to_a_file() {
    let dir = common::scratch(module_path!(), "errors-output");
    let file = dir.join("run.json");
    let out = keel_bench(&[
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--output",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "the line went to the file");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written.lines().count(), 1, "{written}");
    let v: Value = serde_json::from_str(written.trim_end()).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    // A path that cannot be created fails before the run, naming it.
    let bad = dir.join("no/such/dir/run.json");
    let out = keel_bench(&["--output", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--output: cannot create"),
        "{}",
        text(&out.stderr)
    );
}
