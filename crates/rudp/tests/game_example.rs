//! The `game` example as a newcomer runs it (issue 24 defect 9): `--help`
//! is help, bad flags fail in words before anything starts, and its output
//! is words, not Rust Debug text, with client numbers that are the
//! server's player numbers.
//!
//! `cargo test` builds the examples; the binary is found beside the test's
//! own (`target/<profile>/examples/game`).

use std::process::{Command, Output};

fn game(args: &[&str]) -> Output {
    let mut path = std::env::current_exe().unwrap();
    path.pop(); // the test binary
    if path.ends_with("deps") {
        path.pop();
    }
    let bin = path
        .join("examples")
        .join(format!("game{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} (built by cargo test)", bin.display());
    Command::new(bin)
        .args(args)
        .output()
        .expect("run the game example")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_is_help_and_bad_flags_fail_before_anything_starts() {
    for flag in ["--help", "-h"] {
        let out = game(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let help = text(&out.stdout);
        assert!(
            help.contains("USAGE:") && help.contains("--clients N"),
            "{help}"
        );
    }
    for (args, says) in [
        (
            &["--clients", "0"][..],
            "--clients: expected a whole number 1..=1000, got \"0\"",
        ),
        (&["--seconds", "-1"][..], "--seconds: expected"),
        (
            &["--impair", "loss=2"][..],
            "--impair: loss: expected a probability",
        ),
        (&["--bogus"][..], "unknown flag \"--bogus\""),
    ] {
        let out = game(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.starts_with(&format!("game: {says}")),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("Error {") && !stderr.contains("ImpairmentError"),
            "{stderr}"
        );
        assert!(
            !text(&out.stdout).contains("listening"),
            "{args:?}: the server started"
        );
    }
}

#[test]
fn output_is_words_and_client_numbers_are_player_numbers() {
    let out = game(&["--seconds", "0.5", "--clients", "2", "--impair", "off"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    for debug in [
        "Some(",
        "None",
        "Local {",
        "Remote {",
        "EndpointStats",
        "{ ",
        "ms)",
    ] {
        assert!(!stdout.contains(debug), "Debug text {debug:?} in\n{stdout}");
    }
    for n in [1, 2] {
        assert!(
            stdout.contains(&format!(
                "server: player {n} joined from 127.0.0.{}:",
                n + 1
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!("client {n}: chat \"welcome, player {n}\"")),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "server: player {n} left: closed by the player (code 0, \"game over\")"
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "client {n}: disconnected: closed by this client (code 0, \"game over\")"
            )),
            "{stdout}"
        );
    }
    assert!(
        !stdout.contains("client 0") && !stdout.contains("player 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("server: 2 connections made, 2 ended;"),
        "{stdout}"
    );
}
