//! Local ports for the clients of a run whose server steers by peer port
//! ([`PortPicker`]).

use std::io;
use std::net::SocketAddr;

use keel_udp::{Client, ClientConfig, LaneSteering};

use crate::client::BenchClient;
use crate::flags::RunConfig;

/// Chooses each client's local port when the server steers by peer port:
/// a client on context `c` gets a port `p` with `p % lanes` = a lane that
/// runs on context `c` (lane `j` runs on context `j % contexts`), so its
/// datagrams and their echoes stay on one core. Otherwise the kernel picks
/// the port.
pub(super) struct PortPicker {
    lanes: u16,
    contexts: usize,
    ip: std::net::IpAddr,
    target: SocketAddr,
    next: u16,
    enabled: bool,
}

/// Tries before giving up on finding a free port for one client.
const PORT_TRIES: usize = 4096;

impl PortPicker {
    pub(super) fn new(cfg: &RunConfig, steering: LaneSteering, target: SocketAddr) -> PortPicker {
        let lanes = cfg.server_lanes as u16;
        PortPicker {
            lanes,
            contexts: cfg.io_contexts() as usize,
            ip: cfg.address_family.loopback(),
            target,
            // Spread concurrent runs over the range (bind failures retry).
            next: 20_000 + (std::process::id() % 10_000) as u16 * 2,
            enabled: steering == LaneSteering::PeerPort && lanes > 1 && cfg.connect.is_none(),
        }
    }

    pub(super) fn connect(
        &mut self,
        context: usize,
        reactor: &keel_reactor::Handle,
        mut config: ClientConfig,
        handler: impl Fn() -> BenchClient,
    ) -> io::Result<Client<BenchClient>> {
        if !self.enabled {
            return Client::connect(reactor, self.target, config, handler());
        }
        // A lane on this context if there is one, else any (cross-core).
        let lane = (0..self.lanes as usize)
            .find(|j| j % self.contexts == context)
            .unwrap_or(context % self.lanes as usize) as u16;
        let mut last = None;
        for _ in 0..PORT_TRIES {
            let mut port = self.next - self.next % self.lanes + lane;
            if port < self.next {
                port += self.lanes;
            }
            self.next = if port > 60_000 { 20_000 } else { port + 1 };
            config.local = Some(SocketAddr::new(self.ip, port));
            match Client::connect(reactor, self.target, config.clone(), handler()) {
                Ok(client) => return Ok(client),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free port")))
    }
}
