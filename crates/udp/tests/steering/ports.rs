//! Lane steering by peer port: with `LaneSteering::PeerPort`, a datagram
//! from port p lands on lane p % lanes (lanes numbered in bind order), on
//! IPv4 and IPv6; with the kernel's hash a peer still always reaches one
//! lane.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use keel_reactor::{IoModel, Runtime};
use keel_udp::{LaneSteering, Server, ServerConfig, ServerCtx, ServerHandler, Session};

struct Echo;

impl ServerHandler for Echo {
    type SessionState = ();
    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }
    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        let _ = s.send(data);
    }
}

/// A socket bound to `ip` on some free port p with p % m == residue.
fn bind_with_residue(ip: &str, m: u16, residue: u16, start: u16) -> UdpSocket {
    let mut port = start - start % m + residue;
    for _ in 0..2000 {
        if let Ok(s) = UdpSocket::bind(format!("{ip}:{port}").replace("::1:", "[::1]:")) {
            return s;
        }
        port += m;
    }
    panic!("no free port with residue {residue} mod {m} near {start}");
}

fn steered(ip: &str) {
    const LANES: usize = 4;
    let rt = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let config = ServerConfig {
        lanes: LANES,
        steering: LaneSteering::PeerPort,
        ..ServerConfig::default()
    };
    let bind = if ip == "::1" {
        "[::1]:0"
    } else {
        "127.0.0.1:0"
    };
    let server = Server::bind(rt.handles(), bind.parse().unwrap(), config, |_| Echo).unwrap();
    // 3 peers per lane, each sending 5 datagrams and reading the echoes.
    let start = 20_000 + (std::process::id() % 20_000) as u16;
    for lane in 0..LANES as u16 {
        for k in 0..3u16 {
            let peer = bind_with_residue(ip, LANES as u16, lane, start + k * 64 + lane * 16);
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            for i in 0..5u8 {
                peer.send_to(&[lane as u8, i], server.local_addr()).unwrap();
                let mut buf = [0u8; 4];
                let n = peer.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &[lane as u8, i]);
            }
        }
    }
    for lane in 0..LANES {
        let k = server.lane_counters(lane).unwrap();
        assert_eq!(k.datagrams_in, 15, "lane {lane}: {k:?}");
        assert_eq!(k.sessions_opened, 3, "lane {lane}: {k:?}");
    }
    server.stop_and_wait(Duration::from_secs(5));
    rt.stop().unwrap();
}

#[test]
fn peer_port_steering_ipv4() {
    steered("127.0.0.1");
}

#[test]
fn peer_port_steering_ipv6() {
    steered("::1");
}

#[test]
fn kernel_hash_keeps_each_peer_on_one_lane() {
    let rt = Runtime::new(IoModel::Shared { threads: 2 }).unwrap();
    let config = ServerConfig {
        lanes: 4,
        ..ServerConfig::default()
    };
    let server = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), config, |_| {
        Echo
    })
    .unwrap();
    let mut peers = Vec::new();
    for _ in 0..8 {
        let p = UdpSocket::bind("127.0.0.1:0").unwrap();
        p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for _ in 0..4 {
            p.send_to(b"x", server.local_addr()).unwrap();
            let mut buf = [0u8; 4];
            p.recv(&mut buf).unwrap();
        }
        peers.push(p);
    }
    // 8 peers, each opened exactly one session: none was split over lanes.
    assert_eq!(server.counters().sessions_opened, 8);
    assert_eq!(server.counters().datagrams_in, 32);
    server.stop_and_wait(Duration::from_secs(5));
    rt.stop().unwrap();
}
