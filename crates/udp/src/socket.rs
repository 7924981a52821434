//! UDP socket setup: options applied before bind, non-blocking mode, the
//! kernel drop counter, and the buffer sizes the kernel really granted.
//!
//! socket2 does the work here but never appears in the API: callers get a
//! `mio::net::UdpSocket` ready to register with a reactor.

use std::error::Error;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::sys;

/// Options applied to a UDP socket before it is bound.
///
/// The default changes nothing: the kernel's default buffer sizes, no
/// address or port reuse, the system default for `IPV6_V6ONLY`, and IP
/// fragmentation left to the kernel.
///
/// # Examples
///
/// A server whose lanes ask for 4 MiB receive buffers and never send IP
/// fragments (Linux), for datagrams kept within the path MTU:
///
/// ```
/// use keel_udp::{EndpointConfig, ServerConfig, SocketOptions};
///
/// let config = ServerConfig {
///     endpoint: EndpointConfig {
///         socket: SocketOptions {
///             recv_buffer: Some(4 << 20),
///             dont_fragment: cfg!(target_os = "linux"),
///             ..SocketOptions::default()
///         },
///         ..EndpointConfig::default()
///     },
///     ..ServerConfig::default()
/// };
/// # let _ = config;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// Requested send buffer size in bytes (`SO_SNDBUF`); `None` keeps the
    /// kernel default. Linux caps the request at `net.core.wmem_max`, then
    /// doubles it (for bookkeeping overhead), so up to twice `wmem_max` can
    /// be granted; see [`SocketBuffers`] for what was.
    pub send_buffer: Option<usize>,
    /// Requested receive buffer size in bytes (`SO_RCVBUF`); `None` keeps the
    /// kernel default. Linux caps the request at `net.core.rmem_max`, then
    /// doubles it. Datagrams that arrive while it is full are
    /// dropped by the kernel and counted (`SO_RXQ_OVFL`).
    pub recv_buffer: Option<usize>,
    /// Sets `SO_REUSEADDR`.
    pub reuse_address: bool,
    /// Sets `SO_REUSEPORT`: several sockets bound to the same address and
    /// port share the incoming datagrams (the kernel hashes each flow to one
    /// socket). Used for multiple receive lanes. Not available on every
    /// platform: setting it there fails with `ErrorKind::Unsupported`.
    pub reuse_port: bool,
    /// For IPv6 sockets, `Some(true)` accepts IPv6 only and `Some(false)`
    /// also accepts IPv4 (as IPv4-mapped addresses); `None` keeps the system
    /// default. Ignored for IPv4 sockets.
    pub only_v6: Option<bool>,
    /// Sets Don't Fragment on every datagram sent (Linux:
    /// `IP_MTU_DISCOVER`/`IPV6_MTU_DISCOVER` set to `PMTUDISC_PROBE`): a
    /// datagram larger than the outgoing interface's MTU fails with
    /// `EMSGSIZE` (counted as a send error) instead of leaving in IP
    /// fragments, of which one lost loses the whole datagram. For
    /// protocols that keep their datagrams within the path MTU (keel-rudp
    /// turns it on: 1,200 bytes by default, as QUIC does, RFC 9000 section
    /// 14). It also spares the kernel the IPv4 identification generator
    /// on each send. Off by default (the kernel's choice); elsewhere than
    /// Linux setting it fails with `ErrorKind::Unsupported`.
    pub dont_fragment: bool,
}

/// Socket buffer sizes in bytes as the kernel reports them after setup.
///
/// On Linux this is the doubled, clamped value (`getsockopt` after
/// `setsockopt`), not the requested one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketBuffers {
    /// `SO_SNDBUF` as read back.
    pub send: usize,
    /// `SO_RCVBUF` as read back.
    pub recv: usize,
}

/// Creates a non-blocking UDP socket bound to `addr` with `opts` applied
/// before the bind, and `SO_RXQ_OVFL` enabled where it exists.
///
/// Returns the socket and the buffer sizes the kernel granted. Errors keep
/// their [`io::ErrorKind`] and say what failed, e.g.
/// `setting SO_REUSEPORT on 127.0.0.1:9000: Permission denied (os error 13)`;
/// the original error is the error's [`source`](Error::source).
pub(crate) fn bind(
    addr: SocketAddr,
    opts: &SocketOptions,
) -> io::Result<(mio::net::UdpSocket, SocketBuffers)> {
    bind_with(addr, opts, false)
}

