//! ENet 1.3's C API (Debian's libenet-dev, `-lenet`): the declarations
//! this peer uses and safe wrappers over them. The only unsafe code of the
//! ENet peer; each block says why it holds.
//!
//! Layouts are ENet 1.3.17's `enet/enet.h` on Unix: `ENetAddress` (host in
//! network byte order, port in host order), `ENetPacket`, `ENetEvent`; of
//! `ENetHost` only its first two fields (`socket`, `address`), read through
//! a prefix struct; `ENetPeer` stays opaque.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// `ENetAddress`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ENetAddress {
    host: u32,
    port: u16,
}

/// `ENetPacket`.
#[repr(C)]
struct ENetPacket {
    reference_count: usize,
    flags: u32,
    data: *mut u8,
    data_length: usize,
    free_callback: Option<extern "C" fn(*mut ENetPacket)>,
    user_data: *mut std::ffi::c_void,
}

/// `ENetEvent`.
#[repr(C)]
struct ENetEvent {
    kind: c_int,
    peer: *mut ENetPeer,
    channel_id: u8,
    data: u32,
    packet: *mut ENetPacket,
}

/// The first fields of `ENetHost`: `ENetSocket socket` (an int on Unix)
/// and `ENetAddress address`.
#[repr(C)]
struct ENetHostPrefix {
    socket: c_int,
    address: ENetAddress,
}

/// `ENetHost`, opaque.
#[repr(C)]
struct ENetHost {
    _private: [u8; 0],
}

/// `ENetPeer`, opaque.
#[repr(C)]
struct ENetPeer {
    _private: [u8; 0],
}

const ENET_EVENT_TYPE_CONNECT: c_int = 1;
const ENET_EVENT_TYPE_DISCONNECT: c_int = 2;
const ENET_EVENT_TYPE_RECEIVE: c_int = 3;

/// `ENET_PACKET_FLAG_RELIABLE`.
pub const FLAG_RELIABLE: u32 = 1 << 0;
/// `ENET_PACKET_FLAG_UNSEQUENCED`.
pub const FLAG_UNSEQUENCED: u32 = 1 << 1;

#[link(name = "enet")]
extern "C" {
    fn enet_initialize() -> c_int;
    fn enet_host_create(
        address: *const ENetAddress,
        peer_count: usize,
        channel_limit: usize,
        incoming_bandwidth: u32,
        outgoing_bandwidth: u32,
    ) -> *mut ENetHost;
    fn enet_host_destroy(host: *mut ENetHost);
    fn enet_host_connect(
        host: *mut ENetHost,
        address: *const ENetAddress,
        channel_count: usize,
        data: u32,
    ) -> *mut ENetPeer;
    fn enet_host_service(host: *mut ENetHost, event: *mut ENetEvent, timeout: u32) -> c_int;
    fn enet_host_flush(host: *mut ENetHost);
    fn enet_packet_create(data: *const std::ffi::c_void, len: usize, flags: u32)
        -> *mut ENetPacket;
    fn enet_packet_destroy(packet: *mut ENetPacket);
    fn enet_peer_send(peer: *mut ENetPeer, channel_id: u8, packet: *mut ENetPacket) -> c_int;
    fn enet_peer_disconnect(peer: *mut ENetPeer, data: u32);
}

static INIT: OnceLock<c_int> = OnceLock::new();

/// `enet_initialize`, once per process.
pub fn initialize() -> Result<(), String> {
    // SAFETY: enet_initialize has no preconditions; OnceLock runs it once.
    let rc = *INIT.get_or_init(|| unsafe { enet_initialize() });
    if rc != 0 {
        return Err(format!("enet_initialize failed ({rc})"));
    }
    Ok(())
}

fn address(addr: SocketAddr) -> Result<ENetAddress, String> {
    match addr {
        SocketAddr::V4(a) => Ok(ENetAddress {
            host: u32::from_ne_bytes(a.ip().octets()),
            port: a.port(),
        }),
        SocketAddr::V6(_) => Err(format!("enet: {addr}: ENet 1.3 is IPv4 only")),
    }
}

/// A peer of a [`Host`]: a pointer into the host's peer array, valid for
/// the host's life (ENet never frees a peer slot before the host).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Peer(NonNull<ENetPeer>);

/// What `enet_host_service` reported.
pub enum Event {
    /// A peer connected.
    Connect(Peer),
    /// A peer disconnected (or timed out).
    Disconnect(Peer),
    /// A packet arrived on a channel.
    Receive(Peer, u8, Packet),
}

/// A received packet, destroyed on drop.
pub struct Packet(NonNull<ENetPacket>);

impl Packet {
    /// Its bytes.
    pub fn data(&self) -> &[u8] {
        // SAFETY: the packet is alive (we own it until drop) and ENet keeps
        // `data` pointing at `dataLength` bytes for its life.
        unsafe {
            let p = self.0.as_ref();
            if p.data.is_null() || p.data_length == 0 {
                return &[];
            }
            std::slice::from_raw_parts(p.data, p.data_length)
        }
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        // SAFETY: the receiver owns an event's packet and destroys it once;
        // this wrapper is its only owner.
        unsafe { enet_packet_destroy(self.0.as_ptr()) }
    }
}

