//! KCP's C API (ikcp.h, compiled from ikcp/ikcp.c by build.rs) and our
//! shim (ikcp/shim.c): the declarations the `ikcp` peer uses and a safe
//! owner over them. The only unsafe code of the peer; each block says why
//! it holds.
//!
//! `ikcpcb` stays opaque: the two fields KCP's test.cpp writes directly
//! (`rx_minrto`, `fastresend`) go through the shim.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_long, c_void};
use std::io::Write;
use std::ptr::NonNull;

/// `struct IKCPCB`, opaque.
#[repr(C)]
struct IkcpCb {
    _private: [u8; 0],
}

type OutputFn = extern "C" fn(*const c_char, c_int, *mut IkcpCb, *mut c_void) -> c_int;

extern "C" {
    fn ikcp_create(conv: u32, user: *mut c_void) -> *mut IkcpCb;
    fn ikcp_release(kcp: *mut IkcpCb);
    fn ikcp_setoutput(kcp: *mut IkcpCb, output: OutputFn);
    fn ikcp_recv(kcp: *mut IkcpCb, buffer: *mut c_char, len: c_int) -> c_int;
    fn ikcp_send(kcp: *mut IkcpCb, buffer: *const c_char, len: c_int) -> c_int;
    fn ikcp_update(kcp: *mut IkcpCb, current: u32);
    fn ikcp_check(kcp: *const IkcpCb, current: u32) -> u32;
    fn ikcp_input(kcp: *mut IkcpCb, data: *const c_char, size: c_long) -> c_int;
    fn ikcp_wndsize(kcp: *mut IkcpCb, sndwnd: c_int, rcvwnd: c_int) -> c_int;
    fn ikcp_waitsnd(kcp: *const IkcpCb) -> c_int;
    fn ikcp_nodelay(
        kcp: *mut IkcpCb,
        nodelay: c_int,
        interval: c_int,
        resend: c_int,
        nc: c_int,
    ) -> c_int;
    fn keel_ikcp_set_minrto(kcp: *mut IkcpCb, minrto: c_int);
    fn keel_ikcp_set_fastresend(kcp: *mut IkcpCb, resend: c_int);
    fn keel_ikcp_settings(kcp: *const IkcpCb, out: *mut c_long);
}

/// ikcp's settings as read back from the `ikcpcb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `nodelay` (0, 1 or 2).
    pub nodelay: i64,
    /// `interval`, ms.
    pub interval: i64,
    /// `fastresend`.
    pub fastresend: i64,
    /// `nocwnd`.
    pub nocwnd: i64,
    /// `rx_minrto`, ms.
    pub minrto: i64,
    /// `snd_wnd`.
    pub snd_wnd: i64,
    /// `rcv_wnd`.
    pub rcv_wnd: i64,
    /// `mtu`.
    pub mtu: i64,
}

/// One `ikcpcb` and the writer its output callback writes to.
pub struct Ikcp<W: Write> {
    kcp: NonNull<IkcpCb>,
    /// Boxed so its address (ikcp's `user`) stays put; read only by
    /// `output::<W>` during calls on `kcp`.
    out: NonNull<W>,
}

/// ikcp's output callback: writes the datagram to the `W` that `user`
/// points to.
extern "C" fn output<W: Write>(
    buf: *const c_char,
    len: c_int,
    _kcp: *mut IkcpCb,
    user: *mut c_void,
) -> c_int {
    if buf.is_null() || len <= 0 || user.is_null() {
        return 0;
    }
    // SAFETY: ikcp calls output only from ikcp_flush (inside ikcp_update or
    // ikcp_flush called through `Ikcp`'s `&mut self` methods), with `buf`
    // pointing to `len` initialized bytes of its own buffer, valid for the
    // call; `user` is the `W` given to ikcp_create by `Ikcp::new`, alive
    // until `Ikcp`'s drop (after ikcp_release), and no other reference to
    // it exists while an `&mut self` method of `Ikcp` runs.
    let (data, w) = unsafe {
        (
            std::slice::from_raw_parts(buf.cast::<u8>(), len as usize),
            &mut *user.cast::<W>(),
        )
    };
    let _ = w.write(data);
    len
}

impl<W: Write> Ikcp<W> {
    /// `ikcp_create(conv)` with `out` as its output. `None` if ikcp could
    /// not allocate.
    pub fn new(conv: u32, out: W) -> Option<Self> {
        let out = NonNull::from(Box::leak(Box::new(out)));
        // SAFETY: ikcp_create only stores `user` (our boxed writer) and
        // allocates; a null return is handled below.
        let raw = unsafe { ikcp_create(conv, out.as_ptr().cast()) };
        let Some(kcp) = NonNull::new(raw) else {
            // SAFETY: `out` came from Box::leak above and was not given to
            // anything that outlives this call.
            drop(unsafe { Box::from_raw(out.as_ptr()) });
            return None;
        };
        // SAFETY: `kcp` is a live ikcpcb; `output::<W>` matches ikcp.h's
        // output signature and reads `user` as a `W`, which it is.
        unsafe { ikcp_setoutput(kcp.as_ptr(), output::<W>) };
        Some(Ikcp { kcp, out })
    }

