//! The endpoint: what a server lane, a client and a datagram socket share.
//! Each is a lane owning one socket, split into its receive half ([`Rx`])
//! and send half ([`Tx`]), and implementing [`Endpoint`]. A datagram's
//! path, top to bottom:
//!
//! 1. The socket becomes readable; the lane's `on_ready` calls [`receive`].
//! 2. [`Rx::recv`] reads a batch with one system call (`recvmmsg`) into the
//!    caller-owned [`RecvBatch`](crate::sys::RecvBatch), counting what came
//!    in and the kernel drops reported with it.
//! 3. [`Endpoint::batch`] hands it on; [`Rx::deliver_batch`] walks it in
//!    arrival order (through the receive conditioner, if one is set),
//!    giving each [`Datagram`] to the endpoint's handler (for a server,
//!    through its sessions).
//! 4. The handler's replies go to [`Tx::send`]: into the pending batch (or
//!    the send conditioner first).
//! 5. After the batch, [`Tx::flush`] sends them with one `sendmmsg`; what
//!    would block waits in the bounded queue and leaves on writable
//!    ([`Tx::on_writable`], via `finish`, which asks for writable readiness
//!    exactly while the queue holds datagrams).
//!
//! Around the path: [`start`] sets a lane up (register, the handler's
//! `started`, first flush), [`offer_send`] hands sends from other threads
//! to the lane through its bounded inbox, [`conditioner_timer`] serves the
//! conditioners' timers, and closing is [`Rx::close_door`] (no more
//! arrivals, the rest counted) and [`DropSignal`] (waiters learn the socket
//! is gone).

mod rx;
mod tx;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use keel_reactor::{Flow, Handle, Lane, LaneCtx, LaneHandle, LaneOptions, Ready, TimerId};

use crate::config::LaneSteering;
use crate::counters::{bump, bump_shared, Counters};
use crate::error::SendError;
use crate::inbox::{offer, Accepted};
use crate::socket::{self, SocketBuffers, SocketOptions};
use crate::sys;

pub(crate) use crate::timers::Timers;
pub(crate) use rx::{Datagram, Rx};
pub(crate) use tx::Tx;

/// Batches of datagrams one readiness event may handle before the lane
/// yields to other lanes (it is put back on the run queue).
pub(crate) const RECV_BATCHES_PER_EVENT: usize = 16;

/// What an endpoint lane (server lane, client, datagram socket) does: the
/// parts of the path above that differ between them.
pub(crate) trait Endpoint: Lane {
    /// The lane's receive and send halves.
    fn sides(&mut self) -> (&mut Rx, &mut Tx);

    /// Handles the `n` datagrams just received. Returning false stops the
    /// loop (the endpoint ended).
    fn batch(&mut self, cx: &mut LaneCtx<'_, Self>, n: usize) -> bool;

    /// A receive error other than `WouldBlock` and `Interrupted`, already
    /// counted in `recv_errors`. Returning false stops the loop.
    fn recv_error(&mut self, cx: &mut LaneCtx<'_, Self>, e: io::Error) -> bool {
        let _ = (cx, e);
        true
    }

    /// The endpoint is closing: work from other threads is not run (its
    /// sends are counted as discarded).
    fn closing(&self) -> bool;

    /// A send handed over from another thread ([`offer_send`]); `dest` is
    /// `None` for the connected peer.
    fn send_remote(&mut self, dest: Option<SocketAddr>, data: &[u8]);

    /// After work from another thread ran on the lane: flush, and act on
    /// what the work asked for (a close).
    fn settle(&mut self, cx: &mut LaneCtx<'_, Self>);
}

/// Starts `state` as a lane on `reactor`: registers its socket, runs
/// `started` (the handler's), flushes what it sent. Readiness that
/// arrives meanwhile is handled once this returns. On a registration error
/// the lane is closed and the error returned.
pub(crate) fn start<L: Endpoint>(
    reactor: &Handle,
    state: L,
    options: LaneOptions,
    started: impl FnOnce(&mut L, &mut LaneCtx<'_, L>),
) -> io::Result<LaneHandle<L>> {
    let (lane, registered) = reactor.add_lane_with_options(state, options, |st, cx| {
        st.sides().1.register(cx)?;
        started(st, cx);
        st.settle(cx);
        Ok::<(), io::Error>(())
    });
    match registered {
        Ok(()) => Ok(lane),
        Err(e) => {
            let _ = lane.post_control(|_, cx| cx.close());
            Err(e)
        }
    }
}

/// Refuses an empty reactor list, before anything is bound.
pub(crate) fn check_reactors(reactors: &[Handle]) -> io::Result<()> {
    if reactors.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "reactors: expected at least one reactor handle",
        ));
    }
    Ok(())
}

