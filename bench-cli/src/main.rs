//! keel-bench binary: parse the flags, dispatch, print one JSON line, exit
//! with [`keel_bench::EXIT_OK`], [`keel_bench::EXIT_FAILED`] or
//! [`keel_bench::EXIT_BAD_ARGS`]. All logic lives in the library.

use std::io::Write;

use keel_bench::flags::{self, Command};
use keel_bench::output::RunReport;
use keel_bench::{run, EXIT_BAD_ARGS, EXIT_FAILED, EXIT_OK};

fn main() {
    std::process::exit(try_main())
}

/// Writes `text` and a newline to stdout; a closed stdout is not worth a
/// panic (the exit code still tells the story).
fn print_line(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn try_main() -> i32 {
    let command = match flags::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(err) => {
            print_line(&RunReport::error_report(None, &err.to_string()).to_json_line());
            return EXIT_BAD_ARGS;
        }
    };
    match command {
        Command::Help => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(flags::help_text().as_bytes());
            let _ = out.flush();
            EXIT_OK
        }
        Command::Run(cfg) => {
            let report = run::run(&cfg);
            print_line(&report.to_json_line());
            if report.ok {
                EXIT_OK
            } else {
                EXIT_FAILED
            }
        }
        Command::Serve(cfg) => match run::serve(&cfg) {
            Ok(true) => EXIT_OK,
            // The summary line says why (ok: false, error).
            Ok(false) => EXIT_FAILED,
            Err(e) => {
                print_line(&RunReport::error_report(None, &e).to_json_line());
                EXIT_FAILED
            }
        },
        Command::Report(cfg) => match run::report(&cfg) {
            Ok(()) => EXIT_OK,
            Err(e) => {
                print_line(&RunReport::error_report(None, &e).to_json_line());
                EXIT_FAILED
            }
        },
    }
}
