//! Ctrl-C ends a run with its partial results and summary (as iperf3
//! does), and runs longer than ~2 s show a progress line on stderr only
//! when stderr is a terminal (issue 24).

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::BIN;

/// True once `pid` has a thread whose name starts with `prefix` (Linux
/// truncates thread names to 15 bytes).
fn has_thread(pid: u32, prefix: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
    })
}

#[test]
fn ctrl_c_ends_the_run_with_partial_results() {
    let mut child = Command::new(BIN)
        .args(["--seconds", "30", "--warmup", "0", "--format", "both"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn keel-bench");
    let pid = child.id();
    // The SIGINT handler runs on its own thread: wait (bounded) until it
    // exists, so the signal does not meet the default action.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !has_thread(pid, "keel-bench-sigi") {
        assert!(Instant::now() < deadline, "no SIGINT thread in 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = Instant::now();
    assert!(Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        let _ = out.read_to_string(&mut o);
        let _ = err.read_to_string(&mut e);
        let status = child.wait().unwrap();
        let _ = tx.send((status, o, e));
    });
    let (status, stdout, stderr) = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("keel-bench ends within 15 s of SIGINT");
    assert!(sent.elapsed() < Duration::from_secs(15));
    assert_eq!(status.code(), Some(1), "{stderr}");
    let v: Value =
        serde_json::from_str(stdout.trim_end()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let error = v["error"].as_str().unwrap();
    assert!(error.starts_with("interrupted (SIGINT) after "), "{error}");
    assert!(v["elapsed_seconds"].as_f64().unwrap() < 20.0, "{v}");
    assert_eq!(v["requested_seconds"], 30.0);
    // The summary, with the reason.
    assert!(
        stderr.contains("result      FAILED: interrupted (SIGINT)"),
        "{stderr}"
    );
    // A 30 s run, but stderr is a pipe: no progress line.
    assert!(
        !stderr.contains('\r') && !stderr.contains("measuring"),
        "{stderr:?}"
    );
}

/// On a terminal (util-linux `script`'s pseudo-terminal), a run longer
/// than 2 s shows a `\r`-updated progress line on stderr.
#[test]
fn a_long_run_shows_progress_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux `script` (a pseudo-terminal) is not installed");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("progress-tty");
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("run.json");
    let inner = format!(
        "{BIN} --seconds 2.2 --warmup 0 --format json > {}",
        json.display()
    );
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .output()
        .expect("run script");
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{terminal}");
    assert!(
        terminal.contains("\rkeel-bench: measuring ")
            || terminal.contains("\r\x1b[2Kkeel-bench: measuring "),
        "{terminal:?}"
    );
    assert!(terminal.contains(" / 2.2 s ("), "{terminal:?}");
    // The JSON line is untouched.
    let v: Value =
        serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim_end()).unwrap();
    assert_eq!(v["ok"], true);
}
