//! A link conditioner: seeded, deterministic loss, latency with jitter,
//! duplication and reordering on a socket's send or receive path, for
//! testing a game under a bad network on loopback.
//!
//! Configure it per socket with [`EndpointConfig::send_impairment`] and
//! [`EndpointConfig::recv_impairment`] (a [`ServerConfig`] applies its
//! endpoint settings to every lane). Both are `None` by default, and off
//! means free: the send path and each receive batch pay one branch on an
//! `Option`, and nothing is allocated.
//!
//! # What happens to a datagram
//!
//! For every datagram on a conditioned path, [`Conditioner::decide`] draws
//! from a seeded PRNG (SplitMix64, five draws per datagram whatever the
//! settings, so the loss decisions of a seed do not change when another
//! setting does):
//!
//! * **loss**: with probability `loss` it is dropped (counted in
//!   `conditioner_dropped`). A send still returns `Ok`, as on a real network.
//! * **delay and jitter**: it is held for `delay` plus a uniform offset in
//!   `[-jitter, +jitter]` (so `jitter <= delay`). Datagrams held this way are
//!   independent: a jitter larger than the gap between two datagrams
//!   reorders them, as on a real link (and as with netem).
//! * **reorder**: with probability `reorder` it is held for a further
//!   `reorder_delay`, so that datagrams sent during that time overtake it
//!   (counted in `conditioner_reordered`). A datagram is only seen out of
//!   order if another one follows within `reorder_delay`: a ping-pong with
//!   one datagram in flight is only delayed.
//! * **duplicate**: with probability `duplicate` a second copy follows with
//!   its own jitter (no reorder delay; counted in `conditioner_duplicated`).
//!
//! A copy with a total delay of zero goes on at once (through the normal
//! send path, or to the handler). Delayed copies are held in a bounded
//! store (`limit` datagrams and `limit_bytes` bytes; past either bound the
//! copy is discarded and counted in `conditioner_discarded`) and released by
//! a lane timer at their due time: sends then take the normal send path
//! (batch, `sendmmsg`, bounded queue), received datagrams reach the handler
//! exactly as if just received (on a server, through the session logic:
//! a datagram that arrives late opens its session late, and a dropped one
//! never opens one). Lane timers have millisecond resolution, so a
//! datagram is released at its due time or up to about a millisecond later,
//! never earlier. Datagrams still held when the endpoint closes are
//! discarded and counted in `conditioner_discarded`.
//!
//! The counters (see [`CounterSnapshot`]) are the socket's, summed over
//! both directions. For a send path,
//! `sends = datagrams_out + conditioner_dropped + conditioner_discarded -
//! conditioner_duplicated` once nothing is held (plus the send path's own
//! refusals).
//!
//! # Seeds and streams
//!
//! The same seed gives the same decisions: the send path of a client, datagram
//! socket or server lane 0 decides exactly as `Conditioner::new` on the
//! same [`Impairment`]. Server lane `i` uses stream `i` of the seed, and a
//! socket's receive path uses streams of its own, so one seed gives
//! independent decisions per lane and per direction.
//!
//! # Examples
//!
//! The textual shape (keel-bench's `--impair` takes it):
//!
//! ```
//! use keel_udp::Impairment;
//! use std::time::Duration;
//!
//! let imp: Impairment = "loss=0.05,delay=20ms,jitter=5ms,dup=1%,reorder=0.1,seed=7".parse()?;
//! assert_eq!(imp.loss, 0.05);
//! assert_eq!(imp.delay, Duration::from_millis(20));
//! assert_eq!(imp.duplicate, 0.01);
//! assert_eq!(imp.to_string().parse::<Impairment>()?, imp);
//!
//! // Errors name the key and what it accepts.
//! let err = "loss=1.5".parse::<Impairment>().unwrap_err();
//! assert_eq!(err.key, "loss");
//! assert!(err.to_string().starts_with("loss: expected a probability"));
//! let err = "delay=20".parse::<Impairment>().unwrap_err();
//! assert!(err.to_string().contains("20ms"), "{err}");
//! # Ok::<(), keel_udp::ImpairmentError>(())
//! ```
//!
//! A datagram socket whose sends lose 10% and arrive 5 ms late:
//!
//! ```
//! use keel_reactor::{IoModel, Runtime};
//! use keel_udp::{DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, EndpointConfig, Impairment};
//! use std::net::SocketAddr;
//! use std::time::Duration;
//!
//! struct Quiet;
//! impl DatagramSocketHandler for Quiet {
//!     fn datagram(&mut self, _: &mut DatagramSocketCtx<'_>, _: SocketAddr, _: &[u8]) {}
//! }
//!
//! let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
//! let config = EndpointConfig {
//!     send_impairment: Some(Impairment {
//!         loss: 0.1,
//!         delay: Duration::from_millis(5),
//!         seed: 42,
//!         ..Impairment::default()
//!     }),
//!     ..EndpointConfig::default()
//! };
//! let socket = DatagramSocket::bind(rt.handle(), "127.0.0.1:0".parse()?, config, Quiet)?;
//! let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
//! peer.set_read_timeout(Some(Duration::from_secs(5)))?;
//! // Seed 42 keeps the first datagram (see the pure Conditioner below).
//! let sent = std::time::Instant::now();
//! socket.send_to(peer.local_addr()?, b"late")?;
//! let mut buf = [0u8; 8];
//! let n = peer.recv(&mut buf)?;
//! assert_eq!(&buf[..n], b"late");
//! assert!(sent.elapsed() >= Duration::from_millis(5));
//! socket.close();
//! rt.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The decisions alone, without a socket or a clock:
//!
//! ```
//! use keel_udp::{Conditioner, Impairment, Verdict};
//! use std::time::Duration;
//!
//! let imp = Impairment { loss: 0.1, delay: Duration::from_millis(5), seed: 42, ..Impairment::default() };
//! let mut a = Conditioner::new(&imp);
//! let mut b = Conditioner::new(&imp);
//! let first: Vec<Verdict> = (0..1000).map(|_| a.decide()).collect();
//! assert!((0..1000).all(|i| b.decide() == first[i]));
//! assert!(matches!(first[0], Verdict::Deliver { .. }));
//! let lost = first.iter().filter(|v| **v == Verdict::Drop).count();
//! assert!((50..150).contains(&lost), "{lost}");
//! ```
//!
//! [`EndpointConfig::send_impairment`]: crate::EndpointConfig::send_impairment
//! [`EndpointConfig::recv_impairment`]: crate::EndpointConfig::recv_impairment
//! [`ServerConfig`]: crate::ServerConfig
//! [`CounterSnapshot`]: crate::CounterSnapshot

mod decide;
mod impairment;
mod link;

pub use decide::{Conditioner, Verdict};
pub use impairment::{
    is_plain_decimal, Impairment, ImpairmentError, DEFAULT_IMPAIRMENT_LIMIT,
    DEFAULT_IMPAIRMENT_LIMIT_BYTES, DEFAULT_REORDER_DELAY, IMPAIRMENT_KEYS, MAX_IMPAIRMENT_DELAY,
};
pub(crate) use link::Link;

#[cfg(test)]
mod tests;
