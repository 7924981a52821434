//! Peer-port steering reads the UDP source port wherever the IP header puts
//! it: IPv4 peers of a dual-stack `[::]` server, IPv6 peers of the same
//! server, and IPv4 datagrams carrying IP options all land on lane
//! `source port % lanes`, whatever their payload says.
//!
//! The payloads are chosen so that a program reading a fixed offset would
//! misroute: their bytes 12..14 (where an IPv4 datagram's payload sits
//! under the IPv6 port offset) have the other parity than the port, and
//! the short ones end before that offset (a failed classic BPF load
//! returns 0: lane 0).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use crate::common::*;
use keel_reactor::{IoModel, Runtime};
use keel_udp::{
    LaneSteering, Server, ServerConfig, ServerCtx, ServerHandler, Session, SocketOptions,
};

/// Replies to every datagram with the index of the lane that got it.
struct WhichLane;

impl ServerHandler for WhichLane {
    type SessionState = ();
    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }
    fn datagram(&mut self, s: &mut Session<'_, ()>, _: &[u8]) {
        let lane = s.lane() as u8;
        s.send(&[lane]).expect("reply with the lane");
    }
}

const LANES: usize = 2;

fn server(rt: &Runtime, addr: &str, only_v6: Option<bool>) -> Server<WhichLane> {
    let config = ServerConfig {
        lanes: LANES,
        steering: LaneSteering::PeerPort,
        endpoint: keel_udp::EndpointConfig {
            socket: SocketOptions {
                only_v6,
                ..SocketOptions::default()
            },
            ..keel_udp::EndpointConfig::default()
        },
        ..ServerConfig::default()
    };
    Server::bind(rt.handles(), addr.parse().unwrap(), config, |_| WhichLane).unwrap()
}

/// Payloads that would mislead a fixed-offset program for a peer on a port
/// of parity `parity`: 16 bytes whose bytes 12..14 read (big-endian) as a
/// number of the other parity, and payloads too short to reach byte 14.
fn misleading_payloads(parity: u16) -> Vec<Vec<u8>> {
    let wrong = (parity + 1) % 2;
    let mut long = vec![0xA5u8; 16];
    long[12..14].copy_from_slice(&(0x1230 + wrong).to_be_bytes());
    let mut long2 = vec![wrong as u8; 16];
    long2[12..14].copy_from_slice(&(0xFFFE + wrong).to_be_bytes());
    vec![long, vec![], vec![7], long2, vec![1, 2, 3, 4, 5, 6, 7, 8]]
}

/// Binds peers on `ip` until there are `per_parity` on even and on odd
/// ports (the kernel picks the ports; bounded).
fn peers_of_both_parities(ip: &str, per_parity: usize) -> Vec<UdpSocket> {
    let local: SocketAddr = SocketAddr::new(ip.parse().unwrap(), 0);
    let mut peers = Vec::new();
    let mut count = [0usize; 2];
    for _ in 0..1000 {
        if count.iter().all(|&c| c >= per_parity) {
            return peers;
        }
        let p = UdpSocket::bind(local).unwrap();
        let parity = (p.local_addr().unwrap().port() % 2) as usize;
        if count[parity] < per_parity {
            count[parity] += 1;
            p.set_read_timeout(Some(LIMIT)).unwrap();
            peers.push(p);
        }
    }
    panic!("could not bind {per_parity} peers of each port parity on {ip}");
}

/// Sends the misleading payloads from each peer to `to` and checks every
/// reply names lane `port % LANES`.
fn check_lanes(peers: &[UdpSocket], to: SocketAddr) {
    for p in peers {
        let port = p.local_addr().unwrap().port();
        for (k, data) in misleading_payloads(port % 2).iter().enumerate() {
            p.send_to(data, to).unwrap();
            let mut buf = [0u8; 4];
            let (n, _) = recv_from(p, &mut buf, "the lane's reply");
            assert_eq!(
                &buf[..n],
                &[(port as usize % LANES) as u8],
                "peer port {port}, payload {k} ({data:?}) reached the wrong lane"
            );
        }
    }
}

