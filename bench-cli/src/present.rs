//! Where a result goes: the JSON line and the human summary
//! (`crate::human`), to stdout, stderr or the `--output` file, by
//! `--format` and whether stdout is a terminal ([`OutputFormat::shown`]).
//!
//! Without `--format`, stdout gets the JSON line exactly as before, and
//! stderr gets the summary only when stdout is a terminal: a person
//! running keel-bench by hand reads the summary, a script that captures
//! stdout sees nothing new there.
//!
//! Errors are always said in words on stderr, whatever `--format` and
//! wherever stdout goes (`keel-bench --payload 70000 > x.json` still tells
//! the terminal why), and the JSON line stays on stdout for scripts:
//!
//! * a rejected command line (exit 2): the error, the usage of the
//!   subcommand and where to read more on stderr; on stdout the small
//!   [`ErrorRecord`] (`ok` false, `error` naming the flag), not a run
//!   record of nulls;
//! * a run that failed its checks (exit 1): its full record on stdout, and
//!   `keel-bench: FAILED: why` on stderr unless the summary (which ends
//!   with the same words) is already in front of the reader;
//! * a `serve` that could not start (exit 1): the serve summary's shape
//!   ([`ServeSummary::failed`]) on stdout, the reason on stderr;
//! * a `report` that could not run (exit 1): the [`ErrorRecord`] on
//!   stdout, the reason on stderr.
//!
//! With `--output FILE` the JSON line goes to FILE instead of stdout.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::flags::{FlagError, OutputFormat, ServeConfig, Subcommand};
use crate::human;
use crate::output::{ErrorRecord, RunReport};
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

/// Where a command's result goes: its `--format`, and its `--output` file
/// if any (created when the command starts, so an unwritable path fails
/// before a run).
#[derive(Debug)]
pub struct Destination {
    format: OutputFormat,
    file: Option<(PathBuf, File)>,
    histogram: Option<(PathBuf, File)>,
}

impl Destination {
    /// The result as `format` asks, the JSON line to `output` if given
    /// (created or truncated now). `Err` names `--output` and the path.
    pub fn open(format: OutputFormat, output: Option<&Path>) -> Result<Destination, FlagError> {
        let file = match output {
            None => None,
            Some(path) => {
                let file = File::create(path).map_err(|e| {
                    FlagError::new("--output", format!("cannot create {}: {e}", path.display()))
                })?;
                Some((path.to_owned(), file))
            }
        };
        Ok(Destination {
            format,
            file,
            histogram: None,
        })
    }

    /// Also writes a run's RTT distribution to `path` (`--histogram`),
    /// created or truncated now. `Err` names `--histogram` and the path.
    pub fn with_histogram(mut self, path: Option<&Path>) -> Result<Destination, FlagError> {
        if let Some(path) = path {
            let file = File::create(path).map_err(|e| {
                FlagError::new(
                    "--histogram",
                    format!("cannot create {}: {e}", path.display()),
                )
            })?;
            self.histogram = Some((path.to_owned(), file));
        }
        Ok(self)
    }

    /// Shows a result: `json` is the JSON line (without its newline),
    /// `summary` makes the human text when it is needed, and `failure` is
    /// why the command failed, said on stderr if the summary does not
    /// already say it there. False when the `--output` file could not be
    /// written (said on stderr).
    fn show(
        &mut self,
        json: &str,
        summary: impl FnOnce() -> String,
        failure: Option<&str>,
    ) -> bool {
        let stdout_terminal = std::io::stdout().is_terminal();
        let mut shown = self.format.shown(stdout_terminal);
        let mut written = true;
        if let Some((path, file)) = &mut self.file {
            // The JSON line goes to the file; stdout is free for a person.
            if shown.json && self.format == OutputFormat::Auto && stdout_terminal {
                shown.summary_on_stdout = true;
                shown.summary_on_stderr = false;
            }
            if shown.json || self.format == OutputFormat::Human {
                if let Err(e) = file
                    .write_all(format!("{json}\n").as_bytes())
                    .and_then(|()| file.flush())
                {
                    to_stderr(&format!(
                        "keel-bench: --output: cannot write {}: {e}\n",
                        path.display()
                    ));
                    written = false;
                }
            }
        } else if shown.json {
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
        let seen = shown.summary_on_stderr || (shown.summary_on_stdout && stdout_terminal);
        if let Some(why) = failure.filter(|_| !seen) {
            to_stderr(&format!("keel-bench: FAILED: {why}\n"));
        }
        written
    }

    /// A run's report (and its RTT distribution, with `--histogram`);
    /// false when a file could not be written.
    pub fn run(&mut self, report: &RunReport) -> bool {
        let failure = (!report.ok).then(|| report.error.as_deref().unwrap_or("(no reason given)"));
        let mut written = true;
        if let Some((path, file)) = &mut self.histogram {
            let text = report.rtt_distribution.as_deref().unwrap_or("");
            if let Err(e) = file.write_all(text.as_bytes()).and_then(|()| file.flush()) {
                to_stderr(&format!(
                    "keel-bench: --histogram: cannot write {}: {e}\n",
                    path.display()
                ));
                written = false;
            }
        }
        let shown = self.show(
            &report.to_json_line(),
            || human::run_summary(report),
            failure,
        );
        shown && written
    }

    /// `serve`'s summary when it ends; false when the `--output` file
    /// could not be written.
    pub fn serve(&mut self, summary: &ServeSummary) -> bool {
        let json = serde_json::to_string(summary).expect("the serve summary always serializes");
        let failure =
            (!summary.ok).then(|| summary.error.as_deref().unwrap_or("(no reason given)"));
        self.show(&json, || human::serve_summary(summary), failure)
    }

    /// A `serve` that could not start: the serve summary's shape with
    /// `ok` false, and the reason in words.
    pub fn serve_failed(&mut self, cfg: &ServeConfig, error: &str) -> bool {
        let json = serde_json::to_string(&ServeSummary::failed(cfg, error))
            .expect("the serve summary always serializes");
        self.show(&json, || human::failed("serve", error), Some(error))
    }
}

/// A command line that was rejected: the error in words and the usage of
/// `sub` on stderr, and the small JSON error line on stdout (as scripts
/// expect one line with `ok` false and `error` naming the flag); with
/// `--format human`, the words only.
pub fn bad_args(err: &FlagError, format: OutputFormat, sub: Subcommand) {
    if format != OutputFormat::Human {
        to_stdout(&format!(
            "{}\n",
            ErrorRecord::new(&err.to_string()).to_json_line()
        ));
    }
    to_stderr(&human::bad_args(err, sub));
}

/// A `report` (or `compare`) that could not run: the JSON error line on
/// stdout, the reason on stderr.
pub fn report_failed(error: &str) {
    to_stdout(&format!("{}\n", ErrorRecord::new(error).to_json_line()));
    to_stderr(&format!("keel-bench: FAILED: {error}\n"));
}
