//! Lane steering by a payload byte (`LaneSteering::PayloadByte`), on a
//! group of datagram sockets (`DatagramSocket::bind_lanes`): a datagram
//! whose byte at `offset` names a lane lands on that lane whatever its
//! source; one too short to have the byte, one whose first byte has a bit
//! of the mask set, and one whose byte is not a lane are spread by the
//! kernel's hash (the same lane for one source, as without a program), or
//! with `hash_source_ip` by the source IP (one lane for all ports of one
//! host).

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use keel_reactor::{IoModel, Runtime};
use keel_udp::{
    DatagramSocket, DatagramSocketCtx, DatagramSocketHandler, LaneSteering, LanesConfig,
};

/// Replies to every datagram with the index of the lane that got it, and
/// whether the datagram's local address was reported.
struct WhichLane;

impl DatagramSocketHandler for WhichLane {
    fn datagram(&mut self, ctx: &mut DatagramSocketCtx<'_>, from: SocketAddr, _: &[u8]) {
        let reply = [ctx.lane() as u8, ctx.arrived_at().is_some() as u8];
        let local = ctx.arrived_at();
        ctx.send_from(from, local, &reply).expect("reply");
    }
}

const LANES: usize = 4;

fn ask(peer: &UdpSocket, to: SocketAddr, payload: &[u8]) -> [u8; 2] {
    peer.send_to(payload, to).unwrap();
    let mut buf = [0u8; 4];
    let n = peer.recv(&mut buf).unwrap();
    assert_eq!(n, 2);
    [buf[0], buf[1]]
}

fn steered(bind: &str, peer_ip: &str) {
    let rt = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let config = LanesConfig {
        lanes: LANES,
        steering: LaneSteering::PayloadByte {
            offset: 1,
            hash_if_first_byte_has: 0x80,
            hash_source_ip: None,
        },
        ..LanesConfig::default()
    };
    let group =
        DatagramSocket::bind_lanes(rt.handles(), bind.parse().unwrap(), config, |_| WhichLane)
            .unwrap();
    assert_eq!(group.lanes(), LANES);
    let to = SocketAddr::new(peer_ip.parse().unwrap(), group.local_addr().port());
    let wildcard = group.local_addr().ip().is_unspecified();
    // Several peers (several source ports, so several kernel hashes), each
    // naming every lane in turn: the byte decides, not the source.
    for _ in 0..3 {
        let peer = UdpSocket::bind(SocketAddr::new(to.ip(), 0)).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for lane in 0..LANES as u8 {
            let got = ask(&peer, to, &[0x40, lane, 0, 0]);
            assert_eq!(got, [lane, wildcard as u8], "byte {lane}");
        }
        // Not steered: hashed, so one source always reaches one lane.
        let hashed = ask(&peer, to, &[0x40])[0];
        for payload in [
            &[0x40][..],
            &[0xc0, 2, 0],
            &[0x40, LANES as u8],
            &[0x40, 255],
            &[],
        ] {
            assert_eq!(
                ask(&peer, to, payload)[0],
                hashed,
                "{payload:?} should be hashed like the other unsteered datagrams of this source"
            );
        }
    }
    let per_lane: Vec<u64> = (0..LANES)
        .map(|i| group.lane(i).unwrap().counters().datagrams_in)
        .collect();
    // 4 steered datagrams per peer and lane, plus the hashed ones.
    assert!(per_lane.iter().all(|&n| n >= 3), "{per_lane:?}");
    assert_eq!(per_lane.iter().sum::<u64>(), 3 * (4 + 6));
    group.close();
    rt.stop().unwrap();
}

#[test]
fn payload_byte_steering_ipv4() {
    steered("127.0.0.1:0", "127.0.0.1");
}

#[test]
fn payload_byte_steering_ipv6_wildcard_reports_the_local_address() {
    steered("[::]:0", "::1");
}

