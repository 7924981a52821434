//! Connection handles carry a generation: a handle kept after its
//! connection ended never reaches the next connection in the same slot.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_rudp_proto::{
    ChannelConfig, ChannelKind, ClientSecurity, Config, Connection, ConnectionHandle, Endpoint,
    EndpointConfig, Event, Handled, ServerSecurity,
};

fn config() -> Config {
    Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)])
}

/// Runs the handshake of a new client from `addr`; returns the client and
/// the server's handle of it.
fn connect(
    server: &mut Endpoint,
    addr: SocketAddr,
    nonce: u8,
    now: Instant,
) -> (Connection, ConnectionHandle) {
    let mut client =
        Connection::connect(config(), ClientSecurity::Insecure, [nonce; 16], now).unwrap();
    let (mut buf, mut reply) = ([0u8; 1500], [0u8; 1500]);
    let mut handle = None;
    for _ in 0..2 {
        let n = client.poll_transmit(now, &mut buf).unwrap();
        match server.handle(now, addr, &buf[..n], &mut reply) {
            Handled::Reply(m) => client.handle_datagram(now, &reply[..m]),
            Handled::Accepted(h, m) => {
                handle = Some(h);
                client.handle_datagram(now, &reply[..m]);
            }
            other => panic!("handshake: {other:?}"),
        }
    }
    assert_eq!(client.poll_event(), Some(Event::Connected));
    (client, handle.expect("accepted"))
}

#[test]
fn a_stale_handle_cannot_reach_the_next_connection_in_its_slot() {
    let mut now = Instant::now();
    let mut server = Endpoint::new(
        EndpointConfig::new(0, [7; 32], config(), ServerSecurity::Insecure),
        now,
    )
    .unwrap();
    let a: SocketAddr = "192.0.2.1:5000".parse().unwrap();
    let (_first, old) = connect(&mut server, a, 1, now);
    assert_ne!(old.to_bits(), 0, "an endpoint's handle is never 0");

    // The server closes it; the close is never acknowledged, so it ends
    // after the close timeout. Reading its events lets the endpoint remove it.
    server.connection_mut(old).unwrap().close(now, 1, "bye");
    let mut buf = [0u8; 1500];
    let mut ended = false;
    for _ in 0..10_000 {
        while server.poll_transmit(now, &mut buf).is_some() {}
        while let Some((h, e)) = server.poll_event() {
            ended |= h == old && matches!(e, Event::Disconnected(_));
        }
        match server.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                server.handle_timeout(now);
            }
            None => break,
        }
        if ended && server.connection_count() == 0 {
            break;
        }
        now += Duration::from_millis(1);
    }
    assert!(ended, "the first connection never ended");
    server.poll_timeout();
    assert_eq!(server.connection_count(), 0);

    // A new connection takes the same slot, with the next generation.
    let b: SocketAddr = "192.0.2.2:5000".parse().unwrap();
    let (_second, new) = connect(&mut server, b, 2, now);
    assert_eq!(new.index(), old.index(), "the slot was reused");
    assert_eq!(new.generation(), old.generation() + 1);
    assert_ne!(new, old);

    // The old handle finds nothing; the new one finds the new connection.
    assert!(server.connection(old).is_none());
    assert!(server.connection_mut(old).is_none());
    assert_eq!(server.peer_addr(old), None);
    assert_eq!(server.peer_addr(new), Some(b));
    assert!(server.connection_mut(new).is_some());
    assert_eq!(server.handles().collect::<Vec<_>>(), vec![new]);
    // Nor does a handle that was never handed out.
    assert!(server
        .connection(ConnectionHandle::from_bits(new.to_bits() + (1 << 32)))
        .is_none());
}
