//! The conventions of well-liked command lines (issue 24): `--version`
//! and `-V`; `-h` short and `--help` long, per subcommand; help lines
//! within 100 columns; shell completions; `compare`; `--histogram`.

mod common;

use std::process::Command;

use common::{keel_bench, scratch};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn version_and_help_per_subcommand() {
    for flag in ["--version", "-V"] {
        let out = keel_bench(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            text(&out.stdout),
            format!("keel-bench {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
    let long = text(&keel_bench(&["--help"]).stdout);
    let short = text(&keel_bench(&["-h"]).stdout);
    assert!(
        short.lines().count() * 3 < long.lines().count(),
        "-h is short"
    );
    assert!(short.contains("--payload BYTES") && short.contains("keel-bench --help: every flag"));
    for (sub, has, lacks) in [
        ("serve", "--bind ADDR:PORT", "--window"),
        ("relay", "--upstream ADDR:PORT", "--payload"),
        ("report", "--out DIR", "--bind"),
        ("compare", "BASELINE.jsonl CANDIDATE.jsonl", "--bind"),
        ("completions", "bash|zsh|fish", "--payload"),
    ] {
        for flag in ["--help", "-h"] {
            let out = keel_bench(&[sub, flag]);
            assert_eq!(out.status.code(), Some(0), "{sub} {flag}");
            let help = text(&out.stdout);
            assert!(
                help.contains(has) && !help.contains(lacks),
                "{sub} {flag}:\n{help}"
            );
        }
    }
    for args in [
        &["--help"][..],
        &["-h"],
        &["serve", "--help"],
        &["report", "--help"],
        &["relay", "--help"],
    ] {
        for line in text(&keel_bench(args).stdout).lines() {
            assert!(line.chars().count() <= 100, "{args:?}: {line}");
        }
    }
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let out = keel_bench(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(
            script.contains("keel-bench") && script.contains("histogram"),
            "{shell}"
        );
    }
    // bash can parse its script.
    let dir = scratch(module_path!(), "completions");
    let path = dir.join("keel-bench.bash");
    std::fs::write(&path, keel_bench(&["completions", "bash"]).stdout).unwrap();
    if let Ok(status) = Command::new("bash").arg("-n").arg(&path).status() {
        assert!(status.success(), "bash -n {}", path.display());
    }
    let out = keel_bench(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("SHELL: expected bash, zsh or fish, got \"tcsh\""));
}

#[test]
fn compare_two_files_and_write_a_histogram() {
    let dir = scratch(module_path!(), "compare");
    let (a, b, h) = (
        dir.join("a.jsonl"),
        dir.join("b.jsonl"),
        dir.join("rtt.hgrm"),
    );
    let run = |out: &std::path::Path, hist: Option<&std::path::Path>| {
        let mut args = vec![
            "--seconds",
            "0.1",
            "--warmup",
            "0",
            "--output",
            out.to_str().unwrap(),
        ];
        if let Some(h) = hist {
            args.extend(["--histogram", h.to_str().unwrap()]);
        }
        let o = keel_bench(&args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    };
    run(&a, Some(&h));
    run(&b, None);
    let hgrm = std::fs::read_to_string(&h).unwrap();
    assert!(
        hgrm.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"),
        "{hgrm}"
    );
    assert!(hgrm.contains("#[Max     = "), "{hgrm}");
    // The record has the minimum and standard deviation, at its end.
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    assert!(v["rtt_min_us"].as_f64().unwrap() <= v["rtt_p50_us"].as_f64().unwrap());
    assert!(v["rtt_stddev_us"].as_f64().unwrap() >= 0.0);

    let out = keel_bench(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cmp = text(&out.stdout);
    assert!(
        cmp.contains("round trips/s  baseline ")
            && (cmp.contains("x the baseline") || cmp.contains("the same")),
        "{cmp}"
    );
    let out = keel_bench(&["compare", a.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn more_io_threads_than_cores_warns_on_stderr() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores >= 64 {
        eprintln!("skipped: {cores} cores, --io-threads cannot exceed them");
        return;
    }
    let threads = (cores + 1).to_string();
    let out = keel_bench(&[
        "--io-threads",
        &threads,
        "--seconds",
        "0.1",
        "--warmup",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: --io-threads {threads} is more than this machine's {cores} cores"
        )),
        "{stderr}"
    );
    let out = keel_bench(&["--io-threads", "1", "--seconds", "0.1", "--warmup", "0"]);
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
}