/// Every peer opened exactly one session (none was split over lanes), and
/// each lane saw exactly its peers' datagrams.
fn check_counters(server: &Server<WhichLane>, peers: &[UdpSocket]) {
    barrier(server);
    let per_peer = misleading_payloads(0).len() as u64;
    for lane in 0..LANES {
        let mine = peers
            .iter()
            .filter(|p| p.local_addr().unwrap().port() as usize % LANES == lane)
            .count() as u64;
        let k = server.lane_counters(lane).unwrap();
        assert_eq!(k.sessions_opened, mine, "lane {lane}: {k:?}");
        assert_eq!(k.datagrams_in, mine * per_peer, "lane {lane}: {k:?}");
    }
}

#[test]
fn dual_stack_server_steers_ipv4_and_ipv6_peers_by_port() {
    let rt = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let server = server(&rt, "[::]:0", Some(false));
    let port = server.local_addr().port();
    let v4_peers = peers_of_both_parities("127.0.0.1", 3);
    check_lanes(&v4_peers, SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    let v6_peers = peers_of_both_parities("::1", 3);
    check_lanes(&v6_peers, format!("[::1]:{port}").parse().unwrap());
    let all: Vec<UdpSocket> = v4_peers.into_iter().chain(v6_peers).collect();
    check_counters(&server, &all);
    assert!(server.stop_and_wait(LIMIT));
    rt.stop().unwrap();
}

#[test]
fn ipv6_only_server_steers_by_port_whatever_the_payload() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let server = server(&rt, "[::1]:0", Some(true));
    let peers = peers_of_both_parities("::1", 3);
    check_lanes(&peers, server.local_addr());
    check_counters(&server, &peers);
    assert!(server.stop_and_wait(LIMIT));
    rt.stop().unwrap();
}

/// An IPv4 + UDP datagram from `src` to `dst` with a 4-byte IP option
/// (four NOPs, so the header is 24 bytes) and no UDP checksum (0: allowed
/// on IPv4). With `IP_HDRINCL` the kernel fills in the IP checksum, the
/// total length and the ID.
fn ipv4_with_options(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (SocketAddr::V4(src), SocketAddr::V4(dst)) = (src, dst) else {
        panic!("IPv4 addresses expected");
    };
    let ihl = 6u8;
    let udp_len = 8 + payload.len() as u16;
    let total = u16::from(ihl) * 4 + udp_len;
    let mut p = Vec::new();
    p.push(0x40 | ihl);
    p.push(0); // TOS
    p.extend_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0]); // ID (kernel fills), DF
    p.push(64); // TTL
    p.push(17); // UDP
    p.extend_from_slice(&[0, 0]); // checksum (kernel fills)
    p.extend_from_slice(&src.ip().octets());
    p.extend_from_slice(&dst.ip().octets());
    p.extend_from_slice(&[1, 1, 1, 1]); // options: NOP x 4
    p.extend_from_slice(&src.port().to_be_bytes());
    p.extend_from_slice(&dst.port().to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum
    p.extend_from_slice(payload);
    p
}

