//! scripts/rudp-matrix.sh and scripts/rudp-scale.sh with a fake benchmark
//! (tests/fixtures/fake-rudp-bench, whose `report` is the real keel-bench):
//! `--help`, arguments and settings checked before any run or file,
//! earlier results kept without `--overwrite`, out/ as the default, and
//! the scale runs filed as scale runs whatever their connection count.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{repo_root, scratch, stderr, stdout, BIN};

const MATRIX: &str = "rudp-matrix.sh";
const SCALE: &str = "rudp-scale.sh";
const TAIL: &str = "rudp-tail.sh";
const PEERS: &str = "rudp-peers.sh";

fn fake() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-rudp-bench")
}

/// Runs scripts/`script` in `cwd` with `args`, the fake benchmark (logging
/// to cwd/bench.log) and `env` on top of a small default configuration.
fn script(script: &str, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts").join(script))
        .args(args)
        .current_dir(cwd)
        .env("KEEL_BENCH", fake())
        .env("FAKE_REAL_BENCH", BIN)
        .env("FAKE_BENCH_LOG", cwd.join("bench.log"));
    for k in [
        "CASES",
        "LOSSES",
        "SEEDS",
        "CLIENTS",
        "SECONDS_PER_RUN",
        "BULK_SECONDS",
        "JITTER",
        "KCP_WINDOW",
        "BULK_PROTOCOLS",
        "CONNS",
        "RATES",
        "PROTOCOLS",
        "REPS",
        "PAYLOAD",
        "WARMUP",
        "CLIENT_SOCKETS",
        "PLACEMENT",
        "RELAY_CPU",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the script")
}

/// The benchmark invocations the fake logged.
fn bench_calls(cwd: &Path) -> Vec<String> {
    std::fs::read_to_string(cwd.join("bench.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn help_prints_usage_and_touches_nothing() {
    for name in [MATRIX, SCALE] {
        for flag in ["--help", "-h"] {
            let dir = scratch(module_path!(), &format!("help-{name}{flag}"));
            let o = script(name, &dir, &[flag], &[]);
            assert_eq!(o.status.code(), Some(0), "{name} {flag}: {}", stderr(&o));
            let text = stdout(&o);
            assert!(
                text.starts_with(&format!("Usage: scripts/{name} [--out DIR] [--overwrite]")),
                "{text}"
            );
            assert!(text.contains("--overwrite") && text.contains("out/rudp-"));
            assert!(
                text.lines().all(|l| l.chars().count() <= 100),
                "{name}: a help line over 100 columns"
            );
            assert_eq!(
                entries(&dir),
                Vec::<String>::new(),
                "{name} {flag} made files"
            );
        }
    }
}

/// A script, its arguments, its environment, and what its error must say.
type BadCase = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn bad_arguments_and_settings_exit_2_before_any_run() {
    let cases: &[BadCase] = &[
        (MATRIX, &["--bogus"], &[], "unknown option --bogus"),
        (MATRIX, &["--out"], &[], "--out: missing value"),
        (MATRIX, &["a", "b"], &[], "one output directory only"),
        (
            MATRIX,
            &[],
            &[("CASES", "tick foo")],
            "CASES: unknown case \"foo\" (accepted: tick, bulk)",
        ),
        (
            MATRIX,
            &[],
            &[("LOSSES", "0 x")],
            "LOSSES: expected loss percentages",
        ),
        (MATRIX, &[], &[("LOSSES", "101")], "LOSSES"),
        (
            MATRIX,
            &[],
            &[("CLIENTS", "0")],
            "CLIENTS: expected an integer 1..10000, got \"0\"",
        ),
        (
            MATRIX,
            &[],
            &[("SECONDS_PER_RUN", "0")],
            "SECONDS_PER_RUN: expected seconds",
        ),
        (MATRIX, &[], &[("BULK_SECONDS", "1x")], "BULK_SECONDS"),
        (
            MATRIX,
            &[],
            &[("JITTER", "3")],
            "JITTER: expected a duration",
        ),
        (MATRIX, &[], &[("JITTER", "30ms")], "JITTER"),
        (MATRIX, &[], &[("KCP_WINDOW", "0")], "KCP_WINDOW"),
        (MATRIX, &[], &[("SEEDS", "1,-2")], "SEEDS"),
        (
            MATRIX,
            &[],
            &[("BULK_PROTOCOLS", "rudp tcp")],
            "BULK_PROTOCOLS: unknown protocol \"tcp\"",
        ),
        (
            MATRIX,
            &[],
            &[("KEEL_BENCH", "/nonexistent")],
            "KEEL_BENCH: /nonexistent is not an executable",
        ),
        (SCALE, &["--bogus"], &[], "unknown option --bogus"),
        (
            SCALE,
            &[],
            &[("CONNS", "10 0")],
            "CONNS: expected an integer 1..10000, got \"0\"",
        ),
        (SCALE, &[], &[("CONNS", "20000")], "CONNS"),
        (SCALE, &[], &[("RATES", "60Hz")], "RATES"),
        (
            SCALE,
            &[],
            &[("PROTOCOLS", "udp tcp")],
            "PROTOCOLS: unknown protocol \"tcp\" (accepted: udp, udp-df, rudp, rudp-tick, kcp)",
        ),
        (SCALE, &[], &[("REPS", "0")], "REPS"),
        (
            SCALE,
            &[],
            &[("PAYLOAD", "8")],
            "PAYLOAD: expected an integer 16..65507",
        ),
        (SCALE, &[], &[("SECONDS_PER_RUN", "-1")], "SECONDS_PER_RUN"),
        (SCALE, &[], &[("WARMUP", "x")], "WARMUP"),
        (
            SCALE,
            &[],
            &[("CLIENT_SOCKETS", "one")],
            "CLIENT_SOCKETS: expected per-client or shared, got \"one\"",
        ),
        (PEERS, &[], &[("RELAY_CPU", "99")], "RELAY_CPU"),
        (PEERS, &[], &[("RELAY_CPU", "x")], "RELAY_CPU"),
        (
            SCALE,
            &[],
            &[("PLACEMENT", "cores")],
            "PLACEMENT: expected free, server, split or one, got \"cores\"",
        ),
    ];
    for (i, (name, args, env, want)) in cases.iter().enumerate() {
        let dir = scratch(module_path!(), &format!("bad-{i}"));
        // An earlier matrix's results, which --overwrite would replace:
        // a bad setting must not get that far.
        let results = dir.join("res/results.jsonl");
        std::fs::create_dir_all(results.parent().unwrap()).unwrap();
        std::fs::write(&results, "{\"earlier\":true}\n").unwrap();
        let mut all = vec!["--overwrite", "--out", "res"];
        all.extend_from_slice(args);
        let o = script(name, &dir, &all, env);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name} {args:?} {env:?}: {err}");
        assert!(
            err.contains(want),
            "{name} {args:?} {env:?}: {err:?} lacks {want:?}"
        );
        assert!(err.starts_with(&format!("{name}: ")), "{err}");
        assert_eq!(
            std::fs::read_to_string(&results).unwrap(),
            "{\"earlier\":true}\n",
            "{name} {env:?} touched the earlier results"
        );
        assert_eq!(
            bench_calls(&dir),
            Vec::<String>::new(),
            "{name} {env:?} ran"
        );
    }
}

/// The `[--out DIR] [--overwrite] [OUT_DIR]` arguments, parsed by
/// scripts/lib.sh's `parse_out_args` for the four rudp scripts: each
/// mistake exits 2 with the same message, before any run or file.
#[test]
fn out_arguments_are_parsed_alike_by_every_rudp_script() {
    let cases: &[(&[&str], &str)] = &[
        (&["--bogus"], "unknown option --bogus (see --help)"),
        (&["-x"], "unknown option -x (see --help)"),
        (&["--out"], "--out: missing value (a directory; see --help)"),
        (
            &["--out", "--overwrite"],
            "--out: missing value (a directory; see --help)",
        ),
        (&["--out="], "--out: empty value (a directory; see --help)"),
        (
            &["--out", "a", "--out=b"],
            "--out: given twice (\"a\" and \"b\")",
        ),
        (
            &["a", "b"],
            "one output directory only: \"a\" and \"b\" (see --help)",
        ),
        (&["--overwrite=yes"], "--overwrite takes no value"),
    ];
    for name in [MATRIX, SCALE, TAIL, PEERS] {
        let quick: &[(&[&str], &str)] = if name == PEERS {
            &[(&["--quick=1"], "--quick takes no value")]
        } else {
            &[(&["--quick"], "unknown option --quick (see --help)")]
        };
        for (i, (args, want)) in cases.iter().chain(quick).enumerate() {
            let dir = scratch(module_path!(), &format!("parse-{name}-{i}"));
            let o = script(name, &dir, args, &[]);
            assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {}", stderr(&o));
            assert_eq!(stderr(&o), format!("{name}: {want}\n"), "{name} {args:?}");
            assert_eq!(entries(&dir), Vec::<String>::new(), "{name} {args:?}");
        }
    }
}

#[test]
fn earlier_results_are_refused_without_overwrite() {
    for name in [MATRIX, SCALE] {
        let dir = scratch(module_path!(), &format!("refuse-{name}"));
        let default = dir.join(format!(
            "out/{}/results.jsonl",
            name.trim_end_matches(".sh")
        ));
        std::fs::create_dir_all(default.parent().unwrap()).unwrap();
        std::fs::write(&default, "{\"earlier\":true}\n").unwrap();
        // The default directory, and the same given as OUT_DIR.
        let given = format!("out/{}", name.trim_end_matches(".sh"));
        for args in [&[][..], &[given.as_str()][..]] {
            let o = script(name, &dir, args, &[]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {err}");
            assert!(err.contains("exists and is not empty") && err.contains("--overwrite"));
            assert_eq!(
                std::fs::read_to_string(&default).unwrap(),
                "{\"earlier\":true}\n"
            );
            assert_eq!(bench_calls(&dir), Vec::<String>::new());
        }
    }
}

#[test]
fn rudp_scale_files_small_runs_as_scale_with_a_vs_udp_column() {
    let dir = scratch(module_path!(), "scale");
    let env = [
        ("CONNS", "4"),
        ("RATES", "20"),
        ("REPS", "1"),
        // udp last: the baseline does not depend on the order.
        ("PROTOCOLS", "rudp rudp-tick kcp udp-df udp"),
        ("SECONDS_PER_RUN", "0.5"),
        ("WARMUP", "0"),
    ];
    let o = script(SCALE, &dir, &[], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = dir.join("out/rudp-scale");
    let rows = lines(&out.join("results.jsonl"));
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| r["case"] == "scale"), "{rows:?}");
    let calls = bench_calls(&dir);
    assert_eq!(calls.len(), 6, "5 runs and the report: {calls:?}");
    assert!(calls[1].contains("--protocol rudp --ack-delay 51 --rate 20"));
    assert!(calls[3].contains("--protocol udp --dont-fragment --rate 20"));

    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert_eq!(stdout(&o), table);
    for row in [
        "| 4 | 20 | keel-udp (plain) | 1/1 | 100 | 2.00 | 1.00 | 1.25 |",
        "| 4 | 20 | keel-udp, Don't Fragment | 1/1 | 100 | 1.60 | 0.80 | 1.00 |",
        "| 4 | 20 | keel-rudp reliable-ordered | 1/1 | 100 | 5.00 | 2.50 | 3.12 |",
        "| 4 | 20 | keel-rudp, ack delay above the tick | 1/1 | 100 | 5.00 | 2.50 | 3.12 |",
        "| 4 | 20 | KCP fast | 1/1 | 100 | 3.00 | 1.50 | 1.88 |",
    ] {
        assert!(table.contains(row), "lacks {row:?}:\n{table}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("### Scale"), "{md}");
    assert!(!md.contains("Latency under loss"), "{md}");
    assert!(md.contains("| 4 | 20 Hz | keel-rudp reliable-ordered | 1/1 | 5.00 |"));
    // udp and udp-df stay apart in the report too.
    assert!(md.contains("| 4 | 20 Hz | keel-udp | 1/1 | 2.00 |"), "{md}");
    assert!(
        md.contains("| 4 | 20 Hz | keel-udp, Don't Fragment | 1/1 | 1.60 |"),
        "{md}"
    );
    assert!(out.join("rudp-scale.svg").exists());

    // A rerun is refused, and --overwrite replaces the results.
    let again = script(SCALE, &dir, &[], &env);
    assert_eq!(again.status.code(), Some(2));
    let mut one = env;
    one[3] = ("PROTOCOLS", "udp");
    let replaced = script(SCALE, &dir, &["--overwrite"], &one);
    assert_eq!(replaced.status.code(), Some(0), "{}", stderr(&replaced));
    assert_eq!(lines(&out.join("results.jsonl")).len(), 1);
    assert!(bench_calls(&dir)[6].ends_with("--client-sockets per-client --format json"));
    assert!(std::fs::read_to_string(out.join("table.md"))
        .unwrap()
        .starts_with("Client sockets: per-client (CLIENT_SOCKETS)"));

    // CLIENT_SOCKETS=shared: every run with the batched clients.
    let shared = [
        one[0],
        one[1],
        one[2],
        one[3],
        one[4],
        one[5],
        ("CLIENT_SOCKETS", "shared"),
    ];
    let o = script(SCALE, &dir, &["--overwrite"], &shared);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(bench_calls(&dir)[8].contains("--client-sockets shared"));
    assert!(stdout(&o).starts_with("Client sockets: shared (CLIENT_SOCKETS)"));
}

/// PLACEMENT: each line says the placement asked for and whether it was
/// applied (the server's thread read back on CPU 0 alone: the fake has no
/// keel threads to pin, the real keel-bench has).
#[test]
fn rudp_scale_pins_the_threads_as_placement_says() {
    let dir = scratch(module_path!(), "placement");
    let env = [
        ("CONNS", "4"),
        ("RATES", "20"),
        ("REPS", "1"),
        ("PROTOCOLS", "udp"),
        ("SECONDS_PER_RUN", "0.5"),
        ("WARMUP", "0"),
    ];
    let lines_of = |o: &Output, place: &str| {
        assert_eq!(o.status.code(), Some(0), "{place}: {}", stderr(o));
        assert!(stdout(o).contains(&format!("Placement: {place} (PLACEMENT)")));
        lines(&dir.join("out/rudp-scale/results.jsonl"))
    };
    let o = script(SCALE, &dir, &[], &env);
    let rows = lines_of(&o, "free");
    assert_eq!(rows[0]["placement"], "free");
    assert_eq!(rows[0]["placement_applied"], true);

    let mut one = env.to_vec();
    one.push(("PLACEMENT", "one"));
    let o = script(SCALE, &dir, &["--overwrite"], &one);
    let rows = lines_of(&o, "one");
    assert_eq!(rows[0]["placement"], "one");
    assert_eq!(
        rows[0]["placement_applied"], false,
        "the fake has no threads to pin"
    );

    // The real benchmark: its threads exist and are pinned.
    one.push(("KEEL_BENCH", BIN));
    let o = script(SCALE, &dir, &["--overwrite"], &one);
    let rows = lines_of(&o, "one");
    assert_eq!(rows[0]["placement_applied"], true, "{:?}", rows[0]);
    assert_eq!(rows[0]["ok"], true, "{:?}", rows[0]);
}

#[test]
fn rudp_matrix_marks_its_cases_and_writes_under_out() {
    let dir = scratch(module_path!(), "matrix");
    let env = [
        ("LOSSES", "0,0.5"),
        ("SEEDS", "1"),
        ("CLIENTS", "200"),
        ("BULK_PROTOCOLS", "rudp-bulk"),
        ("SECONDS_PER_RUN", "0.5"),
        ("BULK_SECONDS", "0.5"),
    ];
    let o = script(MATRIX, &dir, &[], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = dir.join("out/rudp-matrix");
    let rows = lines(&out.join("results.jsonl"));
    let cases: Vec<_> = rows.iter().map(|r| r["case"].as_str().unwrap()).collect();
    // tick: 2 losses x rudp, kcp; bulk: 2 losses x rudp-bulk.
    assert_eq!(
        cases,
        ["latency", "latency", "latency", "latency", "bulk", "bulk"]
    );
    assert_eq!(
        rows[2]["impair"], "loss=0.005,delay=25ms,jitter=3ms,seed=1",
        "0.5 % is 0.005"
    );
    assert_eq!(rows[4]["bulk_channel"], true);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    // 200 clients are over the report's 100-client rule, but the field
    // keeps them in the latency table.
    assert!(
        md.contains("### Latency under loss") && !md.contains("### Scale"),
        "{md}"
    );
    assert!(md.contains("### Bulk transfers"));
    let bulk = std::fs::read_to_string(out.join("bulk.md")).unwrap();
    assert!(
        bulk.contains("| 0.5 % | keel-rudp reliable-ordered bulk channel | 1/1 |"),
        "{bulk}"
    );
    let text = stdout(&o);
    assert!(text.starts_with(&md) && text.ends_with(&bulk), "{text}");
}
