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
//! The fate of every datagram on a conditioned path (dropped, held for how
//! long, held back to be reordered, duplicated) is decided by keel's one
//! impairment model, the keel-impair crate ([`keel_impair::Conditioner`],
//! five draws of a seeded SplitMix64 per datagram), the same model
//! keel-rudp's simulator uses; its docs have the exact rules. In short:
//!
//! * **loss**: with probability `loss` it is dropped (counted in
//!   `conditioner_dropped`). A send still returns `Ok`, as on a real network.
//! * **delay and jitter**: it is held for `delay` plus a uniform offset in
//!   `[-jitter, +jitter]` (so `jitter <= delay`); a jitter larger than the
//!   gap between two datagrams reorders them, as on a real link.
//! * **reorder**: with probability `reorder` it is held for a further
//!   `reorder_delay` (counted in `conditioner_reordered`). A datagram is
//!   only seen out of order if another one follows within `reorder_delay`:
//!   a ping-pong with one datagram in flight is only delayed.
//! * **duplicate**: with probability `duplicate` a second copy follows with
//!   its own jitter (no reorder delay; counted in `conditioner_duplicated`).
//!
//! What this module adds is the path: a copy with a total delay of zero goes on at once (through the normal
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
//! socket or server lane 0 decides exactly as
//! [`keel_impair::Conditioner::new`] on the same [`Impairment`]. Server lane `i` uses stream `i` of the seed, and a
//! socket's receive path uses streams of its own, so one seed gives
//! independent decisions per lane and per direction.
//!
//! # Examples
//!
//! The textual shape (keel-bench's `--impair` takes it; keel-impair
//! documents all of it):
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
//! // Seed 42 keeps the first datagram (keel_impair::Conditioner says so).
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
//! [`EndpointConfig::send_impairment`]: crate::EndpointConfig::send_impairment
//! [`EndpointConfig::recv_impairment`]: crate::EndpointConfig::recv_impairment
//! [`ServerConfig`]: crate::ServerConfig
//! [`CounterSnapshot`]: crate::CounterSnapshot

mod link;

pub use keel_impair::{Impairment, ImpairmentError};
pub(crate) use link::Link;

#[cfg(test)]
mod tests;
