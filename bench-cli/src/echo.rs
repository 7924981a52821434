//! The benchmark's echo server handler: validates the header, runs the
//! configured work inside the receive lane, echoes to the sender. In
//! sockperf mode it answers sockperf's ping-pong client instead.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_udp::{ServerCtx, ServerHandler, Session};

use crate::message::{decode_header, server_work, sockperf_classify, SockperfVerdict, HEADER_LEN};

/// Datagrams the server refused to echo, shared by every lane (only bumped
/// on bad input, so contention is not a concern).
#[derive(Debug, Default)]
pub struct EchoStats {
    /// Datagrams that were not benchmark (or sockperf) messages.
    pub invalid: AtomicU64,
}

/// What the server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoMode {
    /// keel-bench messages: header checked, echoed unchanged.
    Bench,
    /// sockperf messages: reply with the client flag cleared; warm-up and
    /// non-ping messages get no reply.
    Sockperf,
}

/// One lane's echo handler.
pub struct Echo {
    work: u64,
    mode: EchoMode,
    stats: Arc<EchoStats>,
    /// Reused buffer for sockperf replies (they differ from the request).
    scratch: Vec<u8>,
}

impl Echo {
    /// A handler running `work` xorshift rounds per echo.
    pub fn new(work: u64, mode: EchoMode, stats: Arc<EchoStats>) -> Echo {
        Echo {
            work,
            mode,
            stats,
            scratch: Vec::with_capacity(64 * 1024),
        }
    }
}

impl ServerHandler for Echo {
    type SessionState = ();

    fn connect(&mut self, _ctx: &mut ServerCtx<'_, ()>, _peer: SocketAddr, _: &[u8]) -> Option<()> {
        Some(())
    }

    fn datagram(&mut self, session: &mut Session<'_, ()>, data: &[u8]) {
        match self.mode {
            EchoMode::Bench => {
                if decode_header(data).is_err() {
                    self.stats.invalid.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if self.work > 0 {
                    std::hint::black_box(server_work(&data[..HEADER_LEN], self.work));
                }
                // Refusals are counted by the lane (server_send_rejections).
                let _ = session.send(data);
            }
            EchoMode::Sockperf => match sockperf_classify(data) {
                SockperfVerdict::Reply => {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(data);
                    crate::message::sockperf_reply(&mut self.scratch);
                    if self.work > 0 {
                        std::hint::black_box(server_work(data, self.work));
                    }
                    let _ = session.send(&self.scratch);
                }
                SockperfVerdict::NoReply => {}
                SockperfVerdict::Invalid => {
                    self.stats.invalid.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
    }
}
