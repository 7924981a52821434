//! A server bound to the unspecified address (`0.0.0.0`, `[::]`) replies
//! from the address each datagram came to, not from whatever source the
//! routing table picks for the peer: a client that sent to one of several
//! addresses of a multi-homed host (and, like most clients, connected its
//! socket to it) only accepts replies from that address.
//!
//! Loopback accepts all of 127.0.0.0/8, so a client connected to
//! 127.0.0.2 is enough to tell: without the fix the reply leaves from
//! 127.0.0.1 (the route's preferred source) and the connected client never
//! sees it. IPv6 has only `::1` on the host's loopback; that case runs in a
//! private network namespace with a second address.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::SocketOptions;
use keel_udp::{EndpointConfig, Server, ServerConfig, ServerCtx, ServerHandler, Session};

/// Echoes every datagram twice, so each batch has at least two replies
/// (one `sendmmsg` with a control message per datagram, not one `sendto`).
struct EchoTwice;

impl ServerHandler for EchoTwice {
    type SessionState = ();
    fn accept(&mut self, _: &mut ServerCtx<'_, ()>, _: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }
    fn datagram(&mut self, s: &mut Session<'_, ()>, data: &[u8]) {
        s.send(data).expect("first echo");
        s.send(data).expect("second echo");
    }
}

fn config(lanes: usize, batch: usize, only_v6: Option<bool>) -> ServerConfig {
    ServerConfig {
        lanes,
        endpoint: EndpointConfig {
            batch,
            socket: SocketOptions {
                only_v6,
                ..SocketOptions::default()
            },
            ..EndpointConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// A client bound to `from` and connected to `to` sends a few datagrams
/// and must get both echoes of each, from `to` exactly.
fn echoes_come_from_the_address_sent_to(from: SocketAddr, to: SocketAddr) {
    let client = UdpSocket::bind(from).unwrap();
    client.connect(to).unwrap();
    client.set_read_timeout(Some(LIMIT)).unwrap();
    let peer = UdpSocket::bind(SocketAddr::new(from.ip(), 0)).unwrap();
    peer.set_read_timeout(Some(LIMIT)).unwrap();
    for i in 0..4u8 {
        let data = [i, 0xAB, i];
        client.send(&data).unwrap();
        for copy in 0..2 {
            let mut buf = [0u8; 8];
            let n = match client.recv(&mut buf) {
                Ok(n) => n,
                Err(e) => panic!(
                    "echo {copy} of datagram {i} sent to {to} never reached the client \
                     connected to it ({e}): the reply left from another address"
                ),
            };
            assert_eq!(&buf[..n], &data);
        }
    }
    // An unconnected socket sees the reply's source directly.
    peer.send_to(b"who", to).unwrap();
    for _ in 0..2 {
        let mut buf = [0u8; 8];
        let (_, source) = recv_from(&peer, &mut buf, "an echo to the unconnected peer");
        assert_eq!(source, to, "the echo's source");
    }
}

fn ipv4_server_replies_from_the_address_sent_to(lanes: usize, batch: usize) {
    let rt = runtime(IoModel::Shared { threads: 1 });
    let server = Server::bind(
        rt.handles(),
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        config(lanes, batch, None),
        |_| EchoTwice,
    )
    .unwrap();
    let port = server.local_addr().port();
    let from = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    for last in [2, 1, 77] {
        let to = SocketAddr::from((Ipv4Addr::new(127, 0, 0, last), port));
        echoes_come_from_the_address_sent_to(from, to);
    }
    assert_eq!(server.counters().send_errors, 0);
    assert!(server.stop_and_wait(LIMIT));
    rt.stop().unwrap();
}

#[test]
fn ipv4_any_replies_from_the_address_sent_to_batched() {
    ipv4_server_replies_from_the_address_sent_to(1, 64);
}

#[test]
fn ipv4_any_replies_from_the_address_sent_to_one_per_call() {
    ipv4_server_replies_from_the_address_sent_to(1, 1);
}

#[test]
fn ipv4_any_replies_from_the_address_sent_to_on_every_lane() {
    ipv4_server_replies_from_the_address_sent_to(3, 64);
}

/// A dual-stack `[::]` server gets IPv4 datagrams as IPv4-mapped; the
/// reply still leaves from the IPv4 address they came to.
#[test]
fn dual_stack_any_replies_to_ipv4_from_the_address_sent_to() {
    for batch in [64, 1] {
        let rt = runtime(IoModel::Shared { threads: 1 });
        let server = Server::bind(
            rt.handles(),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            config(1, batch, Some(false)),
            |_| EchoTwice,
        )
        .unwrap();
        let port = server.local_addr().port();
        let from = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        echoes_come_from_the_address_sent_to(from, SocketAddr::from(([127, 0, 0, 3], port)));
        echoes_come_from_the_address_sent_to(
            SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        );
        assert_eq!(server.counters().send_errors, 0);
        assert!(server.stop_and_wait(LIMIT));
        rt.stop().unwrap();
    }
}

/// IPv6: a namespace whose loopback also has 2001:db8::2 (documentation
/// prefix). The client on `::1` connects to 2001:db8::2; without the fix
/// the reply to `::1` leaves from `::1`.
#[test]
fn ipv6_any_replies_from_the_address_sent_to_in_netns() {
    let setup: &[&[&str]] = &[
        &["ip", "link", "set", "lo", "up"],
        &[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8::2/128",
            "dev",
            "lo",
            "nodad",
        ],
    ];
    if !in_netns(
        module_path!(),
        "ipv6_any_replies_from_the_address_sent_to_in_netns",
        setup,
    ) {
        return;
    }
    let second: Ipv6Addr = "2001:db8::2".parse().unwrap();
    wait_until_routable(second);
    for (batch, only_v6) in [(64, Some(true)), (1, Some(true)), (64, Some(false))] {
        let rt = runtime(IoModel::Shared { threads: 1 });
        let server = Server::bind(
            rt.handles(),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            config(2, batch, only_v6),
            |_| EchoTwice,
        )
        .unwrap();
        let port = server.local_addr().port();
        echoes_come_from_the_address_sent_to(
            SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
            SocketAddr::from((second, port)),
        );
        echoes_come_from_the_address_sent_to(
            SocketAddr::from((second, 0)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        );
        assert_eq!(server.counters().send_errors, 0);
        assert!(server.stop_and_wait(LIMIT));
        rt.stop().unwrap();
    }
}

/// A datagram sent to a broadcast address is answered from the receiving
/// interface's address (a broadcast address is no valid source: pinning
/// it would make every such reply fail). Guards LAN discovery by
/// broadcast, on an IPv4 and a dual-stack server.
#[test]
fn broadcast_is_answered_from_the_interface_address() {
    for (bind, only_v6) in [
        (SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), None),
        (SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)), Some(false)),
    ] {
        let rt = runtime(IoModel::Shared { threads: 1 });
        let server =
            Server::bind(rt.handles(), bind, config(1, 64, only_v6), |_| EchoTwice).unwrap();
        let port = server.local_addr().port();
        let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        client.set_broadcast(true).unwrap();
        client.set_read_timeout(Some(LIMIT)).unwrap();
        client
            .send_to(b"anyone?", SocketAddr::from(([127, 255, 255, 255], port)))
            .unwrap();
        for _ in 0..2 {
            let mut buf = [0u8; 16];
            let (n, from) = recv_from(&client, &mut buf, "the echo of a broadcast");
            assert_eq!(&buf[..n], b"anyone?");
            assert_eq!(from, SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        }
        assert_eq!(server.counters().send_errors, 0);
        assert!(server.stop_and_wait(LIMIT));
        rt.stop().unwrap();
    }
}

/// Waits until datagrams from `::1` to `addr` arrive. The kernel installs
/// an added IPv6 address's local route from a work queue, even with
/// `nodad`: until then a datagram to it is silently lost (it made the first
/// send of this test vanish about once in ten runs).
fn wait_until_routable(addr: Ipv6Addr) {
    let target = UdpSocket::bind(SocketAddr::from((addr, 0))).unwrap();
    target
        .set_read_timeout(Some(std::time::Duration::from_millis(20)))
        .unwrap();
    let probe = UdpSocket::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0))).unwrap();
    let to = target.local_addr().unwrap();
    let mut buf = [0u8; 8];
    for _ in 0..250 {
        probe.send_to(b"probe", to).unwrap();
        if target.recv(&mut buf).is_ok() {
            return;
        }
    }
    panic!("{addr} never became reachable from ::1 in its namespace");
}
