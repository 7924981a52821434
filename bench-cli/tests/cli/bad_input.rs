//! Bad input to the built binary, everywhere it can come from: every flag
//! that `--help` lists, out of range, non-numeric, NaN, infinite, negative,
//! empty, missing its value, not UTF-8; unknown flags; flags combined
//! wrongly; and too few file descriptors for the clients asked for.
//!
//! flags.rs checks the parser value by value in-process and exit_codes.rs a few
//! exit codes; this file sweeps the binary itself, driven by its own
//! `--help`, so a flag added later is covered without editing the test.
//! Every rejection must be exit 2 with exactly one JSON line on stdout,
//! `"ok": false` and an `"error"` naming the flag, and nothing panicked.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{keel_bench, BIN};

/// Asserts a rejection naming `flag`; returns the error text.
#[track_caller]
fn rejected<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S], flag: &str) -> String {
    let out = keel_bench(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "{args:?}: {stdout:?}");
    let v: Value = serde_json::from_str(stdout.trim_end()).expect("one JSON line");
    assert_eq!(v["ok"], false, "{args:?}: {v}");
    let error = v["error"].as_str().expect("an error string").to_string();
    assert!(
        error.contains(flag),
        "{args:?}: error does not name {flag}: {error}"
    );
    error
}

/// A flag as `--help` describes it.
#[derive(Debug)]
struct HelpFlag {
    name: String,
    takes_value: bool,
    /// "run", "serve", "report" (the first scope that accepts it).
    scope: String,
    accepted: String,
}

