//! The client: a closed port ends it with `Refused` (no crash, the runtime
//! goes on), explicit close ends it with `Closed`.

use std::sync::mpsc;

use crate::common::*;
use keel_reactor::IoModel;
use keel_udp::{
    Client, ClientConfig, ClientCtx, ClientHandler, DisconnectReason, SendError, ServerConfig,
};

/// Sends `hello` when started (if asked), reports datagrams, the disconnect
/// reason, and when it is dropped (the lane drops its state when it
/// closes, after marking itself closed).
struct Watch {
    hello: bool,
    data: mpsc::Sender<Vec<u8>>,
    reason: mpsc::Sender<DisconnectReason>,
    dropped: mpsc::Sender<()>,
}

impl ClientHandler for Watch {
    fn started(&mut self, ctx: &mut ClientCtx<'_>) {
        if self.hello {
            ctx.send(b"hello").unwrap();
        }
    }

    fn datagram(&mut self, ctx: &mut ClientCtx<'_>, data: &[u8]) {
        self.data.send(data.to_vec()).unwrap();
        if data == b"close me" {
            ctx.close();
        }
    }

    fn disconnected(&mut self, _: &mut ClientCtx<'_>, reason: DisconnectReason) {
        self.reason.send(reason).unwrap();
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.dropped.send(());
    }
}

struct Channels {
    data: mpsc::Receiver<Vec<u8>>,
    reason: mpsc::Receiver<DisconnectReason>,
    dropped: mpsc::Receiver<()>,
}

fn watch(hello: bool) -> (Watch, Channels) {
    let (d, data) = mpsc::channel();
    let (r, reason) = mpsc::channel();
    let (x, dropped) = mpsc::channel();
    (
        Watch {
            hello,
            data: d,
            reason: r,
            dropped: x,
        },
        Channels {
            data,
            reason,
            dropped,
        },
    )
}

#[test]
fn closed_port_ends_the_client_with_refused() {
    let rt = runtime(IoModel::Shared { threads: 1 });
    for family in [v4(), v6()] {
        let nobody = closed_port(family);
        let (handler, ch) = watch(true);
        let client =
            Client::connect(rt.handle(), nobody, ClientConfig::default(), handler).unwrap();
        assert_eq!(
            recv_within(&ch.reason, "the disconnect of a client of a closed port"),
            DisconnectReason::Refused
        );
        recv_within(&ch.dropped, "the client's state to be dropped");
        assert!(client.is_closed());
        assert_eq!(client.send(b"more"), Err(SendError::Closed));
        let c = client.counters();
        assert_eq!(c.datagrams_out, 1, "{c:?}");
        assert_eq!(
            c.recv_errors + c.send_errors,
            1,
            "the refusal is counted: {c:?}"
        );
        assert!(ch.reason.try_recv().is_err(), "one disconnect only");
    }

    // The process and the runtime carry on: a client of a live server works.
    let (server, _) = echo_server(&rt, v4(), ServerConfig::default());
    let (handler, ch) = watch(true);
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::default(),
        handler,
    )
    .unwrap();
    assert_eq!(
        recv_within(&ch.data, "an echo after the refusals"),
        b"hello"
    );
    assert!(!client.is_closed());
    client.close();
    assert_eq!(recv_within(&ch.reason, "close"), DisconnectReason::Closed);
    server.stop();
    rt.stop().expect("no handler panicked");
}

#[test]
fn close_from_handle_or_handler_ends_with_closed() {
    let rt = runtime(IoModel::Shared { threads: 2 });
    let (server, _) = echo_server(&rt, v4(), ServerConfig::default());

    // Client::close from another thread.
    let (handler, ch) = watch(false);
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::default(),
        handler,
    )
    .unwrap();
    client.send(b"one").unwrap();
    assert_eq!(recv_within(&ch.data, "an echo"), b"one");
    client.close();
    assert_eq!(recv_within(&ch.reason, "close"), DisconnectReason::Closed);
    recv_within(&ch.dropped, "the state to be dropped");
    assert!(client.is_closed());
    assert!(
        client.post(|_, _| {}).is_err(),
        "posting to a closed client"
    );

    // ClientCtx::close from the datagram handler: no datagram after it.
    let (handler, ch) = watch(false);
    let client = Client::connect(
        rt.handle(),
        server.local_addr(),
        ClientConfig::default(),
        handler,
    )
    .unwrap();
    client.send(b"close me").unwrap();
    assert_eq!(recv_within(&ch.data, "an echo"), b"close me");
    assert_eq!(recv_within(&ch.reason, "close"), DisconnectReason::Closed);
    recv_within(&ch.dropped, "the state to be dropped");
    assert!(client.is_closed());
    assert!(ch.data.try_recv().is_err());
    server.stop();
    rt.stop().unwrap();
}
