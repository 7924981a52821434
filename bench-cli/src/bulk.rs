//! The bulk case (`--transfer BYTES`, `--protocol rudp` or `kcp`): how long
//! a large message takes to arrive, and the goodput that makes.
//!
//! Each client sends one message of `BYTES` bytes at a time: a benchmark
//! message of `crate::message` (16-byte header, then the deterministic
//! fill), so the server checks every byte. Once the server has the whole
//! message and it checks, it answers with a receipt of [`RECEIPT_LEN`]
//! bytes: the message's own header (magic, phase, client id, sequence), a
//! header-only benchmark message. The client checks the receipt (length,
//! header, client id, the sequence it waits for), records the completion
//! time and at once hands the next message to the protocol. A message that
//! does not check gets no receipt and counts in the server's `invalid`
//! (`unexpected_messages`), so its transfer never completes and the run
//! fails. So the client
//! side is the echo's ([`crate::peer::Driver`]) with a window of one, a
//! message of `BYTES` and an answer of [`RECEIPT_LEN`] bytes
//! ([`ClientShape`]).
//!
//! * keel-rudp: one message on the `--channel` (reliable-ordered by
//!   default; reliable-unordered is accepted), which keel-rudp splits into
//!   datagram-sized chunks; the connection's `max_message_size` and
//!   buffers are sized for it (`crate::rudp::connection_config`).
//!   `--bulk-channel` marks the channel bulk (keel-rudp's congestion
//!   control and pacer).
//! * KCP: a message of KCP's message mode is at most 127 fragments (its
//!   `frg` field and receive window), far below 1 MiB, so the bulk case
//!   runs KCP in stream mode ([`kcp::Kcp::new_stream`]): the message goes
//!   in as a byte stream (in pieces [`kcp_send`] cuts below KCP's own
//!   per-call limit, all handed over at once) and the receiver cuts the
//!   stream back into messages of `BYTES` ([`Reassembly`]); receipts the
//!   same way, 16 bytes each.
//!
//! Reported: `transfer_bytes` = `BYTES`; `payload_bytes` = `BYTES` too (the
//! message size, as in the echo); `messages` = transfers begun in the
//! measured phase whose receipt arrived (during the drain included);
//! `rtt_*` = completion times in µs, from just before the message is handed
//! to the protocol to the receipt's arrival; `payload_roundtrip_bytes` =
//! `messages × (BYTES + 16)` (message and receipt), and
//! `goodput_bytes_per_second` = `BYTES × messages / elapsed_seconds`,
//! summed over clients, where `elapsed_seconds` runs from the start of the
//! measured phase to the end of the drain (so the last transfer's tail is
//! paid for). A warm-up transfer still in flight when the measured phase
//! starts takes measured time without counting, so use `--warmup 0` (the
//! matrix does) unless the warm-up is short against a transfer.
//!
//! A transfer in flight when the measured phase ends gets up to `--drain`
//! to finish, 30 s by default with `--transfer`
//! ([`DEFAULT_BULK_DRAIN`](crate::flags::DEFAULT_BULK_DRAIN); the echo's
//! default is 2 s, less than one 1 MiB
//! transfer takes under heavy loss); one still unfinished then is lost
//! (`udp_lost_messages`, `drain_timeouts` = 1, `ok: false`).

use std::io::Write;

use crate::flags::RunConfig;
use crate::message::{decode_header, verify_fill, HEADER_LEN};

/// Bytes of the server's receipt: the transfer's 16-byte header.
pub(crate) const RECEIPT_LEN: usize = HEADER_LEN;
/// What KCP's stream mode reads at once (more than its 1,376-byte segment).
const KCP_STREAM_READ: usize = 64 * 1024;
/// Largest piece handed to KCP's `send` in stream mode, in segments: KCP
/// refuses one call of 128 segments or more, whatever the mode.
const KCP_SEND_SEGMENTS: usize = 64;

/// What a client of `cfg` sends and expects back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientShape {
    /// Bytes of each message.
    pub message: usize,
    /// Bytes of each answer: the message itself (echo) or a receipt.
    pub answer: usize,
    /// Messages in flight at most.
    pub window: usize,
}

