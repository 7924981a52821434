//! The test vectors of `docs/rudp-vectors.md`, checked against this code.
//!
//! Every `name = value` line in the file's fenced blocks is what this code
//! computes from the fixed inputs below (inputs included, so the file
//! states them), and every value this code computes is in the file: one
//! changed byte on either side fails the test. The file is the reference a
//! second implementation checks itself against; to regenerate it after a
//! deliberate change of the wire format, run this test and copy the values
//! it prints on failure.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::security::{open_token, token_key_id, PacketCrypto, SessionKeys};
use crate::wire::ConnectionId;
use crate::{
    ChannelConfig, ChannelKind, ClientSecurity, Config, Connection, Endpoint, EndpointConfig,
    Event, Handled, ServerSecurity, TokenMinter, TokenSpec,
};

const FILE: &str = include_str!("../../../docs/rudp-vectors.md");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The `name = value` lines of the fenced blocks; a line that starts with
/// spaces continues the value above it (long hex is wrapped).
fn parse(file: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut fenced = false;
    for line in file.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced || line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with(' ') {
            let last = out.last_mut().expect("a continuation line follows a value");
            last.1.push_str(line.trim());
        } else {
            let (k, v) = line.split_once(" =").expect("a line is `name = value`");
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

struct Out(Vec<(String, String)>);

impl Out {
    fn put(&mut self, k: &str, v: impl Into<String>) {
        self.0.push((k.to_string(), v.into()));
    }
    fn bytes(&mut self, k: &str, v: &[u8]) {
        self.put(k, hex(v));
    }
}

fn two_channels() -> Vec<ChannelConfig> {
    vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::Unreliable),
    ]
}

fn spec() -> TokenSpec {
    TokenSpec {
        server_addrs: vec![
            "192.0.2.1:4000".parse().unwrap(),
            "192.0.2.2:4001".parse().unwrap(),
        ],
        expires_at: 1_900_000_000,
        client_id: 0x0102_0304_0506_0708,
        timeout_secs: 10,
        user_data: b"team=red".to_vec(),
    }
}

fn seq(start: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| start.wrapping_add(i as u8)).collect()
}

fn arr<const N: usize>(start: u8) -> [u8; N] {
    seq(start, N).try_into().unwrap()
}