/// Binds the `lanes` sockets of a group on `addr` (several share the port
/// with `SO_REUSEPORT`; see `socket::bind_group`) and, with more than one,
/// attaches the `steering` program that spreads datagrams over them. Every
/// socket is bound before any lane starts, so a failure leaves nothing
/// running.
pub(crate) fn bind_lanes(
    addr: SocketAddr,
    opts: &SocketOptions,
    lanes: usize,
    steering: LaneSteering,
) -> io::Result<(Vec<mio::net::UdpSocket>, SocketBuffers)> {
    let (sockets, buffers) = socket::bind_group(addr, opts, lanes)?;
    if lanes > 1 {
        let n = lanes as u32;
        let (attached, program) = match steering {
            LaneSteering::KernelHash => return Ok((sockets, buffers)),
            LaneSteering::PeerPort => (
                sys::attach_port_steering(&sockets[0], n),
                "peer-port".to_string(),
            ),
            LaneSteering::PayloadByte {
                offset,
                hash_if_first_byte_has,
                hash_source_ip,
            } => (
                sys::attach_payload_steering(
                    &sockets[0],
                    offset,
                    hash_if_first_byte_has,
                    hash_source_ip,
                    n,
                ),
                format!("{steering:?}"),
            ),
        };
        let local = sockets[0].local_addr()?;
        attached.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("steering: attaching the {program} program on {local}: {e}"),
            )
        })?;
    }
    Ok((sockets, buffers))
}

/// Refuses (and counts in `send_too_large`) a payload over the UDP limit
/// of `to`'s family, before anything is copied or queued.
pub(crate) fn check_size(
    counters: &Counters,
    to: &SocketAddr,
    data: &[u8],
) -> Result<(), SendError> {
    let limit = sys::max_payload(to);
    if data.len() > limit {
        bump_shared(&counters.send_too_large, 1);
        return Err(SendError::TooLarge {
            size: data.len(),
            limit,
        });
    }
    Ok(())
}

/// A send from another thread: checks the size against `to`'s family,
/// copies `data` and hands it to `lane` through its bounded inbox, where
/// [`Endpoint::send_remote`] sends it to `dest` (`None`: the connected
/// peer, `to`). A send the lane closes before it gets to is counted in
/// `send_discarded`.
pub(crate) fn offer_send<L: Endpoint>(
    lane: &LaneHandle<L>,
    counters: &Arc<Counters>,
    dest: Option<SocketAddr>,
    to: SocketAddr,
    data: &[u8],
) -> Result<(), SendError> {
    check_size(counters, &to, data)?;
    let data = data.to_vec();
    let guard = Accepted::new(counters);
    offer(lane, counters, move |st, cx| {
        if st.closing() {
            return; // `guard` counts it
        }
        guard.done();
        st.send_remote(dest, &data);
        st.settle(cx);
    })
}

/// Which conditioner a timer belongs to.
pub(crate) enum ConditionerTimer {
    /// The send conditioner's: its due datagrams went to the send path
    /// (the lane's flush sends them).
    Send,
    /// The receive conditioner's: the lane delivers what is due
    /// ([`Rx::deliver_held`]).
    Receive,
    /// Neither: the handler's own timer.
    None,
}

/// Serves the conditioners' part of a lane's `on_timer`.
pub(crate) fn conditioner_timer(rx: &mut Rx, tx: &mut Tx, timer: TimerId) -> ConditionerTimer {
    if tx.release_held(timer) {
        ConditionerTimer::Send
    } else if rx.owns_timer(timer) {
        ConditionerTimer::Receive
    } else {
        ConditionerTimer::None
    }
}

/// Tells whoever waits for an endpoint to close (`stop_and_wait`,
/// `close_and_wait`) that its state is gone. Keep it the lane state's
/// *last* field: fields are dropped in declaration order, so when it
/// signals, the socket is closed (its port free again) and the counters
/// have their final values (`Tx` counts what it discarded as it drops).
#[derive(Default)]
pub(crate) struct DropSignal(Vec<std::sync::mpsc::Sender<()>>);

impl DropSignal {
    pub(crate) fn push(&mut self, done: std::sync::mpsc::Sender<()>) {
        self.0.push(done);
    }
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        for done in self.0.drain(..) {
            let _ = done.send(());
        }
    }
}

