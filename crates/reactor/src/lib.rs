//! keel-reactor: a thin event loop over mio, with serialized lanes, timers,
//! cross-thread posting, and a runtime with two IO models.
//!
//! # Goals
//!
//! * See every system call: one `epoll_wait` per turn, one eventfd write per
//!   wake (skipped when one is pending), nothing hidden behind an async
//!   runtime. A game loop can own its thread and call [`Reactor::turn`].
//! * Serialization as a guarantee: a [`Lane`] owns its state, its handlers
//!   get `&mut` to it, and the lane's state machine guarantees it never runs
//!   on two threads at once, even when many threads drive one reactor.
//! * Nothing lost: readiness that arrives while a lane runs makes it run
//!   again; a lane that stops early for fairness ([`Flow::Yielded`]) goes
//!   back on the run queue itself; a stale token never reaches a slot's next
//!   owner.
//! * Timers that keep time: drift-free periodic timers (a 60 Hz tick fires
//!   600 times in 10 s) and poll timeouts rounded *up* to whole
//!   milliseconds, so a sub-millisecond timer never makes the loop spin.
//!   A timer moves in place ([`LaneCtx::set_timer`], earlier or later, in
//!   O(log n)): a lane that follows a moving deadline keeps one timer
//!   ([`LaneCtx::reusable_timer`]), and the queue holds one entry per live
//!   timer however often timers move or are cancelled.
//! * Bounded under overload: a lane's inbox holds at most
//!   [`LaneOptions::max_posts`] closures ([`LaneHandle::post`] says
//!   [`PostError::Full`] beyond), a late periodic timer fires at most
//!   [`MAX_CATCH_UP`] ticks per turn ([`MissedTicks`]), and a stopped
//!   reactor drops what is still queued instead of running it (counted by
//!   [`Handle::discarded_posts`]). A lane may contain its own panics
//!   ([`LaneOptions::contain_panics`]).
//!
//! # Non-goals
//!
//! * Futures and `async`: handlers are plain functions called on readiness.
//! * Work stealing: a lane lives on the reactor it was added to.
//! * Portability beyond what mio offers; token packing assumes 64-bit
//!   `usize`.
//!
//! # Example
//!
//! A lane that owns a UDP socket and echoes what it receives, on a reactor
//! driven by this thread:
//!
//! ```
//! use keel_reactor::{Flow, Lane, LaneCtx, Reactor, Ready, SourceId};
//! use mio::net::UdpSocket;
//! use mio::Interest;
//! use std::time::Duration;
//!
//! struct Echo {
//!     socket: UdpSocket,
//!     echoed: usize,
//! }
//!
//! impl Lane for Echo {
//!     fn on_ready(&mut self, _cx: &mut LaneCtx<'_, Self>, _id: SourceId, _r: Ready) -> Flow {
//!         let mut buf = [0u8; 1500];
//!         // Edge-triggered: drain until WouldBlock.
//!         while let Ok((n, from)) = self.socket.recv_from(&mut buf) {
//!             let _ = self.socket.send_to(&buf[..n], from);
//!             self.echoed += 1;
//!         }
//!         Flow::Drained
//!     }
//! }
//!
//! let mut reactor = Reactor::new()?;
//! let socket = UdpSocket::bind("127.0.0.1:0".parse().unwrap())?;
//! let server = socket.local_addr()?;
//! let (lane, registered) = reactor.handle().add_lane_with(
//!     Echo { socket, echoed: 0 },
//!     |echo, cx| cx.register(&mut echo.socket, Interest::READABLE),
//! );
//! registered?;
//!
//! let client = std::net::UdpSocket::bind("127.0.0.1:0")?;
//! client.send_to(b"ping", server)?;
//! let (tx, rx) = std::sync::mpsc::channel();
//! while rx.try_recv().is_err() {
//!     reactor.turn(Some(Duration::from_millis(100)))?;
//!     let tx = tx.clone();
//!     lane.post(move |echo, _| if echo.echoed > 0 { tx.send(()).unwrap() });
//! }
//! let mut buf = [0u8; 16];
//! let (n, _) = client.recv_from(&mut buf)?;
//! assert_eq!(&buf[..n], b"ping");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Portability
//!
//! Linux is the tier the project measures on (epoll). Everything here uses
//! only mio's portable API, so other mio platforms should work, untested.

#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

// Modules, in dependency order: each uses only those above it
// (`scripts/import-cycles.py` checks that no two depend on each other).
//
// Leaves: small shared types and helpers.
mod error;
mod ready;
mod slab;
mod source;
mod sync;
mod timer;
// The reactor's shared state and its loops; knows lanes only as `LaneTask`.
mod core;
// Lanes on top of the core.
mod lane;
// The reactor's own lane (posted closures, closure timers): a lane.
mod reactor_lane;
// The public entry points, on top of everything.
mod handle;
mod reactor;
mod runtime;

pub use error::{Error, PostError};
pub use handle::Handle;
pub use lane::{Flow, Lane, LaneCtx, LaneHandle, LaneOptions, DEFAULT_MAX_POSTS};
pub use reactor::Reactor;
pub use ready::Ready;
pub use runtime::{IoModel, Runtime, RuntimeOptions};
pub use source::SourceId;
pub use timer::{MissedTicks, TimerError, TimerId, MAX_CATCH_UP, MIN_PERIOD};

/// mio's interest type, re-exported for [`LaneCtx::register`].
pub use mio::Interest;