/// [`bind`], also asking for each datagram's local address (`pktinfo`,
/// see [`sys::enable_pktinfo`]) before the bind, so no datagram arrives
/// without it.
fn bind_with(
    addr: SocketAddr,
    opts: &SocketOptions,
    pktinfo: bool,
) -> io::Result<(mio::net::UdpSocket, SocketBuffers)> {
    let what = addr.to_string();
    let socket = configured_socket(addr, opts, &what)?;
    if pktinfo {
        match sys::enable_pktinfo(&socket, addr.is_ipv6()) {
            Err(e) if e.kind() != io::ErrorKind::Unsupported => {
                return Err(context(|| format!("enabling IP_PKTINFO on {what}"))(e));
            }
            _ => {}
        }
    }
    socket
        .bind(&SockAddr::from(addr))
        .map_err(context(|| format!("binding {what}")))?;
    finish(socket, &what)
}

/// Binds the `n` sockets of a server's receive lanes to `addr`: one plain
/// socket for `n == 1`, otherwise a new `SO_REUSEPORT` group of `n`
/// sockets on one port (port 0: the kernel picks it for the first, the
/// others join it). `opts` applies to each socket (`reuse_port` is forced
/// on for `n > 1`).
///
/// Sockets bound to an unspecified address (`0.0.0.0`, `[::]`) report
/// the local address of each datagram (`IP_PKTINFO`/`IPV6_RECVPKTINFO`,
/// Linux), so that a reply can leave from the address the peer sent to
/// (a multi-homed host would otherwise pick the source by route). Sockets
/// bound to one address do not need it and pay nothing.
///
/// A group never joins an existing one: before binding a group to an
/// explicit port, the address is probed with a plain socket (no
/// `SO_REUSEPORT`, no `SO_REUSEADDR`, same `IPV6_V6ONLY`), bound and
/// closed at once. If that fails with `EADDRINUSE` another socket holds the
/// port (maybe another server's lanes, which ours would otherwise join and
/// silently take part of the traffic of), and this fails with `AddrInUse`
/// naming the address.
///
/// Race: between the probe and the group's first bind another socket
/// can still take the port. Another `SO_REUSEPORT` socket of the same user
/// binding in that window (e.g. a second server starting at the same
/// moment) forms one group with ours; anything else makes our bind fail.
/// The window is two system calls wide; the probe is meant to catch a
/// server started twice, not to arbitrate a race.
///
/// Returns the sockets in bind order (the order of the group's members,
/// which lane steering numbers) and the buffer sizes of the first.
pub(crate) fn bind_group(
    addr: SocketAddr,
    opts: &SocketOptions,
    n: usize,
) -> io::Result<(Vec<mio::net::UdpSocket>, SocketBuffers)> {
    let mut opts = opts.clone();
    if n > 1 {
        opts.reuse_port = true;
        if addr.port() != 0 {
            probe_free(addr, &opts)?;
        }
    }
    let pktinfo = addr.ip().is_unspecified();
    let mut sockets = Vec::with_capacity(n);
    let (first, buffers) = bind_with(addr, &opts, pktinfo)?;
    let local = first
        .local_addr()
        .map_err(context(|| format!("reading the address bound for {addr}")))?;
    sockets.push(first);
    for _ in 1..n {
        sockets.push(bind_with(local, &opts, pktinfo)?.0);
    }
    Ok((sockets, buffers))
}

/// Binds and closes a plain socket on `addr` (see [`bind_group`]):
/// `AddrInUse` with an explanation if another socket holds the port.
fn probe_free(addr: SocketAddr, opts: &SocketOptions) -> io::Result<()> {
    let what = addr.to_string();
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(context(|| format!("creating a UDP socket to probe {what}")))?;
    if let (SocketAddr::V6(_), Some(only_v6)) = (addr, opts.only_v6) {
        socket
            .set_only_v6(only_v6)
            .map_err(context(|| format!("setting IPV6_V6ONLY to probe {what}")))?;
    }
    match socket.bind(&SockAddr::from(addr)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(context(|| {
            format!(
                "binding {what}: port {} is already in use by another socket (possibly \
                 another keel server's lanes); a server with lanes > 1 never joins an \
                 existing SO_REUSEPORT group: stop the other one or choose another port",
                addr.port()
            )
        })(e)),
        Err(e) => Err(context(|| format!("binding {what}"))(e)),
    }
}

