//! `ikcp`: KCP's C implementation (ikcp.c, from the crates.io package
//! kcp-sys 0.1.0; bench-peers/ikcp/README.md), run by the same pump as the
//! `kcp` crate's row ([`crate::kcp_peer`]), so the two rows differ only in
//! the library and its nodelay.
//!
//! Tuned: KCP test.cpp's "fast" mode as the issue asks, `ikcp_nodelay(kcp,
//! 2, 10, 2, 1)` (nodelay 2, interval 10 ms, fast resend after 2 later
//! acks, no congestion window), then `rx_minrto = 10` and `fastresend = 1`
//! (test.cpp's next two lines), and windows 128/128 (its `ikcp_wndsize`).
//! ikcp_nodelay(2) alone would leave the minimum RTO at 30 ms
//! (`IKCP_RTO_NDL`). Defaults: ikcp_create's, as the `kcp` row's.

pub mod sys;

use crate::kcp_peer::{Arq, Out};

/// KCP test.cpp's "fast" mode: (nodelay, interval, resend, nc).
pub const FAST: (i32, i32, i32, i32) = (2, 10, 2, 1);
/// test.cpp's `kcp->rx_minrto`, ms.
pub const FAST_MINRTO: i32 = 10;
/// test.cpp's `kcp->fastresend`.
pub const FAST_RESEND: i32 = 1;
/// test.cpp's `ikcp_wndsize`.
pub const FAST_WINDOWS: (i32, i32) = (128, 128);

/// Puts `k` in test.cpp's fast mode (the tuned row).
pub fn fast<W: std::io::Write>(k: &mut sys::Ikcp<W>) {
    let (nodelay, interval, resend, nc) = FAST;
    k.nodelay(nodelay, interval, resend, nc);
    k.set_minrto(FAST_MINRTO);
    k.set_fastresend(FAST_RESEND);
    k.wndsize(FAST_WINDOWS.0, FAST_WINDOWS.1);
}

/// The C ikcp behind the pump.
pub struct Ikcp(sys::Ikcp<Out>);

impl Arq for Ikcp {
    const NAME: &'static str = "ikcp";

    fn create(conv: u32, out: Out, tuned: bool) -> Option<Self> {
        let mut k = sys::Ikcp::new(conv, out)?;
        if tuned {
            fast(&mut k);
        }
        Some(Ikcp(k))
    }

    fn update(&mut self, now: u32) {
        self.0.update(now);
    }

    fn check(&self, now: u32) -> u32 {
        // ikcp_check returns a time; the pump wants a delay.
        self.0.check(now).wrapping_sub(now).min(10_000)
    }

    fn input(&mut self, data: &[u8]) -> bool {
        self.0.input(data) >= 0
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        usize::try_from(self.0.recv(buf)).ok()
    }

    fn send(&mut self, msg: &[u8]) -> bool {
        self.0.send(msg) >= 0
    }

    fn wait_snd(&self) -> usize {
        usize::try_from(self.0.waitsnd()).unwrap_or(0)
    }

    fn settings(tuned: bool) -> String {
        if tuned {
            "ikcp.c (C, kcp-sys 0.1.0's copy of upstream): fast (KCP test.cpp): nodelay 2, \
             interval 10, resend 2 then fastresend 1, nc 1 (no congestion window), minrto 10, \
             windows 128/128, mtu 1400"
                .into()
        } else {
            "ikcp.c (C) defaults: nodelay 0, interval 100, resend 0, congestion window on, \
             minrto 100, windows 32/128, mtu 1400"
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::{self, Write};
    use std::rc::Rc;

    /// Datagrams written by one ikcp, for the other to read.
    #[derive(Clone, Default)]
    struct Wire(Rc<RefCell<Vec<Vec<u8>>>>);

    impl Write for Wire {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().push(data.to_vec());
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn tuned_is_test_cpp_fast_mode_with_nodelay_2() {
        let mut k = sys::Ikcp::new(7, Wire::default()).expect("ikcp_create");
        let d = k.settings();
        assert_eq!(
            (d.nodelay, d.interval, d.minrto, d.nocwnd),
            (0, 100, 100, 0)
        );
        fast(&mut k);
        let s = k.settings();
        assert_eq!(
            (s.nodelay, s.interval, s.fastresend, s.nocwnd, s.minrto),
            (2, 10, 1, 1, 10)
        );
        assert_eq!((s.snd_wnd, s.rcv_wnd, s.mtu), (128, 128, 1400));
    }

    #[test]
    fn two_ikcps_deliver_in_order_through_a_lossy_wire() {
        let (ab, ba) = (Wire::default(), Wire::default());
        let mut a = sys::Ikcp::new(1, ab.clone()).expect("ikcp_create");
        let mut b = sys::Ikcp::new(1, ba.clone()).expect("ikcp_create");
        fast(&mut a);
        fast(&mut b);
        for m in 0u8..20 {
            assert!(a.send(&[m; 300]) >= 0);
        }
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2048];
        let mut dropped = 0;
        for now in (0..2_000u32).step_by(5) {
            a.update(now);
            b.update(now);
            // Drop every third datagram a sends (data and acks alike).
            for (i, d) in ab.0.borrow_mut().drain(..).enumerate() {
                if i % 3 == 2 {
                    dropped += 1;
                } else {
                    assert_eq!(b.input(&d), 0);
                }
            }
            for d in ba.0.borrow_mut().drain(..) {
                assert_eq!(a.input(&d), 0);
            }
            loop {
                let n = b.recv(&mut buf);
                if n < 0 {
                    break;
                }
                got.push(buf[..n as usize].to_vec());
            }
            if got.len() == 20 && a.waitsnd() == 0 {
                break;
            }
        }
        assert!(dropped > 0);
        assert_eq!(got.len(), 20);
        for (m, g) in got.iter().enumerate() {
            assert_eq!(g, &vec![m as u8; 300]);
        }
        assert_eq!(a.waitsnd(), 0);
        // A datagram of another conversation, and garbage, are refused.
        let mut c = sys::Ikcp::new(2, Wire::default()).expect("ikcp_create");
        c.update(0);
        assert!(c.send(b"x") >= 0);
        c.update(10);
        assert!(b.input(&[0xff; 10]) < 0);
        assert!(b.input(&[]) < 0);
    }
}