/// With `hash_source_ip`, every unsteered datagram (a marked first byte, too
/// short, a byte that is no lane) of one source IP reaches one lane,
/// whatever its port: 8 sockets per address, on `sources` addresses,
/// against a group bound to `bind`. Datagrams that name a lane still go
/// there. Returns the lane of each source.
fn by_source_ip(bind: &str, sources: &[&str]) -> Vec<u8> {
    let rt = Runtime::new(IoModel::Sharded { reactors: 2 }).unwrap();
    let config = LanesConfig {
        lanes: LANES,
        steering: LaneSteering::PayloadByte {
            offset: 1,
            hash_if_first_byte_has: 0x80,
            hash_source_ip: Some(64),
        },
        ..LanesConfig::default()
    };
    let group =
        DatagramSocket::bind_lanes(rt.handles(), bind.parse().unwrap(), config, |_| WhichLane)
            .unwrap();
    let port = group.local_addr().port();
    let mut lanes = Vec::new();
    for source in sources {
        let ip: std::net::IpAddr = source.parse().unwrap();
        // A datagram to the group's address from the source's family.
        let to = match (group.local_addr().ip(), ip) {
            (server, _) if !server.is_unspecified() => SocketAddr::new(server, port),
            (_, std::net::IpAddr::V4(_)) => SocketAddr::new([127, 0, 0, 1].into(), port),
            (_, std::net::IpAddr::V6(_)) => SocketAddr::new(ip, port),
        };
        let mut seen = Vec::new();
        for _ in 0..8 {
            let peer = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            for payload in [&[0xc0, 2, 0][..], &[0x80], &[0x40], &[0x40, 255], &[]] {
                seen.push(ask(&peer, to, payload)[0]);
            }
            assert_eq!(ask(&peer, to, &[0x40, 3, 0])[0], 3, "a steered datagram");
        }
        assert!(
            seen.iter().all(|&l| l == seen[0]),
            "{source}: 8 ports, unsteered datagrams on lanes {seen:?}"
        );
        lanes.push(seen[0]);
    }
    group.close();
    rt.stop().unwrap();
    lanes
}

#[test]
fn hash_source_ip_keeps_a_host_on_one_lane_and_spreads_hosts() {
    let sources: Vec<String> = (1..=8).map(|i| format!("127.0.0.{i}")).collect();
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let lanes = by_source_ip("127.0.0.1:0", &sources);
    let mut distinct = lanes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 2, "8 addresses, lanes {lanes:?}");
    // A dual-stack socket gets IPv4 datagrams with an IPv4 header: the same
    // lanes.
    assert_eq!(by_source_ip("[::]:0", &sources), lanes);
}

#[test]
fn hash_source_ip_keeps_an_ipv6_host_on_one_lane() {
    by_source_ip("[::1]:0", &["::1"]);
}

#[test]
fn a_server_refuses_payload_byte_steering() {
    use keel_udp::{Server, ServerConfig, ServerCtx, ServerHandler, Session};
    struct Nothing;
    impl ServerHandler for Nothing {
        type SessionState = ();
        fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
            None
        }
        fn datagram(&mut self, _: &mut Session<'_, ()>, _: &[u8]) {}
    }
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let config = ServerConfig {
        lanes: 2,
        steering: LaneSteering::PayloadByte {
            offset: 1,
            hash_if_first_byte_has: 0,
            hash_source_ip: None,
        },
        ..ServerConfig::default()
    };
    let err = Server::bind(rt.handles(), "127.0.0.1:0".parse().unwrap(), config, |_| {
        Nothing
    })
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        err.to_string()
            .starts_with("steering: expected KernelHash or PeerPort"),
        "{err}"
    );
    rt.stop().unwrap();
}

#[test]
fn lanes_config_is_validated() {
    let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
    let config = LanesConfig {
        lanes: 257,
        ..LanesConfig::default()
    };
    let err =
        DatagramSocket::bind_lanes(rt.handles(), "127.0.0.1:0".parse().unwrap(), config, |_| {
            WhichLane
        })
        .unwrap_err();
    assert_eq!(err.to_string(), "lanes: expected 1..=256, got 257");
    let config = LanesConfig {
        lanes: 2,
        steering: LaneSteering::PayloadByte {
            offset: 1,
            hash_if_first_byte_has: 0x80,
            hash_source_ip: Some(65),
        },
        ..LanesConfig::default()
    };
    let err =
        DatagramSocket::bind_lanes(rt.handles(), "127.0.0.1:0".parse().unwrap(), config, |_| {
            WhichLane
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "steering: hash_source_ip: expected None or Some(0..=64), the IPv6 prefix bits hashed, \
         got Some(65)"
    );
    rt.stop().unwrap();
}
