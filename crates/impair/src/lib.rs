//! keel-impair: keel's one model of a bad network link.
//!
//! What a lossy, slow, jittery link does to each datagram, as pure code: no
//! IO, no clock, no buffers and no dependencies. Two users drive it:
//!
//! * keel-udp's link conditioner (`keel_udp::conditioner`), on a real
//!   socket's send or receive path: it holds delayed datagrams in a bounded
//!   store and releases them with a lane timer;
//! * keel-rudp-proto's simulator (`keel_rudp_proto::sim::Link`), on a
//!   virtual clock: it adds what only a simulated link has (a bottleneck
//!   with a drop-tail queue, a cut cable).
//!
//! Both take one [`Impairment`] per direction and ask a [`Conditioner`] for
//! the [`Verdict`] of every datagram; neither has a generator or a rule of
//! its own, so a seed means the same thing in a unit test of the protocol
//! and on a loopback socket.
//!
//! # What happens to a datagram
//!
//! For every datagram, [`Conditioner::decide`] makes five draws from a
//! seeded [`Rng`] (SplitMix64), whatever the settings, in this order: loss,
//! duplicate, reorder, the jitter of the datagram, the jitter of its copy.
//! So the loss decisions of a seed do not change when another setting does.
//!
//! * **loss**: with probability `loss` it is dropped ([`Verdict::Drop`]).
//! * **delay and jitter**: it is held `delay` plus a uniform offset in
//!   `[-jitter, +jitter]` (whole nanoseconds), so the mean hold is `delay`
//!   and `jitter <= delay` ([`Impairment::validate`] says so). Datagrams
//!   are independent: a jitter larger than the gap between two datagrams
//!   reorders them, as on a real link (and as with netem).
//! * **reorder**: with probability `reorder` it is held a further
//!   `reorder_delay`, so that datagrams sent during that time overtake it.
//!   A datagram is only seen out of order if another one follows within
//!   `reorder_delay`.
//! * **duplicate**: with probability `duplicate` a second copy follows,
//!   with its own jitter and never the reorder delay.
//!
//! A hold of zero means at once. `limit` and `limit_bytes` bound what a
//! path holds at once; the path (not this crate, which holds nothing)
//! discards a copy past either bound and counts it.
//!
//! # Seeds and streams
//!
//! [`Conditioner::new`] decides with stream 0 of the impairment's `seed`;
//! [`Conditioner::with_stream`] with another stream, an independent
//! sequence ([`Rng::with_stream`]: the state `seed ^ stream *
//! 0xD6E8_FEB8_6659_FD93`, so stream 0 is the seed itself). keel-udp uses
//! stream `i` for server lane `i` and streams of their own for receive
//! paths; the simulator's `sim::Pair` uses stream 0 of its seed from client to
//! server and stream 1 back. The same seed, settings and stream give the
//! same verdicts on every platform and build.
//!
//! # Where the two models used to differ
//!
//! Before this crate, keel-udp's conditioner and keel-rudp's `sim::Link`
//! each had a SplitMix64 and decision code of their own. They agreed on the
//! order and number of draws and on loss, duplicates and reordering; they
//! differed in:
//!
//! * **jitter**: the simulator held `delay + [0, jitter]` (mean `delay +
//!   jitter / 2`, any jitter); the conditioner `delay +/- jitter` (mean
//!   `delay`, `jitter <= delay`). This model is the conditioner's, the one
//!   keel-bench's `--impair` and the measured reports use; a simulated link
//!   that meant `delay: 20ms, jitter: 80ms` now says `delay: 60ms, jitter:
//!   40ms` for the same range.
//! * **validation**: the simulator took any value; now both validate the
//!   same way, with errors that name the setting.
//! * **bounds**: the simulator held any number of datagrams; now both hold
//!   at most `limit` datagrams and `limit_bytes` bytes, and count the rest.
//! * **seeds**: the conditioner derived streams from one seed; the
//!   simulator seeded its return link with `seed ^ 0x5555_5555_5555_5555`.
//!   Both use streams now.
//!
//! # The textual form
//!
//! `off`, or `KEY=VALUE` pairs separated by commas ([`IMPAIRMENT_KEYS`]):
//! keel-bench's `--impair` and `--impair-server` take it. Every key not
//! named keeps its default, and the result is validated, so
//! `loss=5%,delay=25ms` is `Impairment { loss: 0.05, delay: 25 ms,
//! ..Impairment::default() }` (no jitter, duplicates or reordering, a
//! `reorder_delay` of 10 ms, seed 0, the default bounds).
//!
//! ```
//! use keel_impair::Impairment;
//! use std::time::Duration;
//!
//! let imp: Impairment = "loss=0.05,delay=20ms,jitter=5ms,dup=1%,reorder=0.1,seed=7".parse()?;
//! assert_eq!(imp.loss, 0.05);
//! assert_eq!(imp.delay, Duration::from_millis(20));
//! assert_eq!(imp.duplicate, 0.01);
//! assert_eq!(imp.to_string().parse::<Impairment>()?, imp);
//! let short: Impairment = "loss=5%,delay=25ms".parse()?;
//! assert_eq!(short, Impairment { loss: 0.05, delay: Duration::from_millis(25), ..Impairment::default() });
//!
//! // Errors name the key and what it accepts.
//! let err = "loss=1.5".parse::<Impairment>().unwrap_err();
//! assert_eq!(err.key, "loss");
//! assert!(err.to_string().starts_with("loss: expected a probability"));
//! let err = "delay=20".parse::<Impairment>().unwrap_err();
//! assert!(err.to_string().contains("20ms"), "{err}");
//! let err = "delay=5ms,jitter=6ms".parse::<Impairment>().unwrap_err();
//! assert!(err.to_string().starts_with("jitter: expected at most delay (5ms)"), "{err}");
//! # Ok::<(), keel_impair::ImpairmentError>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod decide;
mod impairment;
mod rng;

pub use decide::{Conditioner, Verdict};
pub use impairment::{
    Impairment, ImpairmentError, DEFAULT_IMPAIRMENT_LIMIT, DEFAULT_IMPAIRMENT_LIMIT_BYTES,
    DEFAULT_REORDER_DELAY, IMPAIRMENT_KEYS, MAX_IMPAIRMENT_DELAY,
};
pub use rng::Rng;
