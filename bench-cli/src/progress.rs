//! A progress line on stderr for runs longer than [`MIN_SECONDS`], when
//! stderr is a terminal (never otherwise, so logs and scripts see nothing
//! new): `\r`-updated four times a second with the phase and the time
//! into it, cleared when the run ends.

use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::flags::RunConfig;

/// Runs at least this long (warm-up and measured phase) show progress.
pub const MIN_SECONDS: f64 = 2.0;

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_millis(250);

/// The line's text `elapsed` after the run started: the phase and how far
/// into it, or that it is draining.
pub fn line(cfg: &RunConfig, elapsed: f64, interrupted: bool) -> String {
    if interrupted {
        return "keel-bench: interrupted; draining what is in flight (Ctrl-C again to quit)"
            .to_string();
    }
    if elapsed < cfg.warmup {
        return format!("keel-bench: warm-up {elapsed:.1} / {} s", cfg.warmup);
    }
    let into = elapsed - cfg.warmup;
    if into < cfg.seconds {
        format!(
            "keel-bench: measuring {into:.1} / {} s ({:.0} %)",
            cfg.seconds,
            into / cfg.seconds * 100.0
        )
    } else {
        "keel-bench: measured; draining what is in flight".to_string()
    }
}

/// The running progress line; [`Progress::finish`] clears it.
#[derive(Debug)]
pub struct Progress {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Progress {
    /// Starts the line for `cfg` when the run is long enough and stderr is
    /// a terminal; `None` otherwise.
    pub fn start(cfg: &RunConfig) -> Option<Progress> {
        if cfg.warmup + cfg.seconds <= MIN_SECONDS || !std::io::stderr().is_terminal() {
            return None;
        }
        let cfg = cfg.clone();
        let (stop, stopped) = mpsc::channel::<()>();
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("keel-bench-progress".into())
            .spawn(move || loop {
                let text = line(
                    &cfg,
                    started.elapsed().as_secs_f64(),
                    crate::interrupt::interrupted().is_some(),
                );
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2K{text}");
                let _ = err.flush();
                drop(err);
                // Stopped (or the sender gone): clear the line and end.
                if !matches!(
                    stopped.recv_timeout(EVERY),
                    Err(mpsc::RecvTimeoutError::Timeout)
                ) {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K");
                    let _ = err.flush();
                    return;
                }
            })
            .ok()?;
        Some(Progress { stop, thread })
    }

    /// Clears the line and waits for its thread.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_follows_the_phases() {
        let cfg = RunConfig {
            warmup: 1.0,
            seconds: 4.0,
            ..RunConfig::default()
        };
        assert_eq!(line(&cfg, 0.5, false), "keel-bench: warm-up 0.5 / 1 s");
        assert_eq!(
            line(&cfg, 3.0, false),
            "keel-bench: measuring 2.0 / 4 s (50 %)"
        );
        assert_eq!(
            line(&cfg, 5.5, false),
            "keel-bench: measured; draining what is in flight"
        );
        assert!(line(&cfg, 2.0, true).contains("interrupted"));
    }
}
