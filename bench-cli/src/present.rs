//! Where a result goes: the JSON line and the human summary
//! (`crate::human`), to stdout or stderr, by `--format` and whether
//! stdout is a terminal ([`OutputFormat::shown`]).
//!
//! Without `--format`, stdout gets the JSON line exactly as before, and
//! stderr gets the summary only when stdout is a terminal: a person
//! running keel-bench by hand reads the summary, a script that captures
//! stdout sees nothing new on either stream.

use std::io::{IsTerminal, Write};

use crate::flags::{FlagError, OutputFormat};
use crate::human;
use crate::output::RunReport;
use crate::serve::ServeSummary;

/// Writes `text` to stdout; a closed stdout is not worth a panic (the exit
/// code still tells the story).
fn to_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Writes `text` to stderr, ignoring a closed stderr.
fn to_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Shows a result as `format` asks: `json` is the JSON line (without its
/// newline), `summary` makes the human text when it is needed.
fn show(format: OutputFormat, json: &str, summary: impl FnOnce() -> String) {
    let shown = format.shown(std::io::stdout().is_terminal());
    if shown.json {
        to_stdout(&format!("{json}\n"));
    }
    if shown.summary_on_stdout || shown.summary_on_stderr {
        let text = summary();
        if shown.summary_on_stdout {
            to_stdout(&text);
        } else {
            to_stderr(&text);
        }
    }
}

/// A run's report.
pub fn run(report: &RunReport, format: OutputFormat) {
    show(format, &report.to_json_line(), || {
        human::run_summary(report)
    });
}

/// `serve`'s summary when it ends.
pub fn serve(summary: &ServeSummary, format: OutputFormat) {
    let json = serde_json::to_string(summary).expect("the serve summary always serializes");
    show(format, &json, || human::serve_summary(summary));
}

/// A command line that was rejected: the JSON error line (as every script
/// expects), with the error in words beside it like any other summary.
pub fn bad_args(err: &FlagError, format: OutputFormat) {
    let json = RunReport::error_report(None, &err.to_string()).to_json_line();
    show(format, &json, || human::bad_args(err));
}

/// A command that could not start at all (`serve` could not bind,
/// `report` could not read or write): the JSON error line, and the error
/// in words.
pub fn failed(what: &str, error: &str, format: OutputFormat) {
    let json = RunReport::error_report(None, error).to_json_line();
    show(format, &json, || human::failed(what, error));
}
