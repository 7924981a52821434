//! The trait a game implements: what a server lane does with its sessions.

use std::net::SocketAddr;

use keel_reactor::TimerId;

use super::ctx::ServerCtx;
use super::session::Session;
use crate::error::DisconnectReason;

/// What a server does with its sessions. One handler value per lane; its
/// methods run on that lane only, so they get `&mut self` without locks.
///
/// Order per peer: `accept` (with the peer's first datagram, which it may
/// refuse), then `datagram` for each datagram in arrival order (the first
/// one included), then at most one `disconnected`.
pub trait ServerHandler: Send + 'static {
    /// Per-session state, owned by the lane.
    type SessionState: Send + 'static;

    /// The lane is set up (socket bound and registered): start timers here,
    /// e.g. a game tick.
    fn started(&mut self, ctx: &mut ServerCtx<'_, Self::SessionState>) {
        let _ = ctx;
    }

    /// Admission: a datagram (`first`) came from a peer without a session.
    /// Return its state to admit it (then `first` is delivered to
    /// [`datagram`](Self::datagram) as well), or `None` to turn it away:
    /// nothing is kept for the peer, no `disconnected` follows, and the
    /// refusal is counted in `sessions_rejected`. Check a join token here,
    /// before the peer costs anything.
    ///
    /// With a full table and [`FullPolicy::Refuse`](crate::FullPolicy::Refuse) this is not called (the
    /// datagram is counted in `sessions_refused`); with
    /// [`FullPolicy::EvictIdlest`](crate::FullPolicy::EvictIdlest) a session is evicted only once this
    /// admitted the newcomer.
    fn accept(
        &mut self,
        ctx: &mut ServerCtx<'_, Self::SessionState>,
        peer: SocketAddr,
        first: &[u8],
    ) -> Option<Self::SessionState>;

    /// A datagram from a peer with a session. Replies sent here go out with
    /// one `sendmmsg` at the end of the receive batch.
    fn datagram(&mut self, session: &mut Session<'_, Self::SessionState>, data: &[u8]);

    /// A session ended; `state` is handed back.
    fn disconnected(
        &mut self,
        ctx: &mut ServerCtx<'_, Self::SessionState>,
        peer: SocketAddr,
        state: Self::SessionState,
        reason: DisconnectReason,
    ) {
        let _ = (ctx, peer, state, reason);
    }

    /// A lane timer made with [`ServerCtx::timer`] fired.
    fn timer(&mut self, ctx: &mut ServerCtx<'_, Self::SessionState>, timer: TimerId) {
        let _ = (ctx, timer);
    }

    /// A session timer made with [`Session::timer`] fired. It never fires
    /// after its session ended.
    fn session_timer(&mut self, session: &mut Session<'_, Self::SessionState>, timer: TimerId) {
        let _ = (session, timer);
    }
}