impl ClientShape {
    /// The echo's shape (`--payload`, `--window`), or the bulk case's:
    /// `--transfer` bytes, one at a time, answered by a receipt.
    pub(crate) fn of(cfg: &RunConfig) -> Self {
        match cfg.transfer {
            None => ClientShape {
                message: cfg.payload as usize,
                answer: cfg.payload as usize,
                window: cfg.window as usize,
            },
            Some(bytes) => ClientShape {
                message: bytes as usize,
                answer: RECEIPT_LEN,
                window: 1,
            },
        }
    }
}

/// The server's check of a transfer: the whole message (length
/// `transfer`, header, every byte of the fill); its receipt if it checks.
/// (`crate::peer::ServerCounts::receive_transfer` counts it.)
pub(crate) fn check_transfer(msg: &[u8], transfer: u64) -> Option<[u8; RECEIPT_LEN]> {
    let whole =
        msg.len() as u64 == transfer && decode_header(msg).is_ok_and(|h| verify_fill(msg, &h));
    if !whole {
        return None;
    }
    let mut r = [0; RECEIPT_LEN];
    r.copy_from_slice(&msg[..RECEIPT_LEN]);
    Some(r)
}

/// Cuts a byte stream (KCP's stream mode) back into messages of one size.
#[derive(Debug)]
pub(crate) struct Reassembly {
    size: usize,
    got: Vec<u8>,
}

impl Reassembly {
    /// Messages of `size` bytes (at least 1).
    pub(crate) fn new(size: usize) -> Self {
        let size = size.max(1);
        Reassembly {
            size,
            got: Vec::with_capacity(size),
        }
    }

    /// Adds `data` from the stream; calls `message` with each message it
    /// completes, in order.
    pub(crate) fn push(&mut self, mut data: &[u8], mut message: impl FnMut(&[u8])) {
        while !data.is_empty() {
            let take = (self.size - self.got.len()).min(data.len());
            self.got.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.got.len() == self.size {
                message(&self.got);
                self.got.clear();
            }
        }
    }

    /// Bytes of an unfinished message held.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.got.len()
    }
}

/// Hands `msg` to KCP: whole in message mode; in stream mode in pieces of
/// 64 segments (`KCP_SEND_SEGMENTS`; KCP refuses a call of 128 segments or
/// more even there), all queued at once. False if KCP refused a piece.
pub(crate) fn kcp_send<W: Write>(k: &mut kcp::Kcp<W>, msg: &[u8]) -> bool {
    if !k.is_stream() {
        return k.send(msg).is_ok();
    }
    msg.chunks(KCP_SEND_SEGMENTS * k.mss().max(1))
        .all(|piece| k.send(piece).is_ok())
}

/// A KCP for `cfg`: stream mode for the bulk case, message mode otherwise.
pub(crate) fn kcp_new<W: Write>(cfg: &RunConfig, conv: u32, out: W) -> kcp::Kcp<W> {
    if cfg.transfer.is_some() {
        kcp::Kcp::new_stream(conv, out)
    } else {
        kcp::Kcp::new(conv, out)
    }
}

