//! Lane steering by a payload byte (`LaneSteering::PayloadByte`), on a
//! group of datagram sockets (`DatagramSocket::bind_lanes`): a datagram
//! whose byte at `offset` names a lane lands on that lane whatever its
//! source; one too short to have the byte, one whose first byte has a bit
//! of the mask set, and one whose byte is not a lane are spread by the
//! kernel's hash (the same lane for one source, as without a program).

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

#[test]
fn a_server_refuses_payload_byte_steering() {
    use keel_udp::{Server, ServerConfig, ServerCtx, ServerHandler, Session};
    struct Nothing;
    impl ServerHandler for Nothing {
        type SessionState = ();
        fn connect(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
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
    rt.stop().unwrap();
}
