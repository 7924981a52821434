//! keel-bench: the runtime-independent parts of keel's loopback benchmark.
//!
//! keel-bench is a drop-in for the UDP part of arknet's loopback benchmark:
//! same flags, same JSON fields, same meaning, plus documented additions.
//! This library holds the pieces that do not touch the network, so they can
//! be tested on their own and shared by the binary and its tests:
//!
//! * [`flags`]: command line parsing and validation into a [`flags::Command`];
//! * [`message`]: the benchmark datagram, the server's work, sockperf replies;
//! * [`stats`]: RTT percentiles with bounded memory;
//! * [`output`]: the one-line JSON report;
//! * [`procstats`]: CPU time, peak RSS and host UDP counters from `/proc`;
//! * [`run`]: the entry points of the network run (stubs for now).

pub mod flags;
pub mod message;
pub mod procstats;
pub mod stats;
