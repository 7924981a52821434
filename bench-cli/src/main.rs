//! keel-bench binary: parse the flags, dispatch, show the result (the JSON
//! line, and the human summary as `--format` asks), exit with
//! [`keel_bench::EXIT_OK`], [`keel_bench::EXIT_FAILED`] or
//! [`keel_bench::EXIT_BAD_ARGS`]. All logic lives in the library.

use std::ffi::OsString;
use std::io::Write;

use keel_bench::flags::{self, Command, OutputFormat};
use keel_bench::{present, run, EXIT_BAD_ARGS, EXIT_FAILED, EXIT_OK};

fn main() {
    std::process::exit(try_main())
}

fn exit_code(ok: bool) -> i32 {
    if ok {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}

fn try_main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let command = match flags::parse(args.iter().cloned()) {
        Ok(command) => command,
        Err(err) => {
            present::bad_args(&err, flags::requested_format(args));
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
            present::run(&report, cfg.format);
            exit_code(report.ok)
        }
        Command::Serve(cfg) => match run::serve(&cfg) {
            // The summary says why when it is not ok (ok: false, error).
            Ok(summary) => {
                present::serve(&summary, cfg.format);
                exit_code(summary.ok)
            }
            Err(e) => {
                present::failed("serve", &e, cfg.format);
                EXIT_FAILED
            }
        },
        Command::Report(cfg) => match run::report(&cfg) {
            Ok(()) => EXIT_OK,
            Err(e) => {
                present::failed("report", &e, OutputFormat::Auto);
                EXIT_FAILED
            }
        },
    }
}
