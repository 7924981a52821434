//! keel-peers: the echo peers of issue 22, one binary `keel-peer`, one
//! harness, one small adapter per library.
//!
//! The harness (this crate's [`flags`], [`load`], [`server`], [`stats`])
//! owns everything that must be the same for every library: the command
//! line, the open-loop load and its clock, the payload, latency
//! recording, CPU (getrusage, whole process) and RSS, and the JSON lines
//! (their fields are in /work/wt/notes/peers-interface.md, the contract
//! with `keel-bench relay` and scripts/rudp-peers.sh). A library adapter
//! only moves bytes.
//!
//! # The library interface
//!
//! A library is one [`Library`] value in [`libraries`]: a name and two
//! constructors.
//!
//! * **Server**: `server(&ServerArgs, Arc<Tally>)` binds `--bind` and
//!   returns a [`EchoServer`]. The harness prints `ready ADDR` (from
//!   [`EchoServer::local_addr`]) and then calls [`EchoServer::pump`] with
//!   a timeout of at most [`SERVER_PUMP_MAX`] until SIGINT/SIGTERM. In
//!   `pump` the library runs (waits on its socket, services its timers)
//!   and echoes every message it receives, unchanged, to the connection it
//!   came from on the channel it came on, and tells the [`Tally`]:
//!   [`Tally::connected`] / [`Tally::disconnected`] for connections (a
//!   connectionless library: a new peer address is a connection), and
//!   [`Tally::echoed`] once per message echoed. The tally is `Sync`: a
//!   library that runs threads or tasks of its own may call it from them.
//!   The server serves both channels (reliable-ordered and unreliable) at
//!   once: it is not told which one the clients use.
//! * **Clients**: `clients(&ClientArgs, deadline)` creates
//!   `--clients` connections to `--connect`, **each with its own UDP
//!   socket** (so the relay sees one flow per client), and returns once
//!   all are connected, or an error at `deadline`. The harness then drives
//!   the load through [`Clients`]: [`Clients::send`] one message on client
//!   `i` on the run's channel, [`Clients::pump`] to run the library until
//!   a given instant (returning earlier is fine) and hand every received
//!   message to the harness's callback, [`Clients::close`] at the end.
//!   The harness timestamps a message when `send` is called and its echo
//!   when `pump`'s callback sees it: a library that queues sends until its
//!   next service call, or delivers from a thread of its own through a
//!   queue, pays for that in the latency, as a game would. A library
//!   whose game loop would run on its own event loop (keel-rudp's
//!   `Handler::tick`) says so ([`Clients::ticks_itself`]) and runs the
//!   same schedule itself through the harness's [`OpenLoop`]
//!   ([`Clients::run_ticks`]): the same due times, payloads, timestamps
//!   (taken by the `OpenLoop` when the tick sends, and when the handler
//!   hands it the echo) and records.
//!
//! Both constructors also return a [`Description`]: the settings in words
//! (every knob that differs from the library's defaults, and the ones that
//! decide the result; written next to the figures) and how the library is
//! pumped (e.g. "enet_host_service 1 ms").
//!
//! Rules for an adapter: no panics on network input; every queue it holds
//! is bounded (or bounded by the harness's load); a send the library
//! refuses is not an error (the message is simply lost, and counted as
//! lost by the harness); errors are `String`s naming the library and the
//! call.
//!
//! `unsafe` lives only in `sys` modules ([`sys`] for getrusage and sysconf, and one per
//! C library: [`ikcp::sys`], `enet::sys`, `gns::sys`); the crate root denies it everywhere else.

#![deny(unsafe_code)]

pub mod flags;
#[cfg(feature = "gns")]
pub mod gns;
pub mod load;
pub mod pump;
pub mod server;
pub mod stats;
pub mod sys;

pub mod ikcp;
pub mod kcp_peer;
pub mod keel;
pub mod quinn_peer;

#[cfg(feature = "enet")]
pub mod enet;
#[cfg(feature = "renet")]
pub mod renet_peer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use flags::{Channel, ClientArgs, ServerArgs};
pub use load::OpenLoop;
pub use server::Tally;

/// The longest [`EchoServer::pump`] timeout the harness passes (so a
/// signal is noticed within it).
pub const SERVER_PUMP_MAX: Duration = Duration::from_millis(10);

/// A library's settings and pump, in words, for the JSON lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Description {
    /// The settings: tuning knobs and the defaults that matter
    /// (`"nodelay 2, interval 10, resend 2, nc 1, minrto 10"`).
    pub settings: String,
    /// How the library is run (`"enet_host_service 1 ms"`).
    pub pump: String,
}

