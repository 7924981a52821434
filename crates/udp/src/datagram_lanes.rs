//! A group of datagram sockets sharing one port, one lane each: for
//! protocols that route by their own connection IDs rather than by address
//! (no sessions: nothing is allocated per source).

use std::io;
use std::net::SocketAddr;

use keel_reactor::Handle;

use crate::config::LanesConfig;
use crate::counters::CounterSnapshot;
use crate::datagram_socket::{DatagramSocket, DatagramSocketCtx, DatagramSocketHandler};
use crate::endpoint;
use crate::socket::SocketBuffers;

/// The sockets of a group made by [`DatagramSocket::bind_lanes`], in lane
/// order. `Send + Sync + Clone`.
pub struct DatagramSockets<H: DatagramSocketHandler> {
    lanes: Vec<DatagramSocket<H>>,
}

impl<H: DatagramSocketHandler> Clone for DatagramSockets<H> {
    fn clone(&self) -> Self {
        DatagramSockets {
            lanes: self.lanes.clone(),
        }
    }
}

impl<H: DatagramSocketHandler> std::fmt::Debug for DatagramSockets<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatagramSockets")
            .field("local", &self.local_addr())
            .field("lanes", &self.lanes.len())
            .finish()
    }
}

impl<H: DatagramSocketHandler> DatagramSocket<H> {
    /// Binds `config.lanes` sockets to `addr` with `SO_REUSEPORT` (one
    /// port for all; port 0 picks one) and starts one lane per socket,
    /// placed round-robin over `reactors`. `handler(i)` makes lane `i`'s
    /// handler; [`DatagramSocketCtx::lane`](crate::DatagramSocketCtx::lane)
    /// tells it its index. On a wildcard address each datagram's local
    /// address is reported ([`DatagramSocketCtx::arrived_at`](crate::DatagramSocketCtx::arrived_at)).
    ///
    /// Datagrams are spread by `config.steering`; with
    /// [`LaneSteering::PayloadByte`](crate::LaneSteering::PayloadByte) a protocol picks the lane by writing
    /// its index into its packets.
    ///
    /// # Examples
    ///
    /// ```
    /// use keel_reactor::{IoModel, Runtime};
    /// use keel_udp::{DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, LaneSteering, LanesConfig};
    /// use std::net::SocketAddr;
    ///
    /// /// Answers every datagram with the index of the lane that got it.
    /// struct WhichLane;
    /// impl DatagramSocketHandler for WhichLane {
    ///     fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, _: &[u8]) {
    ///         let lane = ctx.lane() as u8;
    ///         let _ = ctx.send_to(from, &[lane]);
    ///     }
    /// }
    ///
    /// let rt = Runtime::new(IoModel::Shared { threads: 1 })?;
    /// let config = LanesConfig {
    ///     lanes: 2,
    ///     steering: LaneSteering::PayloadByte {
    ///         offset: 1,
    ///         hash_if_first_byte_has: 0x80,
    ///         hash_source_ip: None,
    ///     },
    ///     ..LanesConfig::default()
    /// };
    /// let group = DatagramSocket::bind_lanes(rt.handles(), "127.0.0.1:0".parse()?, config, |_| WhichLane)?;
    /// let peer = std::net::UdpSocket::bind("127.0.0.1:0")?;
    /// peer.send_to(&[0x40, 1], group.local_addr())?; // byte 1 names lane 1
    /// let mut buf = [0u8; 4];
    /// let n = peer.recv(&mut buf)?;
    /// # #[cfg(target_os = "linux")]
    /// assert_eq!(&buf[..n], &[1]);
    /// group.close();
    /// rt.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a bad config (naming the field and what is
    /// accepted) or an empty `reactors`; `Unsupported` for a steering
    /// program off Linux; the OS error of socket setup, naming the address
    /// and the step that failed.
    pub fn bind_lanes(
        reactors: &[Handle],
        addr: SocketAddr,
        config: LanesConfig,
        mut handler: impl FnMut(usize) -> H,
    ) -> io::Result<DatagramSockets<H>> {
        config.validate()?;
        endpoint::check_reactors(reactors)?;
        let (sockets, buffers) =
            endpoint::bind_lanes(addr, &config.endpoint.socket, config.lanes, config.steering)?;
        let mut group = DatagramSockets {
            lanes: Vec::with_capacity(config.lanes),
        };
        for (i, sock) in sockets.into_iter().enumerate() {
            let reactor = &reactors[i % reactors.len()];
            match DatagramSocket::start(reactor, sock, buffers, &config.endpoint, i, handler(i)) {
                Ok(s) => group.lanes.push(s),
                Err(e) => {
                    group.close();
                    return Err(e);
                }
            }
        }
        Ok(group)
    }
}

impl<H: DatagramSocketHandler> DatagramSockets<H> {
    /// Lanes in the group.
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Lane `lane`'s socket (post to it, send from it, read its counters).
    pub fn lane(&self, lane: usize) -> Option<&DatagramSocket<H>> {
        self.lanes.get(lane)
    }

    /// The address every socket of the group is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.lanes[0].local_addr()
    }

    /// The socket buffer sizes the kernel granted (the first socket's).
    pub fn buffers(&self) -> SocketBuffers {
        self.lanes[0].buffers()
    }

    /// The counters of all lanes, added up.
    pub fn counters(&self) -> CounterSnapshot {
        self.lanes
            .iter()
            .fold(CounterSnapshot::default(), |acc, s| acc + s.counters())
    }

    /// Closes every lane (after what already arrived is handled).
    pub fn close(&self) {
        for s in &self.lanes {
            s.close();
        }
    }

    /// Closes every lane like [`close`](Self::close), each after running
    /// `f` with its handler and context
    /// ([`DatagramSocket::close_with`]).
    pub fn close_with<F>(&self, f: F)
    where
        F: Fn(&mut H, &mut DatagramSocketCtx<'_>) + Clone + Send + 'static,
    {
        for s in &self.lanes {
            s.close_with(f.clone());
        }
    }

    /// Whether every lane has closed.
    pub fn is_closed(&self) -> bool {
        self.lanes.iter().all(|s| s.lane.is_closed())
    }
}
