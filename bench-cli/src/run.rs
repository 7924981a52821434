//! Entry points of the network side: the run, the server alone, the report.
//!
//! These are stand-ins with their final signatures: the run (server and
//! clients on keel's runtime, over keel-udp) is written later on top of the
//! other modules of this crate. Until then each one fails cleanly, with a
//! report whose `error` says so, so the binary's contract (one JSON line,
//! exit code) already holds.

use crate::flags::{ReportConfig, RunConfig, ServeConfig};
use crate::output::RunReport;

/// `error` of every report until the network run exists.
pub const NOT_IMPLEMENTED: &str = "not implemented yet: the network run of keel-bench is \
                                   still being written on keel-udp";

/// Runs the benchmark described by `cfg` and returns its report, with
/// [`RunReport::finish`] applied (so `ok` decides the exit code).
pub fn run(cfg: &RunConfig) -> RunReport {
    RunReport::error_report(Some(cfg), NOT_IMPLEMENTED)
}

/// Serves echoes as described by `cfg` until its `--seconds` elapse or the
/// process is interrupted. `Err` carries the reason it could not serve.
pub fn serve(cfg: &ServeConfig) -> Result<(), String> {
    let _ = cfg;
    Err(format!("serve: {NOT_IMPLEMENTED}"))
}

/// Reads result files and writes the summary table and charts.
/// `Err` carries the reason it could not.
pub fn report(cfg: &ReportConfig) -> Result<(), String> {
    let _ = cfg;
    Err(format!("report: {NOT_IMPLEMENTED}"))
}
