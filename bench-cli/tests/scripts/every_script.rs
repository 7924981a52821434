//! The conventions every script in scripts/ follows: `--help` and `-h`
//! print what it does and exit 0 without running or writing anything; an
//! unknown argument exits 2 with a message that names the script; and the
//! scripts that write results default to out/<name>/ and keep earlier
//! results without `--overwrite`.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{fake_bench, repo_root, s, scratch, stderr, stdout};

/// Every script, and the interpreter it runs under.
fn scripts() -> Vec<(String, &'static str)> {
    let mut v: Vec<_> = std::fs::read_dir(repo_root().join("scripts"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let run = if name.ends_with(".sh") {
                "bash"
            } else if name.ends_with(".py") {
                "python3"
            } else {
                return None;
            };
            Some((name, run))
        })
        .collect();
    v.sort();
    v
}

/// Runs scripts/`name` under `run` in `cwd` with `args`; no benchmark to
/// find (KEEL_BENCH a path that does not exist), stdin closed.
fn script(run: &str, name: &str, cwd: &Path, args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["20", run])
        .arg(repo_root().join("scripts").join(name))
        .args(args)
        .current_dir(cwd)
        .env("KEEL_BENCH", "/nonexistent/keel-bench")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the script")
}

fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn help_exits_0_and_unknown_arguments_exit_2_everywhere() {
    let all = scripts();
    assert!(all.len() >= 15, "{all:?}");
    for (name, run) in &all {
        for flag in ["--help", "-h"] {
            let dir = scratch(module_path!(), &format!("help-{name}{flag}"));
            let o = script(run, name, &dir, &[flag]);
            assert_eq!(o.status.code(), Some(0), "{name} {flag}: {}", stderr(&o));
            assert!(
                stdout(&o).lines().count() >= 3,
                "{name} {flag}: {}",
                stdout(&o)
            );
            assert!(is_empty(&dir), "{name} {flag} wrote files");
        }
        let dir = scratch(module_path!(), &format!("bogus-{name}"));
        let o = script(run, name, &dir, &["--no-such-flag"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        let prog = name.rsplit_once('.').unwrap().0;
        assert!(
            err.contains(prog) && err.contains("--no-such-flag"),
            "{name}: {err:?} names neither the script nor the argument"
        );
        assert!(is_empty(&dir), "{name} --no-such-flag wrote files");
    }
}

#[test]
fn matrix_sh_defaults_to_out_matrix_and_keeps_it() {
    let dir = scratch(module_path!(), "matrix-default");
    let bench = fake_bench();
    let args = [
        "--bench",
        s(&bench),
        "--seconds",
        "0.1",
        "--warmup",
        "0",
        "--repetitions",
        "1",
    ];
    let o = script("bash", "matrix.sh", &dir, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let runs = dir.join("out/matrix/runs.jsonl");
    let first = std::fs::read_to_string(&runs).unwrap();
    assert_eq!(first.lines().count(), 1);
    let again = script("bash", "matrix.sh", &dir, &args);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("pass --overwrite"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), first);
}

#[test]
fn soak_sh_keeps_an_existing_series_without_overwrite() {
    let dir = scratch(module_path!(), "soak-series");
    let series = dir.join("series.txt");
    std::fs::write(&series, "0 1234\n").unwrap();
    let bench = fake_bench();
    let args = [
        "--bench",
        s(&bench),
        "--seconds",
        "0",
        "--series",
        s(&series),
    ];
    let o = script("bash", "soak.sh", &dir, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("pass --overwrite"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&series).unwrap(), "0 1234\n");
    let mut with = args.to_vec();
    with.push("--overwrite");
    let o = script("bash", "soak.sh", &dir, &with);
    assert_ne!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_ne!(std::fs::read_to_string(&series).unwrap(), "0 1234\n");
}