fn compute() -> Out {
    let mut o = Out(Vec::new());

    // (a) Config digests.
    let a = Config::new(vec![ChannelConfig::new(ChannelKind::ReliableOrdered)]);
    o.put("digest.a.kinds", "0");
    o.put("digest.a", format!("{:016x}", a.digest()));
    let b = Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered),
        ChannelConfig::new(ChannelKind::ReliableUnordered),
        ChannelConfig::new(ChannelKind::UnreliableSequenced),
        ChannelConfig::new(ChannelKind::Unreliable),
    ]);
    o.put("digest.b.kinds", "0 1 2 3");
    o.put("digest.b", format!("{:016x}", b.digest()));

    // (b) Key id, (c) a sealed token.
    let key: [u8; 32] = arr(0x00);
    let nonce: [u8; 24] = arr(0x40);
    let c2s: [u8; 32] = arr(0x80);
    let s2c: [u8; 32] = arr(0xa0);
    let s = spec();
    o.bytes("token.key", &key);
    o.bytes("token.key_id", &token_key_id(&key));
    o.bytes("token.nonce", &nonce);
    o.bytes("token.c2s", &c2s);
    o.bytes("token.s2c", &s2c);
    o.put(
        "token.server_addrs",
        s.server_addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    );
    o.put("token.expires_at", s.expires_at.to_string());
    o.put("token.client_id", format!("{:016x}", s.client_id));
    o.put("token.timeout_secs", s.timeout_secs.to_string());
    o.bytes("token.user_data", &s.user_data);
    let t = TokenMinter::new(key)
        .mint_with(&s, nonce, c2s, s2c)
        .unwrap();
    o.bytes("token.sealed", &t.sealed);
    let own: [SocketAddr; 1] = ["192.0.2.2:4001".parse().unwrap()];
    let claims = open_token(&key, &token_key_id(&key), &own, 1_899_999_999, &t.sealed)
        .expect("the vector's token opens");
    assert_eq!(
        (claims.client_id, claims.timeout_secs, &claims.user_data),
        (s.client_id, s.timeout_secs, &s.user_data)
    );
    assert_eq!((claims.c2s, claims.s2c), (c2s, s2c));
    o.bytes("token.bytes", &t.to_bytes());
    o.put("token.text", t.to_text());

    // (d) Packet keys, (e) a sealed short packet.
    let keys = SessionKeys { c2s, s2c };
    let hello_nonce: [u8; 16] = arr(0xc0);
    let cid = ConnectionId(arr(0xd0));
    o.bytes("packet.hello_nonce", &hello_nonce);
    o.bytes("packet.connection_id", &cid.0);
    o.bytes(
        "packet.c2s_key",
        &crate::security::packet_key(&c2s, b"c2s", &hello_nonce, cid),
    );
    o.bytes(
        "packet.s2c_key",
        &crate::security::packet_key(&s2c, b"s2c", &hello_nonce, cid),
    );
    let client = PacketCrypto::new(&keys, true, &hello_nonce, cid);
    let server = PacketCrypto::new(&keys, false, &hello_nonce, cid);
    let pn: u64 = 0x1234;
    // Short header: 0x41 (packet number in 2 bytes), the ID, pn's low bytes.
    let mut header = vec![0x41];
    header.extend_from_slice(&cid.0);
    header.extend_from_slice(&(pn as u16).to_be_bytes());
    // Frames: PING, then MESSAGE on channel 0, sequence 0, "hello".
    let mut frames = vec![0x01, 0x03, 0x00, 0x00, 0x05];
    frames.extend_from_slice(b"hello");
    o.put("packet.number", format!("{pn:x}"));
    o.bytes("packet.header", &header);
    o.bytes("packet.frames", &frames);
    let mut buf = [0u8; 128];
    buf[..header.len()].copy_from_slice(&header);
    buf[header.len()..header.len() + frames.len()].copy_from_slice(&frames);
    let n = client
        .seal(pn, &mut buf, header.len(), header.len() + frames.len())
        .unwrap();
    o.bytes("packet.sealed_c2s", &buf[..n]);
    let mut plain = [0u8; 128];
    let m = server
        .open(pn, &buf[..n], header.len(), &mut plain)
        .unwrap();
    assert_eq!(&plain[..m], &frames[..]);

    // (f) A handshake in token mode, then one message each way.
    let mut cfg = Config::new(two_channels());
    // The transcripts predate the ack policy: they announce max_ack_delay.
    cfg.tick_ack_delay = Duration::ZERO;
    let server_key: [u8; 32] = arr(0xe0);
    let server_addr: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let client_addr: SocketAddr = "192.0.2.100:50000".parse().unwrap();
    let mut ecfg = EndpointConfig::new(
        0,
        server_key,
        cfg.clone(),
        ServerSecurity::Tokens {
            key,
            public_addrs: vec![server_addr],
        },
    );
    ecfg.unix_time_at_start = 1_800_000_000;
    let t0 = Instant::now();
    let mut ep = Endpoint::new(ecfg, t0).unwrap();
    let mut c =
        Connection::connect(cfg, ClientSecurity::Token(t.clone()), hello_nonce, t0).unwrap();
    o.bytes("handshake.server_secret", &server_key);
    o.put("handshake.unix_time_at_start", "1800000000");
    o.put("handshake.client_addr", client_addr.to_string());
    o.put("handshake.server_addr", server_addr.to_string());
    let (mut out, mut reply) = ([0u8; 1500], [0u8; 1500]);
    // At t0: HELLO without a cookie, RETRY.
    let n = c.poll_transmit(t0, &mut out).unwrap();
    o.bytes("handshake.1.client_hello", &out[..n]);
    let Handled::Reply(m) = ep.handle(t0, client_addr, &out[..n], &mut reply) else {
        panic!("no retry")
    };
    o.bytes("handshake.2.server_retry", &reply[..m]);
    // 1.5 s later: HELLO with the cookie, ACCEPT.
    let t1 = t0 + Duration::from_millis(1500);
    c.handle_datagram(t1, &reply[..m]);
    let n = c.poll_transmit(t1, &mut out).unwrap();
    o.bytes("handshake.3.client_hello", &out[..n]);
    let Handled::Accepted(h, m) = ep.handle(t1, client_addr, &out[..n], &mut reply) else {
        panic!("no accept")
    };
    o.bytes("handshake.4.server_accept", &reply[..m]);
    c.handle_datagram(t1, &reply[..m]);
    assert_eq!(c.poll_event(), Some(Event::Connected));
    let hcid = ConnectionId(reply[5..13].try_into().unwrap());
    assert_eq!(hcid, c.connection_id());
    o.bytes("handshake.connection_id", &hcid.0);
    o.bytes(
        "handshake.c2s_key",
        &crate::security::packet_key(&c2s, b"c2s", &hello_nonce, hcid),
    );
    o.bytes(
        "handshake.s2c_key",
        &crate::security::packet_key(&s2c, b"s2c", &hello_nonce, hcid),
    );
    // Opens a short packet of this connection: (header, frames).
    let open = |client_sent: bool, p: &[u8]| {
        let crypto = PacketCrypto::new(&keys, !client_sent, &hello_nonce, hcid);
        let len = usize::from(p[0] & 3) + 1;
        let pn = p[9..9 + len]
            .iter()
            .fold(0u64, |a, &b| (a << 8) | u64::from(b));
        let mut plain = [0u8; 1500];
        let n = crypto.open(pn, p, 9 + len, &mut plain).unwrap();
        (p[..9 + len].to_vec(), plain[..n].to_vec())
    };
    // The client's first short packet: "hi" on channel 0.
    c.send(0, b"hi").unwrap();
    let n = c.poll_transmit(t1, &mut out).unwrap();
    o.bytes("handshake.5.client_packet", &out[..n]);
    let (hd, fr) = open(true, &out[..n]);
    o.bytes("handshake.5.header", &hd);
    o.bytes("handshake.5.frames", &fr);
    assert!(matches!(
        ep.handle(t1, client_addr, &out[..n], &mut reply),
        Handled::Routed(_)
    ));
    let mut got = Vec::new();
    while let Some((_, e)) = ep.poll_event() {
        got.push(e);
    }
    assert!(
        got.iter()
            .any(|e| matches!(e, Event::Message { data, .. } if &data[..] == b"hi")),
        "{got:?}"
    );
    // The server's answer: "ok" on channel 0 (with its ACK).
    ep.connection_mut(h).unwrap().send(0, b"ok").unwrap();
    let (_, to, n) = ep.poll_transmit(t1, &mut out).unwrap();
    assert_eq!(to, client_addr);
    o.bytes("handshake.6.server_packet", &out[..n]);
    let (hd, fr) = open(false, &out[..n]);
    o.bytes("handshake.6.header", &hd);
    o.bytes("handshake.6.frames", &fr);
    c.handle_datagram(t1, &out[..n]);
    let mut got = Vec::new();
    while let Some(e) = c.poll_event() {
        got.push(e);
    }
    assert!(
        got.iter()
            .any(|e| matches!(e, Event::Message { data, .. } if &data[..] == b"ok")),
        "{got:?}"
    );

    // (g) The same handshake in insecure mode: no token, nothing sealed.
    let mut cfg = Config::new(two_channels());
    // The transcripts predate the ack policy: they announce max_ack_delay.
    cfg.tick_ack_delay = Duration::ZERO;
    let mut ep = Endpoint::new(
        EndpointConfig::new(0, server_key, cfg.clone(), ServerSecurity::Insecure),
        t0,
    )
    .unwrap();
    let mut c = Connection::connect(cfg, ClientSecurity::Insecure, hello_nonce, t0).unwrap();
    let n = c.poll_transmit(t0, &mut out).unwrap();
    o.bytes("insecure.1.client_hello", &out[..n]);
    let Handled::Reply(m) = ep.handle(t0, client_addr, &out[..n], &mut reply) else {
        panic!("no retry")
    };
    o.bytes("insecure.2.server_retry", &reply[..m]);
    c.handle_datagram(t1, &reply[..m]);
    let n = c.poll_transmit(t1, &mut out).unwrap();
    o.bytes("insecure.3.client_hello", &out[..n]);
    let Handled::Accepted(h, m) = ep.handle(t1, client_addr, &out[..n], &mut reply) else {
        panic!("no accept")
    };
    o.bytes("insecure.4.server_accept", &reply[..m]);
    c.handle_datagram(t1, &reply[..m]);
    assert_eq!(c.poll_event(), Some(Event::Connected));
    c.send(0, b"hi").unwrap();
    let n = c.poll_transmit(t1, &mut out).unwrap();
    o.bytes("insecure.5.client_packet", &out[..n]);
    assert!(matches!(
        ep.handle(t1, client_addr, &out[..n], &mut reply),
        Handled::Routed(_)
    ));
    ep.connection_mut(h).unwrap().send(0, b"ok").unwrap();
    let (_, _, n) = ep.poll_transmit(t1, &mut out).unwrap();
    o.bytes("insecure.6.server_packet", &out[..n]);
    c.handle_datagram(t1, &out[..n]);
    let mut got = Vec::new();
    while let Some(e) = c.poll_event() {
        got.push(e);
    }
    assert!(
        got.iter()
            .any(|e| matches!(e, Event::Message { data, .. } if &data[..] == b"ok")),
        "{got:?}"
    );
    fec_vectors(&mut o);
    o
}

