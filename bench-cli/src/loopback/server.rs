//! The echo server of a run and of `serve`: the runtime for an IO model,
//! the server's settings ([`EchoServerSpec`], [`SessionPolicy`]) and
//! [`start_server`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use keel_reactor::{IoModel as KeelModel, Runtime};
use keel_udp::{
    EndpointConfig, FullPolicy, Impairment, LaneSteering, Server, ServerConfig, SocketOptions,
};

use crate::echo::{Echo, EchoMode, EchoStats};
use crate::flags::IoModel;
use crate::output::{UDP_RECEIVE_BUFFER_REQUEST, UDP_SEND_BUFFER_REQUEST};

/// The keel runtime for `--io-model` and `--io-threads`.
pub fn runtime_for(model: IoModel, threads: u32) -> io::Result<Runtime> {
    let threads = threads as usize;
    Runtime::new(match model {
        IoModel::Shared => KeelModel::Shared { threads },
        IoModel::Sharded => KeelModel::Sharded { reactors: threads },
    })
}

/// How to set up the echo server of a run or of `serve`.
#[derive(Clone, Debug)]
pub struct EchoServerSpec {
    /// Address to bind (port 0 picks one).
    pub bind: SocketAddr,
    /// `--server-lanes`.
    pub lanes: u32,
    /// `--batch`.
    pub batch: u32,
    /// `--udp-server-receive-buffer`; `None` = the 4 MiB request.
    pub receive_buffer: Option<u64>,
    /// `--work`.
    pub work: u64,
    /// What the server answers.
    pub mode: EchoMode,
    /// How datagrams spread over the lanes.
    pub steering: LaneSteering,
    /// Session timeout and table bound.
    pub sessions: SessionPolicy,
    /// `--dont-fragment`: the sockets set Don't Fragment.
    pub dont_fragment: bool,
}

/// How the echo server treats its sessions (one per peer address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionPolicy {
    /// Sessions idle this long end; `None` keeps them until the server
    /// stops.
    pub idle_timeout: Option<Duration>,
    /// Sessions per lane at most.
    pub max_sessions: usize,
    /// What a full lane does with a new peer.
    pub full_policy: FullPolicy,
}

impl Default for SessionPolicy {
    /// The in-process server of a run: no idle timeout, keel's table bound,
    /// `Refuse`. It lives on the loopback address for one run only and its
    /// peers are the run's own clients (at most 1,024, far below the
    /// bound), so no source can fill its table; and a client whose window
    /// slot waits for a lost echo keeps its session without a timer
    /// sweeping the lanes being measured. `serve`, which faces unknown
    /// peers, sets its own (`--idle-timeout`, `--max-sessions`,
    /// `--full-policy`).
    fn default() -> Self {
        SessionPolicy {
            idle_timeout: None,
            max_sessions: ServerConfig::default().max_sessions,
            full_policy: FullPolicy::Refuse,
        }
    }
}

/// Starts the echo server described by `spec` on `rt`.
pub fn start_server(
    rt: &Runtime,
    spec: &EchoServerSpec,
    stats: Arc<EchoStats>,
) -> io::Result<Server<Echo>> {
    start_server_impaired(rt, spec, None, stats)
}

/// As [`start_server`], with a link conditioner on the server's send path
/// (`--impair-server`; `None` = off).
pub fn start_server_impaired(
    rt: &Runtime,
    spec: &EchoServerSpec,
    send_impairment: Option<Impairment>,
    stats: Arc<EchoStats>,
) -> io::Result<Server<Echo>> {
    let EchoServerSpec {
        bind,
        lanes,
        batch,
        receive_buffer,
        work,
        mode,
        steering,
        sessions,
        dont_fragment,
    } = spec.clone();
    let mut config = ServerConfig {
        lanes: lanes as usize,
        steering,
        endpoint: EndpointConfig {
            batch: batch as usize,
            socket: SocketOptions {
                send_buffer: Some(UDP_SEND_BUFFER_REQUEST as usize),
                recv_buffer: Some(receive_buffer.unwrap_or(UDP_RECEIVE_BUFFER_REQUEST) as usize),
                dont_fragment,
                ..SocketOptions::default()
            },
            send_impairment,
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    config.idle_timeout = sessions.idle_timeout;
    config.max_sessions = sessions.max_sessions;
    config.full_policy = sessions.full_policy;
    Server::bind(rt.handles(), bind, config, move |_| {
        Echo::new(work, mode, stats.clone())
    })
}
