//! What the integration tests share (`mod common;` in each): running the
//! built keel-bench, reading its JSON line and its fields, the repository's
//! paths, and scratch directories. Each test file uses only some of them,
//! so unused ones are not warned about here.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The built keel-bench.
pub const BIN: &str = env!("CARGO_BIN_EXE_keel-bench");

/// Runs keel-bench with `args` to its exit.
pub fn keel_bench<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run keel-bench")
}

/// Exactly one line on stdout, holding one JSON object.
pub fn json_line(out: &Output) -> Value {
    let stdout = String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout");
    assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
    serde_json::from_str(stdout.trim_end()).expect("JSON line")
}

/// Runs keel-bench with `--format json` and `args`; returns the exit code
/// (-1 without one) and the JSON line.
pub fn run(args: &[&str]) -> (i32, Value) {
    run_with(&[], args)
}

/// [`run`] with `lead` (`--protocol rudp`, ...) before `--format json`.
pub fn run_with(lead: &[&str], args: &[&str]) -> (i32, Value) {
    let out = Command::new(BIN)
        .args(lead)
        .args(["--format", "json"])
        .args(args)
        .output()
        .expect("keel-bench runs");
    let line = String::from_utf8(out.stdout).expect("utf-8");
    let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"));
    (out.status.code().unwrap_or(-1), v)
}

/// Field `k` of the line `v`, a count.
pub fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} not a count: {v}"))
}

/// Field `k` of the line `v`, a number.
pub fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} not a number: {v}"))
}

/// The repository's root (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// tests/fixtures/fake-keel-bench, a stand-in for the benchmark in the
/// scripts' tests.
pub fn fake_bench() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-keel-bench")
}

/// A fresh, empty directory for one test under cargo's per-target tmpdir,
/// named after the caller's module (its `module_path!()`, which names the
/// test binary and the module in it) and `name`: `scripts-matrix_e2e-NAME`.
/// Tests of one binary run at once, so two modules' `NAME`s may be alike.
pub fn scratch(module: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{}-{name}", module.replace("::", "-")));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `p` as an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