/// Forward error correction, insecure: five messages on a channel at
/// redundancy level 4 (each packet carries the parity of the two messages
/// before its own), the fourth packet lost; the fifth's PARITY rebuilds
/// the fourth message, and the receiver's next packet says so (REPAIRED).
fn fec_vectors(o: &mut Out) {
    let mut cfg = Config::new(vec![
        ChannelConfig::new(ChannelKind::ReliableOrdered).with_redundancy(4)
    ]);
    // No small-message copies: only the parity rebuilds the lost one.
    cfg.redundancy = crate::Redundancy::OFF;
    let cid = ConnectionId([0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    let t0 = Instant::now();
    let mut a = Connection::established(cfg.clone(), crate::Side::Client, cid, t0).unwrap();
    let mut b = Connection::established(cfg, crate::Side::Server, cid, t0).unwrap();
    let msgs: [&[u8]; 5] = [b"abc", b"hello", b"x", b"parity!", b"end"];
    let mut out = [0u8; 1500];
    for (i, m) in msgs.iter().enumerate() {
        o.bytes(&format!("fec.message_{i}"), m);
        let t = t0 + Duration::from_millis(16 * i as u64);
        a.send(0, m).unwrap();
        let n = a.poll_transmit(t, &mut out).unwrap();
        assert!(a.poll_transmit(t, &mut out[n..]).is_none());
        o.bytes(&format!("fec.client_packet_{i}"), &out[..n]);
        if i != 3 {
            b.handle_datagram(t, &out[..n]);
        }
    }
    let t = t0 + Duration::from_millis(80);
    let n = b.poll_transmit(t, &mut out).unwrap();
    o.bytes("fec.server_packet", &out[..n]);
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| b.poll_event())
        .filter_map(|e| match e {
            Event::Message { data, .. } => Some(data),
            _ => None,
        })
        .collect();
    assert_eq!(got, msgs.map(<[u8]>::to_vec));
    assert_eq!(b.stats().repaired_by_parity, 1);
    a.handle_datagram(t, &out[..n]);
    assert_eq!(a.stats().repairs_acked, 1);
}

/// The file as this code would write it (for regeneration).
fn render(o: &Out) -> String {
    let mut s = String::new();
    for (k, v) in &o.0 {
        if v.len() <= 64 {
            s.push_str(&format!("{k} = {v}\n"));
        } else {
            s.push_str(&format!("{k} =\n"));
            for chunk in v.as_bytes().chunks(64) {
                s.push_str("    ");
                s.push_str(std::str::from_utf8(chunk).unwrap());
                s.push('\n');
            }
        }
    }
    s
}

#[test]
fn the_vectors_file_matches_the_code() {
    let computed = compute();
    let file = parse(FILE);
    let mismatch = computed.0 != file;
    if mismatch {
        for (k, v) in &computed.0 {
            match file.iter().find(|(fk, _)| fk == k) {
                None => eprintln!("missing in docs/rudp-vectors.md: {k}"),
                Some((_, fv)) if fv != v => eprintln!("differs: {k}\n  file {fv}\n  code {v}"),
                _ => {}
            }
        }
        for (k, _) in &file {
            if !computed.0.iter().any(|(ck, _)| ck == k) {
                eprintln!("in the file but not computed: {k}");
            }
        }
        eprintln!("--- the code's values ---\n{}", render(&computed));
    }
    assert!(!mismatch, "docs/rudp-vectors.md differs from the code");
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The constructions as `docs/rudp.md` states them, written from the page
/// with the primitives alone (no code of this crate), give the file's
/// values: the page says what the code does.
#[test]
fn the_constructions_of_the_page_give_the_vectors() {
    use chacha20poly1305::aead::{Aead, KeyInit, Payload};
    use chacha20poly1305::{ChaCha20Poly1305, XChaCha20Poly1305};
    let v: std::collections::HashMap<String, String> = parse(FILE).into_iter().collect();
    let b = |k: &str| unhex(&v[k]);
    let version = 0x6b72_0003u32.to_be_bytes();

    // Config digest: FNV-1a over version, count, kind codes.
    for (name, kinds) in [("digest.a", vec![0u8]), ("digest.b", vec![0, 1, 2, 3])] {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut bytes = version.to_vec();
        bytes.push(kinds.len() as u8);
        bytes.extend_from_slice(&kinds);
        for x in bytes {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        assert_eq!(format!("{h:016x}"), v[name], "{name}");
    }

    // Key id and the sealed token.
    let key = b("token.key");
    let kid = &hmac(&key, &[b"keel-rudp key id"])[..4];
    assert_eq!(kid, &b("token.key_id")[..]);
    let expires: u64 = v["token.expires_at"].parse().unwrap();
    let mut plain = Vec::new();
    plain.extend_from_slice(&b("token.client_id"));
    plain.extend_from_slice(
        &v["token.timeout_secs"]
            .parse::<u32>()
            .unwrap()
            .to_be_bytes(),
    );
    let addrs: Vec<SocketAddr> = v["token.server_addrs"]
        .split(' ')
        .map(|a| a.parse().unwrap())
        .collect();
    plain.push(addrs.len() as u8);
    for a in &addrs {
        let SocketAddr::V4(a4) = a else { panic!() };
        plain.extend_from_slice(&a4.ip().to_ipv6_mapped().octets());
        plain.extend_from_slice(&a4.port().to_be_bytes());
    }
    plain.extend_from_slice(&b("token.c2s"));
    plain.extend_from_slice(&b("token.s2c"));
    let ud = b("token.user_data");
    plain.extend_from_slice(&(ud.len() as u16).to_be_bytes());
    plain.extend_from_slice(&ud);
    let mut aad = b"keel-rudp token".to_vec();
    aad.extend_from_slice(&version);
    aad.extend_from_slice(kid);
    aad.extend_from_slice(&expires.to_be_bytes());
    assert_eq!(aad.len(), 31);
    let nonce = b("token.nonce");
    let ct = XChaCha20Poly1305::new_from_slice(&key)
        .unwrap()
        .encrypt(
            nonce[..].into(),
            Payload {
                msg: &plain,
                aad: &aad,
            },
        )
        .unwrap();
    let mut sealed = kid.to_vec();
    sealed.extend_from_slice(&expires.to_be_bytes());
    sealed.extend_from_slice(&nonce);
    sealed.extend_from_slice(&ct);
    assert_eq!(sealed.len(), 131 + 18 * addrs.len() + ud.len());
    assert_eq!(sealed, b("token.sealed"));

    // Packet keys and the sealed packet.
    let pk = |session: &str, label: &[u8], nonce: &[u8], cid: &[u8]| {
        hmac(&b(session), &[b"keel-rudp packet key ", label, nonce, cid])
    };
    let (hn, cid) = (b("packet.hello_nonce"), b("packet.connection_id"));
    let c2s_key = pk("token.c2s", b"c2s", &hn, &cid);
    assert_eq!(&c2s_key[..], &b("packet.c2s_key")[..]);
    assert_eq!(
        &pk("token.s2c", b"s2c", &hn, &cid)[..],
        &b("packet.s2c_key")[..]
    );
    let seal = |key: &[u8], pn: u64, header: &[u8], frames: &[u8]| {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&pn.to_be_bytes());
        let mut out = header.to_vec();
        out.extend(
            ChaCha20Poly1305::new_from_slice(key)
                .unwrap()
                .encrypt(
                    (&n).into(),
                    Payload {
                        msg: frames,
                        aad: header,
                    },
                )
                .unwrap(),
        );
        out
    };
    let pn = u64::from_str_radix(&v["packet.number"], 16).unwrap();
    assert_eq!(
        seal(&c2s_key, pn, &b("packet.header"), &b("packet.frames")),
        b("packet.sealed_c2s")
    );

    // The handshake: cookie, connection ID, and the two sealed packets.
    let secret = b("handshake.server_secret");
    let client: SocketAddr = v["handshake.client_addr"].parse().unwrap();
    let SocketAddr::V4(c4) = client else { panic!() };
    let ts = 0u32.to_be_bytes();
    let mac = hmac(
        &secret,
        &[
            b"keel-rudp cookie",
            &version,
            &c4.ip().to_ipv6_mapped().octets(),
            &c4.port().to_be_bytes(),
            &ts,
            &hn,
        ],
    );
    let mut cookie = ts.to_vec();
    cookie.extend_from_slice(&mac[..16]);
    let retry = b("handshake.2.server_retry");
    assert!(retry.ends_with(&cookie), "the cookie as the page builds it");
    assert!(b("handshake.3.client_hello")
        .windows(cookie.len())
        .any(|w| w == cookie));
    let id = hmac(&secret, &[b"keel-rudp connection id", &1u64.to_be_bytes()]);
    let mut hcid = vec![0u8];
    hcid.extend_from_slice(&id[..7]);
    assert_eq!(hcid, b("handshake.connection_id"));
    assert_eq!(&b("handshake.4.server_accept")[5..13], &hcid[..]);
    let hc2s = pk("token.c2s", b"c2s", &hn, &hcid);
    let hs2c = pk("token.s2c", b"s2c", &hn, &hcid);
    assert_eq!(&hc2s[..], &b("handshake.c2s_key")[..]);
    assert_eq!(&hs2c[..], &b("handshake.s2c_key")[..]);
    for (step, key) in [("5", hc2s), ("6", hs2c)] {
        let header = b(&format!("handshake.{step}.header"));
        let frames = b(&format!("handshake.{step}.frames"));
        let packet = if step == "5" {
            "handshake.5.client_packet"
        } else {
            "handshake.6.server_packet"
        };
        assert_eq!(seal(&key, 0, &header, &frames), b(packet), "step {step}");
    }
}