/// The receive loop every endpoint runs on readiness: flushes the send
/// queue if writable, then reads batches until the socket is drained (a
/// short batch: a datagram arriving later raises a new edge), the
/// endpoint stops, or `RECV_BATCHES_PER_EVENT` batches were read (then the
/// lane yields). What the handlers sent during a batch goes out with one
/// `sendmmsg` right after it.
pub(crate) fn receive<L: Endpoint>(lane: &mut L, cx: &mut LaneCtx<'_, L>, ready: Ready) -> Flow {
    if ready.is_writable() {
        lane.sides().1.on_writable();
    }
    for _ in 0..RECV_BATCHES_PER_EVENT {
        let (rx, tx) = lane.sides();
        match rx.recv(tx) {
            Ok(n) => {
                let drained = !rx.was_full(n);
                let go_on = lane.batch(cx, n);
                lane.sides().1.flush();
                if drained || !go_on {
                    return Flow::Drained;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Flow::Drained,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                bump(&tx.counters.recv_errors, 1);
                if !lane.recv_error(cx, e) {
                    return Flow::Drained;
                }
            }
        }
    }
    Flow::Yielded
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket as StdSocket};
    use std::sync::mpsc;

    use keel_reactor::{IoModel, Runtime};

    use super::*;
    use crate::config::EndpointConfig;
    use crate::socket::{bind, SocketOptions};
    use keel_reactor::SourceId;
    use std::time::{Duration, Instant};

    /// A lane that only receives and reports each batch's size.
    struct Counting {
        rx: Rx,
        tx: Tx,
        batches: mpsc::Sender<usize>,
    }

    impl Endpoint for Counting {
        fn sides(&mut self) -> (&mut Rx, &mut Tx) {
            (&mut self.rx, &mut self.tx)
        }

        fn batch(&mut self, _: &mut LaneCtx<'_, Self>, n: usize) -> bool {
            let _ = self.batches.send(n);
            true
        }

        fn closing(&self) -> bool {
            false
        }

        fn send_remote(&mut self, dest: Option<SocketAddr>, data: &[u8]) {
            let _ = self.tx.send(dest, data);
        }

        fn settle(&mut self, _: &mut LaneCtx<'_, Self>) {}
    }

    impl Lane for Counting {
        fn on_ready(&mut self, cx: &mut LaneCtx<'_, Self>, _: SourceId, ready: Ready) -> Flow {
            receive(self, cx, ready)
        }
    }

    /// Queues `BACKLOG` datagrams on a socket before its lane registers it,
    /// so they all wait behind the lane's first (edge-triggered) readiness,
    /// then checks the lane delivers every one without another datagram
    /// arriving to raise a new edge.
    ///
    /// The backlog is larger than the receive slots a lane starts with (8)
    /// and than the default batch, so the lane must also keep reading
    /// after a full call of the smaller size while the slots grow, and
    /// (batched) reach calls of the whole configured batch.
    fn backlog_is_drained(batch: usize, one_per_call: bool) {
        const BACKLOG: usize = 150;
        let cfg = EndpointConfig {
            batch,
            ..EndpointConfig::default()
        };
        let opts = SocketOptions {
            recv_buffer: Some(1 << 20),
            ..SocketOptions::default()
        };
        let (socket, _) = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), &opts).unwrap();
        let to = socket.local_addr().unwrap();
        let peer = StdSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        for i in 0..BACKLOG {
            peer.send_to(&[i as u8; 32], to).unwrap();
        }
        let counters = Arc::new(Counters::default());
        let mut rx = Rx::new(&cfg, &counters, 0);
        if one_per_call {
            rx.batch.force_one_per_call();
        }
        let tx = Tx::new(socket, &cfg, counters.clone(), 0).unwrap();
        let (batches, sizes) = mpsc::channel();
        let rt = Runtime::new(IoModel::Shared { threads: 1 }).unwrap();
        let (lane, registered) = rt
            .handle()
            .add_lane_with(Counting { rx, tx, batches }, |st, cx| {
                st.tx.register(cx).map(|_| ())
            });
        registered.unwrap();
        // Loopback queued all of them before the registration: they arrive
        // in microseconds or, if the lane stops early, never.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = 0;
        let mut largest = 0;
        while got < BACKLOG {
            let left = deadline.saturating_duration_since(Instant::now());
            match sizes.recv_timeout(left) {
                Ok(n) => {
                    assert!(n <= batch, "a batch of {n} with batch size {batch}");
                    got += n;
                    largest = largest.max(n);
                }
                Err(_) => panic!(
                    "batch {batch}, one per call {one_per_call}: only {got} of the \
                     {BACKLOG} queued datagrams were delivered; the rest stalled"
                ),
            }
        }
        assert_eq!(got, BACKLOG);
        let expect = if one_per_call { 1 } else { batch };
        assert_eq!(
            largest, expect,
            "batch {batch}, one per call {one_per_call}: the receive slots never \
             grew to the batch"
        );
        lane.close();
        rt.stop().unwrap();
    }

    /// The portable path (one datagram per call) with the default batch:
    /// every call is "full", so the lane must keep reading.
    #[test]
    fn backlog_is_drained_one_datagram_per_call_with_a_larger_batch() {
        backlog_is_drained(crate::config::DEFAULT_BATCH, true);
    }

    #[test]
    fn backlog_is_drained_batched() {
        backlog_is_drained(crate::config::DEFAULT_BATCH, false);
        backlog_is_drained(7, false);
    }

    #[test]
    fn backlog_is_drained_with_batch_one() {
        backlog_is_drained(1, false);
    }
}