    /// `ikcp_nodelay(nodelay, interval, resend, nc)`.
    pub fn nodelay(&mut self, nodelay: i32, interval: i32, resend: i32, nc: i32) {
        // SAFETY: `self.kcp` is a live ikcpcb owned by `self`.
        unsafe { ikcp_nodelay(self.kcp.as_ptr(), nodelay, interval, resend, nc) };
    }

    /// `ikcp_wndsize(snd, rcv)`.
    pub fn wndsize(&mut self, snd: i32, rcv: i32) {
        // SAFETY: as in `nodelay`.
        unsafe { ikcp_wndsize(self.kcp.as_ptr(), snd, rcv) };
    }

    /// `kcp->rx_minrto = ms`.
    pub fn set_minrto(&mut self, ms: i32) {
        // SAFETY: as in `nodelay`; the shim writes one field.
        unsafe { keel_ikcp_set_minrto(self.kcp.as_ptr(), ms) };
    }

    /// `kcp->fastresend = resend`.
    pub fn set_fastresend(&mut self, resend: i32) {
        // SAFETY: as in `set_minrto`.
        unsafe { keel_ikcp_set_fastresend(self.kcp.as_ptr(), resend) };
    }

    /// The settings now in force.
    pub fn settings(&self) -> Settings {
        let mut v: [c_long; 8] = [0; 8];
        // SAFETY: `self.kcp` is live; the shim writes exactly 8 longs to
        // `v`, which has room for 8.
        unsafe { keel_ikcp_settings(self.kcp.as_ptr(), v.as_mut_ptr()) };
        let v = v.map(i64::from);
        Settings {
            nodelay: v[0],
            interval: v[1],
            fastresend: v[2],
            nocwnd: v[3],
            minrto: v[4],
            snd_wnd: v[5],
            rcv_wnd: v[6],
            mtu: v[7],
        }
    }

    /// `ikcp_update(now)` (may call the output).
    pub fn update(&mut self, now: u32) {
        // SAFETY: `self.kcp` is live; the output callback it may call reads
        // `self.out`, which `&mut self` keeps unaliased.
        unsafe { ikcp_update(self.kcp.as_ptr(), now) };
    }

    /// `ikcp_check(now)`: the time (ms, ikcp's clock) `update` is due.
    pub fn check(&self, now: u32) -> u32 {
        // SAFETY: `self.kcp` is live; ikcp_check only reads it.
        unsafe { ikcp_check(self.kcp.as_ptr(), now) }
    }

    /// `ikcp_input(data)`: ikcp's result (0 accepted, < 0 refused).
    pub fn input(&mut self, data: &[u8]) -> i32 {
        let Ok(n) = c_long::try_from(data.len()) else {
            return -1;
        };
        // SAFETY: `self.kcp` is live; ikcp_input reads at most `n` bytes
        // from `data`, which has `n` (it checks every length field against
        // the bytes left before reading).
        unsafe { ikcp_input(self.kcp.as_ptr(), data.as_ptr().cast(), n) }
    }

    /// `ikcp_recv` into `buf`: a message's length, or ikcp's negative
    /// result (nothing whole to receive, or `buf` too short).
    pub fn recv(&mut self, buf: &mut [u8]) -> i32 {
        let n = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        // SAFETY: `self.kcp` is live; ikcp_recv writes a message only if
        // its size is at most `n` (it returns -3 otherwise), and `buf` has
        // at least `n` bytes.
        unsafe { ikcp_recv(self.kcp.as_ptr(), buf.as_mut_ptr().cast(), n) }
    }

    /// `ikcp_send(msg)`: the bytes queued, or < 0 refused.
    pub fn send(&mut self, msg: &[u8]) -> i32 {
        let Ok(n) = c_int::try_from(msg.len()) else {
            return -1;
        };
        // SAFETY: `self.kcp` is live; ikcp_send copies `n` bytes from
        // `msg`, which has `n`.
        unsafe { ikcp_send(self.kcp.as_ptr(), msg.as_ptr().cast(), n) }
    }

    /// `ikcp_waitsnd`.
    pub fn waitsnd(&self) -> i32 {
        // SAFETY: `self.kcp` is live; ikcp_waitsnd only reads it.
        unsafe { ikcp_waitsnd(self.kcp.as_ptr()) }
    }
}

impl<W: Write> Drop for Ikcp<W> {
    fn drop(&mut self) {
        // SAFETY: `self.kcp` is live and released once, here; ikcp_release
        // frees its queues without calling the output. Then `self.out`,
        // leaked from a Box in `new` and used by nothing else now, is
        // freed once.
        unsafe {
            ikcp_release(self.kcp.as_ptr());
            drop(Box::from_raw(self.out.as_ptr()));
        }
    }
}