/// Creates a non-blocking UDP socket connected to `remote`, for a client.
///
/// The socket is bound first to `local`, or, if `None`, to the unspecified
/// address of `remote`'s family with port 0 (the kernel picks the port and,
/// at connect, the source address). `opts` is applied before the bind, as
/// in [`bind`]. A connected socket only receives from `remote`, and an ICMP
/// port unreachable from it surfaces as `ConnectionRefused` on a later call.
///
/// Fails with `InvalidInput` if `local` and `remote` are of different
/// address families.
pub(crate) fn connect(
    local: Option<SocketAddr>,
    remote: SocketAddr,
    opts: &SocketOptions,
) -> io::Result<(mio::net::UdpSocket, SocketBuffers)> {
    let local = local.unwrap_or(match remote {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    });
    let what = format!("{local} -> {remote}");
    if local.is_ipv4() != remote.is_ipv4() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("connecting {what}: local and remote address families differ"),
        ));
    }
    let socket = configured_socket(local, opts, &what)?;
    socket
        .bind(&SockAddr::from(local))
        .map_err(context(|| format!("binding {what}")))?;
    socket
        .connect(&SockAddr::from(remote))
        .map_err(context(|| format!("connecting {what}")))?;
    finish(socket, &what)
}

/// A new UDP socket for `addr`'s family with every option applied that must
/// be set before bind. `what` names the socket in error messages.
fn configured_socket(addr: SocketAddr, opts: &SocketOptions, what: &str) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(context(|| format!("creating UDP socket for {what}")))?;
    if let (SocketAddr::V6(_), Some(only_v6)) = (addr, opts.only_v6) {
        socket
            .set_only_v6(only_v6)
            .map_err(context(|| format!("setting IPV6_V6ONLY on {what}")))?;
    }
    if opts.reuse_address {
        socket
            .set_reuse_address(true)
            .map_err(context(|| format!("setting SO_REUSEADDR on {what}")))?;
    }
    if opts.reuse_port {
        set_reuse_port(&socket).map_err(context(|| format!("setting SO_REUSEPORT on {what}")))?;
    }
    if opts.dont_fragment {
        sys::set_dont_fragment(&socket, addr.is_ipv6()).map_err(context(|| {
            format!("setting Don't Fragment (IP_MTU_DISCOVER) on {what}")
        }))?;
    }
    if let Some(size) = opts.send_buffer {
        socket
            .set_send_buffer_size(size)
            .map_err(context(|| format!("setting SO_SNDBUF to {size} on {what}")))?;
    }
    if let Some(size) = opts.recv_buffer {
        socket
            .set_recv_buffer_size(size)
            .map_err(context(|| format!("setting SO_RCVBUF to {size} on {what}")))?;
    }
    socket
        .set_nonblocking(true)
        .map_err(context(|| format!("setting O_NONBLOCK on {what}")))?;
    match sys::enable_rxq_ovfl(&socket) {
        Err(e) if e.kind() != io::ErrorKind::Unsupported => {
            return Err(context(|| format!("setting SO_RXQ_OVFL on {what}"))(e));
        }
        _ => {}
    }
    Ok(socket)
}

/// Reads back the granted buffer sizes and hands the socket over to mio.
fn finish(socket: Socket, what: &str) -> io::Result<(mio::net::UdpSocket, SocketBuffers)> {
    let buffers = SocketBuffers {
        send: socket
            .send_buffer_size()
            .map_err(context(|| format!("reading SO_SNDBUF of {what}")))?,
        recv: socket
            .recv_buffer_size()
            .map_err(context(|| format!("reading SO_RCVBUF of {what}")))?,
    };
    let std_socket: std::net::UdpSocket = socket.into();
    Ok((mio::net::UdpSocket::from_std(std_socket), buffers))
}

#[cfg(all(
    unix,
    not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))
))]
fn set_reuse_port(socket: &Socket) -> io::Result<()> {
    socket.set_reuse_port(true)
}

#[cfg(not(all(
    unix,
    not(any(target_os = "solaris", target_os = "illumos", target_os = "cygwin"))
)))]
fn set_reuse_port(_socket: &Socket) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SO_REUSEPORT is not available on this platform",
    ))
}

