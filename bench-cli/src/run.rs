//! Entry points of the binary's commands: the run, the server alone, the
//! report.

use crate::flags::{Protocol, ReportConfig, RunConfig, ServeConfig};
use crate::output::RunReport;
use crate::serve::ServeSummary;

/// Runs the benchmark described by `cfg` and returns its report, with
/// [`RunReport::finish`] applied (so `ok` decides the exit code).
pub fn run(cfg: &RunConfig) -> RunReport {
    match cfg.protocol {
        Protocol::Udp if cfg.rate_hz.is_some() => crate::udp_rate::run(cfg),
        Protocol::Udp => crate::loopback::run(cfg),
        Protocol::Rudp => crate::rudp::run(cfg),
        Protocol::Kcp => crate::kcp::run(cfg),
    }
}

/// The warning for `--io-threads` above the machine's cores (threads then
/// share cores, and the figures say more about the scheduler than about
/// keel); `None` when they fit or the core count is unknown.
pub fn io_threads_warning(io_threads: u32) -> Option<String> {
    let cores = std::thread::available_parallelism().ok()?.get();
    threads_over_cores(io_threads, cores)
}

fn threads_over_cores(io_threads: u32, cores: usize) -> Option<String> {
    (io_threads as usize > cores).then(|| {
        format!(
            "keel-bench: warning: --io-threads {io_threads} is more than this machine's {cores} \
             cores (available parallelism): threads will share cores"
        )
    })
}

/// Serves echoes as described by `cfg` until its `--seconds` elapse or the
/// process gets SIGINT/SIGTERM, and returns the summary (the caller shows
/// it, see [`crate::present::Destination::serve`]). `Err` carries the reason it could
/// not serve at all.
pub fn serve(cfg: &ServeConfig) -> Result<ServeSummary, String> {
    crate::serve::serve(cfg)
}

/// Reads result files and writes the summary table and charts (see
/// [`crate::report`]); says on stderr what it wrote. `Err` carries the
/// reason it could not.
pub fn report(cfg: &ReportConfig) -> Result<(), String> {
    let written = crate::report::write(cfg)?;
    let excluded = match written.excluded {
        0 => "none excluded".to_string(),
        n => format!("{n} excluded (a repetition failed)"),
    };
    let unreadable = match written.unreadable {
        0 => String::new(),
        n => format!(", {}", plural(n, "unreadable line")),
    };
    eprintln!(
        "report: {}, {} summarised, {excluded}{unreadable}",
        plural(written.runs, "run"),
        plural(written.summarised, "configuration"),
    );
    for file in &written.files {
        eprintln!("report: wrote {}", file.display());
    }
    Ok(())
}

/// `1 run`, `2 runs`, `0 runs`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_threads_than_cores_is_a_warning() {
        assert_eq!(threads_over_cores(2, 2), None);
        let w = threads_over_cores(8, 2).unwrap();
        assert!(
            w.contains("--io-threads 8 is more than this machine's 2 cores"),
            "{w}"
        );
        assert_eq!(plural(1, "run"), "1 run");
        assert_eq!(plural(0, "run"), "0 runs");
    }
}
