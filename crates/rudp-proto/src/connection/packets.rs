//! Packets for the connection's unit tests: a connected receiver and
//! insecure short packets carrying chosen frames.

use std::time::Instant;

use super::{Connection, Side};
use crate::channel::{ChannelConfig, ChannelKind};
use crate::config::Config;
use crate::wire::{ConnectionId, Frame, Header, Writer};

const CID: ConnectionId = ConnectionId([7; 8]);

/// A connected server end: channel 0 reliable-ordered, 1 unreliable, 2
/// reliable-ordered.
pub(super) fn receiver() -> (Connection, Instant) {
    let now = Instant::now();
    let cfg = Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::Unreliable),
        ChannelConfig::new(ChannelKind::ReliableOrdered),
    ]);
    let c = Connection::established(cfg, Side::Server, CID, now).unwrap();
    (c, now)
}

/// An insecure short packet `pn` carrying `frames`.
pub(super) fn packet(pn: u64, frames: &[Frame<'_>]) -> Vec<u8> {
    let mut buf = vec![0u8; 65_536];
    let mut w = Writer::new(&mut buf);
    Header::Short {
        cid: CID,
        pn,
        pn_len: 4,
    }
    .encode(&mut w)
    .unwrap();
    for f in frames {
        f.encode(&mut w).unwrap();
    }
    let n = w.len();
    buf.truncate(n);
    buf
}

/// A MESSAGE frame of channel 0.
pub(super) fn msg(seq: u64, payload: &[u8]) -> Frame<'_> {
    Frame::Message {
        channel: 0,
        seq,
        payload,
    }
}

/// Hands a connection packets carrying chosen frames, numbered from 0 up.
pub(super) fn feeder(now: Instant) -> impl FnMut(&[Frame<'_>], &mut Connection) {
    let mut pn = 0;
    move |frames, c| {
        c.handle_datagram(now, &packet(pn, frames));
        pn += 1;
    }
}
