//! keel-bench: keel's loopback benchmark.
//!
//! keel-bench is a drop-in for the UDP part of arknet's loopback benchmark:
//! same flags, same JSON fields, same meaning, plus documented additions.
//! The library holds everything, so it can be tested piece by piece and the
//! binary stays thin:
//!
//! * [`flags`]: command line parsing and validation into a [`flags::Command`];
//! * [`message`]: the benchmark datagram, the server's work, sockperf replies;
//! * [`stats`]: RTT percentiles with bounded memory;
//! * [`output`]: the one-line JSON report;
//! * `human`: the few lines a person reads instead of (or beside) it,
//!   and [`present`]: which of the two goes where (`--format`, terminal);
//! * [`procstats`]: CPU time, peak RSS and host UDP counters from `/proc`;
//! * [`progress`]: the progress line of long runs on a terminal;
//! * [`report`]: `keel-bench report`, result files to a Markdown table and
//!   SVG charts, behind one entry ([`report::write`]), and `keel-bench
//!   compare` ([`report::compare`]);
//! * [`serve_peer`]: `serve --protocol rudp|kcp`, the run's keel-rudp or
//!   KCP echo server alone;
//! * [`loopback`], [`client`], [`echo`], [`serve`]: the network run on
//!   keel-reactor and keel-udp (public API only);
//! * `peer`: the client side and phases shared by the open-loop and
//!   connection modes (rudp, kcp, udp with `--rate`);
//! * `bulk`: the bulk case of rudp and kcp (`--transfer`);
//! * `kcp`: `--protocol kcp`, the same echo over KCP (a peer);
//! * `rudp`: `--protocol rudp`, the echo over keel-rudp connections;
//! * `socket_client`: the open-loop client on a keel-udp socket that
//!   `kcp` and `udp_rate` share (one driver, two transports);
//! * `udp_rate`: `--protocol udp --rate`, the open-loop echo over plain
//!   keel-udp (the scale case's baseline);
//! * [`completions`]: `keel-bench completions bash|zsh|fish`;
//! * [`relay`]: `keel-bench relay`, the impairment relay between clients
//!   and one server (each library its own process, one link);
//! * [`interrupt`]: Ctrl-C ends a run's measured phase early, with its
//!   partial results;
//! * [`run`]: the entry points of the commands.
//!
//! The modules in plain type (`human`, `peer`, `bulk`, `kcp`, `rudp`,
//! `socket_client`, `udp_rate`, `sys`: the CPU clocks, the crate's only
//! `unsafe`) are the crate's own: used by the others,
//! not public.
//! Inside the crate, an item is `pub` only if it is reachable from
//! outside (`unreachable_pub` is on); the rest is `pub(crate)` or private.
//!
//! The binary's exit codes are [`EXIT_OK`], [`EXIT_FAILED`] and
//! [`EXIT_BAD_ARGS`].

#![warn(unreachable_pub)]

mod bulk;
pub mod client;
pub mod completions;
pub mod echo;
pub mod flags;
mod human;
pub mod interrupt;
mod kcp;
pub mod loopback;
pub mod message;
pub mod output;
mod peer;
pub mod present;
pub mod procstats;
pub mod progress;
pub mod relay;
pub mod report;
mod rudp;
pub mod run;
pub mod serve;
pub mod serve_peer;
mod socket_client;
pub mod stats;
mod sys;
mod udp_rate;

/// Exit code: the run passed every check (or `--help` or `--version` was
/// printed, a report written, a comparison made).
pub const EXIT_OK: i32 = 0;
/// Exit code: the run (or serve, or report) failed; the JSON line has
/// `"ok": false`, and stderr says why in words.
pub const EXIT_FAILED: i32 = 1;
/// Exit code: bad arguments; stderr has the error and the usage in words,
/// and stdout one small JSON line ([`output::ErrorRecord`]) with `"ok":
/// false` and an `"error"` naming the flag.
pub const EXIT_BAD_ARGS: i32 = 2;