/// Bytes a KCP receive buffer of `cfg` needs: one message in message
/// mode, a read of the stream in stream mode.
pub(crate) fn kcp_recv_len(cfg: &RunConfig) -> usize {
    match cfg.transfer {
        None => cfg.payload as usize,
        Some(_) => KCP_STREAM_READ,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{parse, Command};
    use crate::message::{encode, Phase};

    fn cfg(args: &[&str]) -> RunConfig {
        match parse(args.iter().copied()).unwrap() {
            Command::Run(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn shapes() {
        let echo = ClientShape::of(&cfg(&["--protocol", "rudp", "--window", "4"]));
        assert_eq!(
            echo,
            ClientShape {
                message: 1024,
                answer: 1024,
                window: 4
            }
        );
        let bulk = ClientShape::of(&cfg(&["--protocol", "kcp", "--transfer", "1048576"]));
        assert_eq!(
            bulk,
            ClientShape {
                message: 1 << 20,
                answer: 16,
                window: 1
            }
        );
        // The drain: 30 s for a transfer, unless --drain says otherwise.
        assert_eq!(cfg(&["--protocol", "rudp"]).drain, 2.0);
        assert_eq!(
            cfg(&["--protocol", "rudp", "--transfer", "100"]).drain,
            30.0
        );
        let c = cfg(&["--protocol", "kcp", "--transfer", "100", "--drain", "5"]);
        assert_eq!(c.drain, 5.0);
    }

    #[test]
    fn the_server_checks_every_byte_before_its_receipt() {
        let mut msg = vec![0; 5000];
        encode(&mut msg, Phase::Measured, 7, 3);
        let r = check_transfer(&msg, 5000).expect("a good transfer");
        assert_eq!(&r[..], &msg[..16]);
        // Wrong length, a flipped byte anywhere, a bad header: no receipt.
        assert!(check_transfer(&msg[..4999], 5000).is_none());
        assert!(check_transfer(&msg, 5001).is_none());
        // (Byte 3, the phase, is not checked: the fill does not depend on it.)
        for at in [0, 4, 8, 15, 16, 2500, 4999] {
            let mut bad = msg.clone();
            bad[at] ^= 1;
            assert!(check_transfer(&bad, 5000).is_none(), "byte {at}");
        }
        let mut short = vec![0; 16];
        encode(&mut short, Phase::Warmup, 1, 1);
        assert_eq!(
            check_transfer(&short, 16),
            Some(short[..].try_into().unwrap())
        );
    }

    #[test]
    fn reassembly_cuts_any_split_of_the_stream_into_messages() {
        let stream: Vec<u8> = (0..100u8).collect();
        for piece in [1, 3, 7, 10, 33, 100] {
            let mut r = Reassembly::new(10);
            let mut got = Vec::new();
            for p in stream.chunks(piece) {
                r.push(p, |m| got.push(m.to_vec()));
            }
            assert_eq!(got.len(), 10, "pieces of {piece}");
            for (i, m) in got.iter().enumerate() {
                assert_eq!(m.as_slice(), &stream[i * 10..i * 10 + 10]);
            }
            assert_eq!(r.pending(), 0);
        }
        let mut r = Reassembly::new(10);
        let mut n = 0;
        r.push(&stream[..15], |_| n += 1);
        assert_eq!((n, r.pending()), (1, 5));
    }

    /// What `kcp_send` queues in stream mode arrives whole at a stream
    /// receiver, though one `send` of it would be refused.
    #[test]
    fn kcp_stream_carries_a_message_larger_than_one_send() {
        #[derive(Clone, Default)]
        struct Wire(std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>>);
        impl Write for Wire {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.borrow_mut().push(b.to_vec());
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let c = cfg(&["--protocol", "kcp", "--transfer", "400000"]);
        let (a_out, b_out) = (Wire::default(), Wire::default());
        let mut a = kcp_new(&c, 1, a_out.clone());
        let mut b = kcp_new(&c, 1, b_out.clone());
        for k in [&mut a, &mut b] {
            k.set_nodelay(true, 10, 2, true);
            k.set_wndsize(1024, 1024);
        }
        let mut msg = vec![0; 400_000];
        encode(&mut msg, Phase::Measured, 1, 0);
        assert!(a.send(&msg).is_err(), "one send of 400 kB is refused");
        assert!(kcp_send(&mut a, &msg));
        let mut r = Reassembly::new(msg.len());
        let mut got = None;
        let mut buf = vec![0; kcp_recv_len(&c)];
        for t in 0..2000u32 {
            a.update(t * 10).unwrap();
            b.update(t * 10).unwrap();
            for p in std::mem::take(&mut *a_out.0.borrow_mut()) {
                b.input(&p).unwrap();
            }
            for p in std::mem::take(&mut *b_out.0.borrow_mut()) {
                a.input(&p).unwrap();
            }
            while let Ok(n) = b.recv(&mut buf) {
                r.push(&buf[..n], |m| got = Some(m.to_vec()));
            }
            if got.is_some() {
                break;
            }
        }
        let got = got.expect("the whole message arrived");
        assert!(got == msg);
        let h = decode_header(&got).unwrap();
        assert!(verify_fill(&got, &h));
    }
}