/// IPv4 datagrams with IP options: the UDP header starts at IHL * 4, not
/// 20. They are crafted on a raw socket (needs CAP_NET_RAW; skipped
/// without it) with the source port of a normal UDP socket, which gets the
/// replies.
#[test]
fn ipv4_with_ip_options_is_steered_by_port() {
    let raw = match socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::RAW,
        Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED ipv4_with_ip_options_is_steered_by_port: no raw socket: {e}");
            return;
        }
    };
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let server = server(&rt, "127.0.0.1:0", None);
    let to = server.local_addr();
    let peers = peers_of_both_parities("127.0.0.1", 3);
    for p in &peers {
        let from = p.local_addr().unwrap();
        for (k, data) in misleading_payloads(from.port() % 2).iter().enumerate() {
            let packet = ipv4_with_options(from, to, data);
            raw.send_to(&packet, &to.into()).unwrap();
            let mut buf = [0u8; 4];
            let (n, _) = recv_from(p, &mut buf, "the lane's reply");
            assert_eq!(
                &buf[..n],
                &[(from.port() as usize % LANES) as u8],
                "peer port {}, payload {k}: wrong lane",
                from.port()
            );
        }
    }
    check_counters(&server, &peers);
    assert!(server.stop_and_wait(LIMIT));
    rt.stop().unwrap();
}

/// The Internet checksum of `data` (odd length padded with a zero).
fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv6 datagram from `src` to `dst` whose UDP header follows a
/// hop-by-hop options header (padding only), with a correct UDP checksum.
fn ipv6_with_hop_by_hop(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    let (SocketAddr::V6(src), SocketAddr::V6(dst)) = (src, dst) else {
        panic!("IPv6 addresses expected");
    };
    let udp_len = 8 + payload.len() as u16;
    let mut udp = Vec::new();
    udp.extend_from_slice(&src.port().to_be_bytes());
    udp.extend_from_slice(&dst.port().to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.ip().octets());
    pseudo.extend_from_slice(&dst.ip().octets());
    pseudo.extend_from_slice(&u32::from(udp_len).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    pseudo.extend_from_slice(&udp);
    let sum = match checksum(&pseudo) {
        0 => 0xffff,
        s => s,
    };
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(8 + udp_len).to_be_bytes());
    p.push(0); // next header: hop-by-hop options
    p.push(64); // hop limit
    p.extend_from_slice(&src.ip().octets());
    p.extend_from_slice(&dst.ip().octets());
    p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // -> UDP; PadN(4)
    p.extend_from_slice(&udp);
    p
}

/// A datagram the program does not recognise (an IPv6 extension header
/// before UDP) is spread by the kernel's hash, not dumped on lane 0: over
/// 24 peer ports both lanes get some (all on one lane by chance: 2^-23).
/// Each peer still stays on one lane. Crafted on a raw IPv6 socket (needs
/// CAP_NET_RAW; skipped without it).
#[test]
fn unrecognised_headers_fall_back_to_the_kernel_hash() {
    let raw = match socket2::Socket::new(
        socket2::Domain::IPV6,
        socket2::Type::RAW,
        Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "SKIPPED unrecognised_headers_fall_back_to_the_kernel_hash: no raw socket: {e}"
            );
            return;
        }
    };
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let server = server(&rt, "[::1]:0", Some(true));
    let to = server.local_addr();
    // The raw socket takes the whole packet; the port of its address must
    // be 0 (or the protocol).
    let raw_to: SocketAddr = SocketAddr::new(to.ip(), 0);
    let peers = peers_of_both_parities("::1", 12);
    let mut per_lane = [0usize; LANES];
    for p in &peers {
        let from = p.local_addr().unwrap();
        let mut lane = None;
        for data in [&b"first"[..], b"second", b""] {
            raw.send_to(&ipv6_with_hop_by_hop(from, to, data), &raw_to.into())
                .unwrap();
            let mut buf = [0u8; 4];
            let (n, _) = recv_from(p, &mut buf, "the lane's reply");
            assert_eq!(n, 1);
            assert!(
                lane.is_none() || lane == Some(buf[0]),
                "peer {from} moved between lanes"
            );
            lane = Some(buf[0]);
        }
        per_lane[usize::from(lane.unwrap())] += 1;
    }
    assert!(
        per_lane.iter().all(|&n| n > 0),
        "all peers on one lane: {per_lane:?}"
    );
    assert!(server.stop_and_wait(LIMIT));
    rt.stop().unwrap();
}
