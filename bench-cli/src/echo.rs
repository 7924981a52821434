//! The benchmark's echo server handler: validates the header, runs the
//! configured work inside the receive lane, echoes to the sender. In
//! sockperf mode it answers sockperf's ping-pong client instead.
//!
//! A datagram that fails the check opens no session: [`Echo::accept`]
//! checks a new peer's first datagram and turns it away if it is not a
//! message of the mode (counted in [`EchoStats::invalid`], and by keel-udp
//! in `sessions_rejected`), so a flood of garbage from spoofed sources
//! cannot fill the session table.
//!
//! Every datagram the handler sees ends in exactly one of
//! [`EchoStats::answered`], [`EchoStats::unanswered_warmup`],
//! [`EchoStats::unanswered_no_reply`] and [`EchoStats::invalid`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use keel_udp::{ServerCtx, ServerHandler, Session};

use crate::message::{
    decode_header, server_work, sockperf_classify, sockperf_is_warmup, SockperfVerdict, HEADER_LEN,
};

/// What the echo server did with the datagrams its handlers saw, summed
/// over every lane. The counts are per lane underneath (each lane writes
/// only its own, on its own cache line), so counting every echo costs no
/// contention between lanes.
#[derive(Debug, Default)]
pub struct EchoStats {
    /// Datagrams that were not benchmark (or sockperf) messages, whether or
    /// not their peer had a session (a new peer's bad first datagram opens
    /// none).
    pub invalid: AtomicU64,
    lanes: Mutex<Vec<Arc<LaneCounts>>>,
}

/// One lane's counts: written by that lane only.
#[derive(Debug, Default)]
#[repr(align(64))]
struct LaneCounts {
    answered: AtomicU64,
    warmup: AtomicU64,
    no_reply: AtomicU64,
}

/// Single-writer increment (only the lane's thread writes its counts).
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

impl EchoStats {
    fn lane(&self) -> Arc<LaneCounts> {
        let counts = Arc::new(LaneCounts::default());
        self.lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(counts.clone());
        counts
    }

    fn sum(&self, field: fn(&LaneCounts) -> &AtomicU64) -> u64 {
        self.lanes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|c| field(c).load(Ordering::Relaxed))
            .sum()
    }

    /// Datagrams answered: an echo (or sockperf reply) was handed to the
    /// send path (a refusal there is counted by keel-udp as a send
    /// rejection).
    pub fn answered(&self) -> u64 {
        self.sum(|c| &c.answered)
    }

    /// sockperf warm-up messages: well-formed, deliberately not answered
    /// (sockperf's own server does not answer them either).
    pub fn unanswered_warmup(&self) -> u64 {
        self.sum(|c| &c.warmup)
    }

    /// sockperf messages that ask for no reply (no pong request, e.g. the
    /// under-load mode's): well-formed, deliberately not answered.
    pub fn unanswered_no_reply(&self) -> u64 {
        self.sum(|c| &c.no_reply)
    }
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
    counts: Arc<LaneCounts>,
    /// Reused buffer for sockperf replies (they differ from the request).
    scratch: Vec<u8>,
}

impl Echo {
    /// A handler running `work` xorshift rounds per echo, counting into
    /// `stats` (one handler per lane; each gets its own counts there).
    pub fn new(work: u64, mode: EchoMode, stats: Arc<EchoStats>) -> Echo {
        Echo {
            work,
            mode,
            counts: stats.lane(),
            stats,
            scratch: Vec::with_capacity(64 * 1024),
        }
    }

    /// Whether `data` is a message of this mode (the check a datagram must
    /// pass to be answered, or to open a session).
    fn valid(&self, data: &[u8]) -> bool {
        match self.mode {
            EchoMode::Bench => decode_header(data).is_ok(),
            EchoMode::Sockperf => sockperf_classify(data) != SockperfVerdict::Invalid,
        }
    }
}

impl ServerHandler for Echo {
    type SessionState = ();

    /// Admits a new peer only if its first datagram passes the check: a
    /// session is never opened for garbage (the datagram is counted as
    /// invalid here, and in keel-udp's `sessions_rejected`).
    fn accept(
        &mut self,
        _ctx: &mut ServerCtx<'_, ()>,
        _peer: SocketAddr,
        first: &[u8],
    ) -> Option<()> {
        if self.valid(first) {
            Some(())
        } else {
            self.stats.invalid.fetch_add(1, Ordering::Relaxed);
            None
        }
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
                bump(&self.counts.answered);
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
                    bump(&self.counts.answered);
                    let _ = session.send(&self.scratch);
                }
                SockperfVerdict::NoReply if sockperf_is_warmup(data) => {
                    bump(&self.counts.warmup);
                }
                SockperfVerdict::NoReply => bump(&self.counts.no_reply),
                SockperfVerdict::Invalid => {
                    self.stats.invalid.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
    }
}