/// An I/O error with a description of the operation that failed.
#[derive(Debug)]
struct Context {
    what: String,
    source: io::Error,
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl Error for Context {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}

/// Wraps an `io::Error` with `what()` as context, keeping its kind.
fn context(what: impl FnOnce() -> String) -> impl FnOnce(io::Error) -> io::Error {
    move |source| {
        io::Error::new(
            source.kind(),
            Context {
                what: what(),
                source,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn localhost_v4() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
    }

    #[test]
    fn bind_reports_granted_buffers() {
        let opts = SocketOptions {
            send_buffer: Some(64 * 1024),
            recv_buffer: Some(64 * 1024),
            ..SocketOptions::default()
        };
        let (socket, buffers) = bind(localhost_v4(), &opts).unwrap();
        assert_ne!(socket.local_addr().unwrap().port(), 0);
        if cfg!(target_os = "linux") {
            // Linux doubles the request (it stays below the usual maxima).
            assert_eq!(buffers.send, 128 * 1024);
            assert_eq!(buffers.recv, 128 * 1024);
        } else {
            assert!(buffers.send >= 64 * 1024 && buffers.recv >= 64 * 1024);
        }
    }

    #[test]
    fn bind_in_use_error_names_the_address_and_keeps_kind() {
        let (first, _) = bind(localhost_v4(), &SocketOptions::default()).unwrap();
        let addr = first.local_addr().unwrap();
        let err = bind(addr, &SocketOptions::default()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("binding {addr}: ")), "{msg}");
        let source = err.get_ref().and_then(|e| e.source()).unwrap();
        let os = source.downcast_ref::<io::Error>().unwrap();
        assert_eq!(os.raw_os_error(), Some(libc::EADDRINUSE));
    }

    #[test]
    fn reuse_port_lets_sockets_share_a_port() {
        let opts = SocketOptions {
            reuse_port: true,
            ..SocketOptions::default()
        };
        let (first, _) = bind(localhost_v4(), &opts).unwrap();
        let addr = first.local_addr().unwrap();
        let (second, _) = bind(addr, &opts).unwrap();
        assert_eq!(second.local_addr().unwrap(), addr);
    }

    #[test]
    fn bind_group_shares_one_port_and_never_joins_another_group() {
        let opts = SocketOptions::default();
        let (group, _) = bind_group(localhost_v4(), &opts, 3).unwrap();
        let addr = group[0].local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        assert!(group.iter().all(|s| s.local_addr().unwrap() == addr));
        // A second group on that port is refused before it binds anything.
        let err = bind_group(addr, &opts, 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err
            .to_string()
            .starts_with(&format!("binding {addr}: port ")));
        // Also with reuse options asked for: the probe sets none of them.
        let reuse = SocketOptions {
            reuse_address: true,
            reuse_port: true,
            ..SocketOptions::default()
        };
        assert_eq!(
            bind_group(addr, &reuse, 2).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        // A free explicit port works.
        drop(group);
        let (again, _) = bind_group(addr, &opts, 2).unwrap();
        assert_eq!(again[1].local_addr().unwrap(), addr);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn dont_fragment_is_set_only_when_asked_on_both_families() {
        let df = SocketOptions {
            dont_fragment: true,
            ..SocketOptions::default()
        };
        for addr in [localhost_v4(), SocketAddr::from((Ipv6Addr::LOCALHOST, 0))] {
            let (plain, _) = bind(addr, &SocketOptions::default()).unwrap();
            assert!(!sys::dont_fragment(&plain).unwrap(), "{addr}");
            let (set, _) = bind(addr, &df).unwrap();
            assert!(sys::dont_fragment(&set).unwrap(), "{addr}");
            let (client, _) = connect(None, set.local_addr().unwrap(), &df).unwrap();
            assert!(sys::dont_fragment(&client).unwrap(), "{addr}");
            // Datagrams still flow (DF within the interface's MTU).
            client.send(&[7; 1200]).unwrap();
            let mut buf = [0u8; 1500];
            let n = loop {
                match set.recv_from(&mut buf) {
                    Ok((n, _)) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            };
            assert_eq!(n, 1200);
        }
    }

    #[test]
    fn ipv6_only_v6() {
        let opts = SocketOptions {
            only_v6: Some(true),
            ..SocketOptions::default()
        };
        let (socket, _) = bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0)), &opts).unwrap();
        assert!(socket.local_addr().unwrap().is_ipv6());
        // Ignored for IPv4.
        bind(localhost_v4(), &opts).unwrap();
    }

    #[test]
    fn connect_binds_unspecified_and_talks_to_peer() {
        let (server, _) = bind(localhost_v4(), &SocketOptions::default()).unwrap();
        let server_addr = server.local_addr().unwrap();
        let (client, _) = connect(None, server_addr, &SocketOptions::default()).unwrap();
        let client_addr = client.local_addr().unwrap();
        assert_eq!(client_addr.ip(), Ipv4Addr::LOCALHOST);
        assert_ne!(client_addr.port(), 0);
        assert_eq!(client.peer_addr().unwrap(), server_addr);

        client.send(b"ping").unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = recv_retry(|| server.recv_from(&mut buf));
        assert_eq!((&buf[..n], from), (&b"ping"[..], client_addr));
    }

    #[test]
    fn connect_rejects_mixed_families() {
        let err = connect(
            Some(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 9)),
            &SocketOptions::default(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    /// Retries a non-blocking call for up to a second (loopback delivery is
    /// asynchronous with respect to the sender only in rare cases).
    fn recv_retry<T>(mut f: impl FnMut() -> io::Result<T>) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match f() {
                Ok(v) => return v,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "timed out");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}