/// An `ENetHost`, destroyed on drop.
pub struct Host(NonNull<ENetHost>);

impl Host {
    /// `enet_host_create(bind, peers, channels, 0, 0)` (no bandwidth
    /// limits); `bind` `None` for a client.
    pub fn create(bind: Option<SocketAddr>, peers: usize, channels: usize) -> Result<Host, String> {
        initialize()?;
        let a = bind.map(address).transpose()?;
        let ptr = a
            .as_ref()
            .map_or(std::ptr::null(), |a| a as *const ENetAddress);
        // SAFETY: `ptr` is null or points at an ENetAddress alive for the
        // call; the counts are plain values.
        let h = unsafe { enet_host_create(ptr, peers, channels, 0, 0) };
        NonNull::new(h).map(Host).ok_or_else(|| match bind {
            Some(b) => format!("enet_host_create: could not bind {b}"),
            None => "enet_host_create failed".to_string(),
        })
    }

    fn prefix(&self) -> &ENetHostPrefix {
        // SAFETY: ENetHost begins with `ENetSocket socket; ENetAddress
        // address;` (enet.h 1.3), which ENetHostPrefix repeats with the same
        // repr(C) layout; the host is alive while `self` is.
        unsafe { &*(self.0.as_ptr() as *const ENetHostPrefix) }
    }

    /// The host's socket (to poll).
    pub fn fd(&self) -> c_int {
        self.prefix().socket
    }

    /// The address the host is bound to (ENet reads it back after bind).
    pub fn local_addr(&self) -> SocketAddr {
        let a = self.prefix().address;
        SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(a.host.to_ne_bytes()),
            a.port,
        ))
    }

    /// `enet_host_connect(host, to, channels, 0)`.
    pub fn connect(&mut self, to: SocketAddr, channels: usize) -> Result<Peer, String> {
        let a = address(to)?;
        // SAFETY: the host is alive; `a` lives for the call.
        let p = unsafe { enet_host_connect(self.0.as_ptr(), &a, channels, 0) };
        NonNull::new(p)
            .map(Peer)
            .ok_or_else(|| format!("enet_host_connect {to}: no free peer"))
    }

    /// `enet_host_service(host, &event, timeout_ms)`.
    pub fn service(&mut self, timeout_ms: u32) -> Result<Option<Event>, String> {
        let mut ev = ENetEvent {
            kind: 0,
            peer: std::ptr::null_mut(),
            channel_id: 0,
            data: 0,
            packet: std::ptr::null_mut(),
        };
        // SAFETY: the host is alive and `ev` is a valid ENetEvent to fill.
        let rc = unsafe { enet_host_service(self.0.as_ptr(), &mut ev, timeout_ms) };
        if rc < 0 {
            return Err("enet_host_service failed".into());
        }
        if rc == 0 {
            return Ok(None);
        }
        let Some(peer) = NonNull::new(ev.peer).map(Peer) else {
            return Ok(None);
        };
        Ok(match ev.kind {
            ENET_EVENT_TYPE_CONNECT => Some(Event::Connect(peer)),
            ENET_EVENT_TYPE_DISCONNECT => Some(Event::Disconnect(peer)),
            ENET_EVENT_TYPE_RECEIVE => {
                NonNull::new(ev.packet).map(|p| Event::Receive(peer, ev.channel_id, Packet(p)))
            }
            _ => None,
        })
    }

    /// `enet_host_flush`: sends what is queued now.
    pub fn flush(&mut self) {
        // SAFETY: the host is alive.
        unsafe { enet_host_flush(self.0.as_ptr()) }
    }

    /// Queues `data` to `peer` on `channel` with `flags`; false if ENet
    /// refused it (the peer is not connected, or the channel is out of
    /// range).
    pub fn send(&mut self, peer: Peer, channel: u8, data: &[u8], flags: u32) -> bool {
        // SAFETY: `data` is valid for `len` bytes; ENet copies it (no
        // NO_ALLOCATE flag).
        let p = unsafe { enet_packet_create(data.as_ptr().cast(), data.len(), flags) };
        if p.is_null() {
            return false;
        }
        // SAFETY: `peer` belongs to this live host; `p` is a fresh packet,
        // which enet_peer_send takes on success.
        let rc = unsafe { enet_peer_send(peer.0.as_ptr(), channel, p) };
        if rc < 0 {
            // SAFETY: on failure the packet is still ours (nothing else
            // refers to it): destroy it once.
            unsafe { enet_packet_destroy(p) };
            return false;
        }
        true
    }

    /// `enet_peer_disconnect(peer, 0)`: a graceful disconnect, completed by
    /// later service calls.
    pub fn disconnect(&mut self, peer: Peer) {
        // SAFETY: `peer` belongs to this live host.
        unsafe { enet_peer_disconnect(peer.0.as_ptr(), 0) }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: the host is alive and destroyed once, here; its peers and
        // packets are not used after (Peer values die with their users).
        unsafe { enet_host_destroy(self.0.as_ptr()) }
    }
}
