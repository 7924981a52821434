//! keel-bench binary: parse the flags, dispatch, show the result (the JSON
//! line, and the human summary as `--format` asks; errors in words on
//! stderr), exit with [`keel_bench::EXIT_OK`], [`keel_bench::EXIT_FAILED`]
//! or [`keel_bench::EXIT_BAD_ARGS`]. All logic lives in the library.

use std::ffi::OsString;
use std::io::Write;

use keel_bench::flags::{self, Command, FlagError, OutputFormat, Subcommand};
use keel_bench::present::{self, Destination};
use keel_bench::{run, EXIT_BAD_ARGS, EXIT_FAILED, EXIT_OK};

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

/// A rejected command line: exit 2.
fn bad_args(err: &FlagError, format: OutputFormat, sub: Subcommand) -> i32 {
    present::bad_args(err, format, sub);
    EXIT_BAD_ARGS
}

/// Writes `text` to stdout, ignoring a closed stdout.
fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn try_main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let command = match flags::parse(args.iter().cloned()) {
        Ok(command) => command,
        Err(err) => {
            return bad_args(
                &err,
                flags::requested_format(args.iter().cloned()),
                flags::requested_subcommand(args.iter().cloned()),
            )
        }
    };
    match command {
        Command::Help { sub, long } => {
            print_out(&flags::help_for(sub, long));
            EXIT_OK
        }
        Command::Version => {
            print_out(&format!("keel-bench {}\n", env!("CARGO_PKG_VERSION")));
            EXIT_OK
        }
        Command::Completions(shell) => {
            print_out(&keel_bench::completions::script(shell));
            EXIT_OK
        }
        Command::Compare(cfg) => match keel_bench::report::compare(&cfg) {
            Ok(text) => {
                print_out(&text);
                EXIT_OK
            }
            Err(e) => {
                present::report_failed(&e);
                EXIT_FAILED
            }
        },
        Command::Run(cfg) => {
            let dest = Destination::open(cfg.format, cfg.output.as_deref())
                .and_then(|d| d.with_histogram(cfg.histogram.as_deref()));
            let mut dest = match dest {
                Ok(dest) => dest,
                Err(err) => return bad_args(&err, cfg.format, Subcommand::Run),
            };
            if let Some(warning) = run::io_threads_warning(cfg.io_threads) {
                eprintln!("{warning}");
            }
            // Ctrl-C ends the measured phase with the results so far.
            if let Err(e) = keel_bench::interrupt::handle() {
                eprintln!("keel-bench: warning: {e}; Ctrl-C will end the run without results");
            }
            let progress = keel_bench::progress::Progress::start(&cfg);
            let report = run::run(&cfg);
            if let Some(p) = progress {
                p.finish();
            }
            let written = dest.run(&report);
            exit_code(report.ok && written)
        }
        Command::Serve(cfg) if cfg.protocol != flags::Protocol::Udp => {
            match keel_bench::serve_peer::serve(&cfg) {
                Ok(summary) => {
                    print_out(&format!("{}\n", summary.to_json_line()));
                    if let Some(e) = &summary.error {
                        eprintln!("keel-bench serve: {e}");
                    }
                    exit_code(summary.ok)
                }
                Err(e) => {
                    eprintln!("keel-bench serve: {e}");
                    EXIT_FAILED
                }
            }
        }
        Command::Serve(cfg) => {
            let mut dest = match Destination::open(cfg.format, cfg.output.as_deref()) {
                Ok(dest) => dest,
                Err(err) => return bad_args(&err, cfg.format, Subcommand::Serve),
            };
            if let Some(warning) = run::io_threads_warning(cfg.io_threads) {
                eprintln!("{warning}");
            }
            match run::serve(&cfg) {
                // The summary says why when it is not ok (ok: false, error).
                Ok(summary) => {
                    let written = dest.serve(&summary);
                    exit_code(summary.ok && written)
                }
                Err(e) => {
                    dest.serve_failed(&cfg, &e);
                    EXIT_FAILED
                }
            }
        }
        Command::Relay(cfg) => match keel_bench::relay::relay(&cfg) {
            Ok(summary) => {
                print_out(&format!("{}\n", summary.to_json_line()));
                if let Some(e) = &summary.error {
                    eprintln!("keel-bench relay: {e}");
                }
                exit_code(summary.ok)
            }
            Err(e) => {
                eprintln!("keel-bench relay: {e}");
                EXIT_FAILED
            }
        },
        Command::Report(cfg) => match run::report(&cfg) {
            Ok(()) => EXIT_OK,
            Err(e) => {
                present::report_failed(&e);
                EXIT_FAILED
            }
        },
    }
}