/// A library's echo server.
pub trait EchoServer {
    /// The address it is bound to (printed as `ready ADDR`).
    fn local_addr(&self) -> SocketAddr;

    /// Runs the library for at most `timeout` (it may return earlier),
    /// echoing every message received to its sender, on its channel,
    /// unchanged, and reporting to the [`Tally`] it was created with.
    ///
    /// # Errors
    ///
    /// A failure of the library that ends the server, in words.
    fn pump(&mut self, timeout: Duration) -> Result<(), String>;
}

/// A library's clients, driven by the harness's load ([`load`]).
pub trait Clients {
    /// Sends `msg` from client `i` (0-based) on the run's channel. A send
    /// the library refuses is `Ok` (the message is lost).
    ///
    /// # Errors
    ///
    /// A failure that ends the run.
    fn send(&mut self, i: usize, msg: &[u8]) -> Result<(), String>;

    /// Runs the library until `until` (returning earlier is fine) and calls
    /// `deliver(i, msg)` for each message client `i` received.
    ///
    /// # Errors
    ///
    /// A failure that ends the run.
    fn pump(&mut self, until: Instant, deliver: &mut dyn FnMut(usize, &[u8]))
        -> Result<(), String>;

    /// Closes every connection (bounded in time: a second or so).
    fn close(&mut self);

    /// Whether the clients send on ticks of their own, as a game's loop
    /// on the library's event loop would (keel-rudp's `Handler::tick`):
    /// then the harness calls [`Clients::run_ticks`] instead of
    /// [`Clients::send`] and [`Clients::pump`]. The default: `false`.
    fn ticks_itself(&self) -> bool {
        false
    }

    /// Runs the whole of `load` (called only if [`Clients::ticks_itself`]):
    /// each client sends its messages at their due times
    /// ([`OpenLoop::due`], [`OpenLoop::send`]), every echo goes to
    /// [`OpenLoop::received`], until [`OpenLoop::finished`]; returns the
    /// load with its records.
    ///
    /// # Errors
    ///
    /// A failure that ends the run (the default: this library has no
    /// ticks of its own).
    fn run_ticks(&mut self, load: OpenLoop) -> Result<OpenLoop, String> {
        let _ = load;
        Err("this library does not send on ticks of its own".into())
    }

    /// The library's own counters summed over the clients (resends,
    /// probes...), for the client's line as `library_stats`; `None` (the
    /// default) if the library has none or they were not asked for.
    fn stats(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Creates a library's echo server bound to `args.bind`.
pub type ServerFn =
    fn(&ServerArgs, Arc<Tally>) -> Result<(Box<dyn EchoServer>, Description), String>;

/// Creates and connects a library's clients; fails at the deadline.
pub type ClientsFn = fn(&ClientArgs, Instant) -> Result<(Box<dyn Clients>, Description), String>;

/// One library: its `LIB` name and constructors.
pub struct Library {
    /// `LIB` on the command line.
    pub name: &'static str,
    /// The server's constructor.
    pub server: ServerFn,
    /// The clients' constructor.
    pub clients: ClientsFn,
}

/// The libraries built into this binary.
pub fn libraries() -> Vec<Library> {
    #[allow(unused_mut)]
    let mut libs = vec![
        Library {
            name: "keel",
            server: keel::server,
            clients: keel::clients,
        },
        Library {
            name: "kcp",
            server: kcp_peer::server::<kcp_peer::CrateKcp>,
            clients: kcp_peer::clients::<kcp_peer::CrateKcp>,
        },
        Library {
            name: "ikcp",
            server: kcp_peer::server::<ikcp::Ikcp>,
            clients: kcp_peer::clients::<ikcp::Ikcp>,
        },
        Library {
            name: "quinn",
            server: quinn_peer::server,
            clients: quinn_peer::clients_stream,
        },
        Library {
            name: "quinn-streams",
            server: quinn_peer::server,
            clients: quinn_peer::clients_streams,
        },
    ];
    #[cfg(feature = "enet")]
    libs.push(Library {
        name: "enet",
        server: enet::server,
        clients: enet::clients,
    });
    #[cfg(feature = "renet")]
    libs.push(Library {
        name: "renet",
        server: renet_peer::server,
        clients: renet_peer::clients,
    });
    #[cfg(feature = "gns")]
    libs.push(gns::library());
    libs
}
