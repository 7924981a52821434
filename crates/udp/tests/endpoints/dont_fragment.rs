//! `SocketOptions::dont_fragment` on a real path: in a namespace whose
//! loopback has a 1,280-byte MTU, a server's 1,400-byte echo is refused
//! by the kernel (`EMSGSIZE`, counted in `send_errors`) with Don't
//! Fragment, and leaves in fragments without it.

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::{EndpointConfig, ServerConfig, SocketOptions};

#[test]
fn an_echo_above_the_mtu_is_refused_with_dont_fragment_and_fragmented_without_in_netns() {
    let setup: &[&[&str]] = &[
        &["ip", "link", "set", "lo", "up"],
        &["ip", "link", "set", "lo", "mtu", "1280"],
    ];
    if !in_netns(
        module_path!(),
        "an_echo_above_the_mtu_is_refused_with_dont_fragment_and_fragmented_without_in_netns",
        setup,
    ) {
        return;
    }
    for dont_fragment in [true, false] {
        let rt = runtime(IoModel::Shared { threads: 1 });
        let config = ServerConfig {
            endpoint: EndpointConfig {
                socket: SocketOptions {
                    dont_fragment,
                    ..SocketOptions::default()
                },
                ..EndpointConfig::default()
            },
            ..ServerConfig::default()
        };
        let (server, _) = echo_server(&rt, v4(), config);
        // The client's own datagrams may be fragmented (std's defaults).
        let client = std_client(server.local_addr());
        client.connect(server.local_addr()).unwrap();
        let (big, small) = ([0xB1u8; 1400], [0x5Au8; 100]);
        client.send(&big).unwrap();
        client.send(&small).unwrap();
        let mut buf = [0u8; 2048];
        let (n, _) = recv_from(&client, &mut buf, "an echo");
        if dont_fragment {
            // The big echo never left: the first to come back is the small one.
            assert_eq!(&buf[..n], &small[..], "dont_fragment: {dont_fragment}");
            assert_eq!(server.counters().send_errors, 1);
        } else {
            assert_eq!(&buf[..n], &big[..], "dont_fragment: {dont_fragment}");
            let (n, _) = recv_from(&client, &mut buf, "the second echo");
            assert_eq!(&buf[..n], &small[..]);
            assert_eq!(server.counters().send_errors, 0);
        }
        assert_eq!(server.counters().datagrams_in, 2);
        assert!(server.stop_and_wait(LIMIT));
        rt.stop().unwrap();
    }
}