/// Reads the flags from the binary's own `--help`.
fn help_flags() -> Vec<HelpFlag> {
    let out = keel_bench(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let section = text
        .split("FLAGS:\n")
        .nth(1)
        .and_then(|s| s.split("\nCROSS-CHECKS:").next())
        .expect("a FLAGS section");
    let mut flags: Vec<HelpFlag> = Vec::new();
    for line in section.lines() {
        if let Some(head) = line.strip_prefix("  --") {
            let mut parts = head.split_whitespace();
            let name = parts.next().unwrap().to_string();
            let rest: Vec<&str> = parts.collect();
            let takes_value = rest.first().is_some_and(|t| !t.starts_with('['));
            let scope = match rest.iter().find(|t| t.starts_with('[')) {
                Some(s) => s
                    .trim_matches(|c| c == '[' || c == ']' || c == ',')
                    .to_string(),
                None => "run".to_string(), // --help: every subcommand
            };
            flags.push(HelpFlag {
                name,
                takes_value,
                scope,
                accepted: String::new(),
            });
        } else if let Some(acc) = line.trim_start().strip_prefix("accepted: ") {
            flags.last_mut().unwrap().accepted = acc.to_string();
        }
    }
    assert!(flags.len() >= 15, "{flags:?}");
    flags
}

/// Arguments that make a valid command of `scope` without `flag`: a
/// serve that would end by itself, a report of a missing file.
fn base(scope: &str, flag: &str) -> Vec<String> {
    let mut args = Vec::new();
    match scope {
        "serve" => {
            args.push("serve".to_string());
            if flag != "seconds" {
                args.extend(["--seconds".into(), "1".into()]);
            }
            if flag != "bind" {
                args.extend(["--bind".into(), "127.0.0.1:0".into()]);
            }
        }
        "report" => args.extend(["report".into(), "/nonexistent/keel.jsonl".into()]),
        "relay" => {
            args.push("relay".to_string());
            for (f, v) in [
                ("seconds", "0.1"),
                ("bind", "127.0.0.1:0"),
                ("upstream", "127.0.0.1:9"),
            ] {
                if flag != f {
                    args.extend([format!("--{f}"), v.to_string()]);
                }
            }
        }
        _ => {
            // A run that would be short if a bad value were ever accepted.
            for (f, v) in [("seconds", "0.1"), ("warmup", "0")] {
                if flag != f {
                    args.extend([format!("--{f}"), v.to_string()]);
                }
            }
        }
    }
    args
}

/// The `lo..=hi` range in an `accepted:` text, if there is one.
fn range(accepted: &str) -> Option<(u64, u64)> {
    let (lo, hi) = accepted.split_once("..=")?;
    let lo = lo
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let hi = hi
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((lo, hi))
}

#[test]
fn every_flag_in_help_rejects_bad_values_with_exit_2_naming_it() {
    let started = Instant::now();
    let mut checked = 0;
    for f in help_flags() {
        let flag = format!("--{}", f.name);
        if !f.takes_value {
            // Switches take no value.
            if f.name != "help" {
                let mut args = base(&f.scope, &f.name);
                args.push(format!("{flag}=yes"));
                rejected(&args, &flag);
                checked += 1;
            }
            continue;
        }
        let mut bad: Vec<String> = vec![String::new()];
        if !["out", "output", "histogram"].contains(&f.name.as_str()) {
            // Any path is a file or directory name; everything else has a
            // format.
            bad.extend(
                [
                    "abc",
                    "nan",
                    "NaN",
                    "inf",
                    "-inf",
                    "infinity",
                    "-1",
                    "-0.5",
                    "+1",
                    " 1",
                    "1 ",
                    "0x10",
                    "1e999",
                    "1_000",
                    "\u{0661}",
                    "--",
                    "99999999999999999999999",
                ]
                .map(String::from),
            );
        }
        if let Some((lo, hi)) = range(&f.accepted) {
            if lo > 0 {
                bad.push((lo - 1).to_string());
            }
            bad.push((hi + 1).to_string());
        }
        if f.accepted.contains("s <=") {
            // Durations: the measured phase must be positive; both are capped.
            if f.name == "seconds" {
                bad.push("0".into());
            }
            bad.extend(["3600.5", "1e4", "-0"].map(String::from));
        }
        for value in &bad {
            let mut args = base(&f.scope, &f.name);
            args.extend([flag.clone(), value.clone()]);
            rejected(&args, &flag);
            let mut args = base(&f.scope, &f.name);
            args.push(format!("{flag}={value}"));
            rejected(&args, &flag);
            checked += 2;
        }
        // Missing value: last on the line, or followed by another flag.
        let mut args = base(&f.scope, &f.name);
        args.push(flag.clone());
        let error = rejected(&args, &flag);
        assert!(error.contains("missing value"), "{error}");
        let mut args = base(&f.scope, &f.name);
        args.extend([flag.clone(), "--help".to_string()]);
        rejected(&args, &flag);
        // Not UTF-8.
        let mut args: Vec<OsString> = base(&f.scope, &f.name)
            .into_iter()
            .map(OsString::from)
            .collect();
        args.extend([OsString::from(&flag), OsString::from_vec(vec![b'1', 0xff])]);
        rejected(&args, &flag);
        // Given twice.
        let mut args = base(&f.scope, &f.name);
        args.extend([flag.clone(), "x".into(), flag.clone(), "y".into()]);
        rejected(&args, &flag);
        checked += 4;
    }
    assert!(checked > 300, "{checked}");
    // Rejections are immediate: nothing ran.
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn unknown_flags_and_stray_arguments_exit_2_naming_them() {
    for (args, flag) in [
        (&["--bogus"][..], "--bogus"),
        (&["--bogus", "1"], "--bogus"),
        (&["--client", "1"], "--client"),
        (&["--CLIENTS", "1"], "--CLIENTS"),
        (&["--clients-", "1"], "--clients-"),
        (&["-c", "1"], "-c"),
        (&["-"], "-"),
        (&["stray"], "stray"),
        (&[""], "empty argument"),
        (&["--seconds", "0.1", "stray"], "stray"),
        (
            &[
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--seconds",
                "1",
                "--bogus",
            ],
            "--bogus",
        ),
        (&["report", "a.jsonl", "--out", "o", "--bogus=1"], "--bogus"),
    ] {
        rejected(args, flag);
    }
}

#[test]
fn flags_combined_wrongly_exit_2_naming_them() {
    // Payload over the address family's maximum, in either order.
    let e = rejected(&["--payload", "65508"], "--payload");
    assert!(e.contains("65507") && e.contains("ipv4"), "{e}");
    rejected(
        &["--address-family", "ipv6", "--payload", "65528"],
        "--payload",
    );
    rejected(
        &["--payload", "65528", "--address-family", "ipv6"],
        "--payload",
    );
    rejected(
        &["--connect", "[::1]:7000", "--payload", "65528"],
        "--payload",
    );
    rejected(
        &["--connect", "127.0.0.1:7000", "--payload", "65508"],
        "--payload",
    );
    // clients x window x payload over 256 MiB: the error names all three.
    for args in [
        &["--clients", "1024", "--window", "257", "--payload", "1024"][..],
        &["--clients", "64", "--window", "1024", "--payload", "65507"],
        &["--window", "1024", "--payload", "65507", "--clients", "5"],
    ] {
        let e = rejected(args, "--clients");
        assert!(e.contains("--window") && e.contains("--payload"), "{e}");
        assert!(e.contains("268435456"), "{e}");
    }
    // Connect and serve together, either way round.
    rejected(
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--connect",
            "127.0.0.1:7000",
        ],
        "--connect",
    );
    rejected(&["serve", "--connect", "127.0.0.1:7000"], "--connect");
    rejected(
        &["--connect", "127.0.0.1:7000", "--bind", "127.0.0.1:0"],
        "--bind",
    );
    rejected(&["--connect", "127.0.0.1:7000", "--sockperf"], "--sockperf");
    // Server flags with --connect, a family against the address.
    for flag in ["--work", "--server-lanes", "--udp-server-receive-buffer"] {
        rejected(&["--connect", "127.0.0.1:7000", flag, "1"], flag);
    }
    rejected(
        &["--connect", "127.0.0.1:7000", "--address-family", "ipv6"],
        "--address-family",
    );
    // Run flags given to serve, serve flags given to report.
    rejected(
        &["serve", "--bind", "127.0.0.1:0", "--clients", "2"],
        "--clients",
    );
    rejected(
        &["report", "a.jsonl", "--out", "o", "--work", "1"],
        "--work",
    );
    // Required values missing.
    rejected(&["serve", "--seconds", "1"], "--bind");
    rejected(&["report", "--out", "o"], "FILES");
    rejected(&["report", "a.jsonl"], "--out");
}

/// Runs `keel-bench ARGS` under `ulimit -n LIMIT` (bash in a child, so the
/// test process keeps its own limit).
fn under_fd_limit(limit: u32, args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
        .arg(BIN)
        .args(args)
        .output()
        .expect("run bash");
    (out, started.elapsed())
}

#[test]
fn more_clients_than_descriptors_is_a_clear_error_not_a_panic() {
    for (limit, args, names) in [
        // Runtime and server fit; client 50-something does not.
        (
            64,
            &["--clients", "200", "--seconds", "0.2", "--warmup", "0"][..],
            &["--clients"][..],
        ),
        (
            64,
            &[
                "--clients",
                "200",
                "--io-model",
                "sharded",
                "--io-threads",
                "4",
                "--seconds",
                "0.2",
                "--warmup",
                "0",
            ],
            &["--clients"],
        ),
        // Not even the runtime fits: 8 reactors need 16 descriptors.
        (
            8,
            &[
                "--clients",
                "4",
                "--io-model",
                "sharded",
                "--io-threads",
                "8",
                "--seconds",
                "0.2",
            ],
            &["starting the runtime"],
        ),
    ] {
        let (out, took) = under_fd_limit(limit, args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(stdout.lines().count(), 1, "{stdout:?}");
        let v: Value = serde_json::from_str(stdout.trim_end()).unwrap();
        assert_eq!(v["ok"], false);
        let error = v["error"].as_str().unwrap();
        assert!(names.iter().any(|n| error.contains(n)), "{error}");
        assert!(
            error.contains("Too many open files") && error.contains("os error 24"),
            "the OS error is in the message: {error}"
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
    // serve: the same, and it never starts listening.
    let (out, _) = under_fd_limit(
        8,
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--io-model",
            "sharded",
            "--io-threads",
            "8",
            "--seconds",
            "5",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("listening"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("os error 24"), "{v}");
}
