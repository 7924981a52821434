//! Connect tokens (minted by the game's backend, checked by the server) and
//! the per-packet AEAD with its replay window. All cryptography is
//! RustCrypto's: XChaCha20-Poly1305 seals tokens, ChaCha20-Poly1305 seals
//! packets, HMAC-SHA256 derives each connection's packet keys. See
//! `docs/security.md` for the threat model.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce, Tag, XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::wire::{ConnectionId, Reader, Writer, VERSION};

/// Bytes of an AEAD tag, appended to every sealed packet and token.
pub const TAG_LEN: usize = 16;
/// Server addresses a token lists at most.
pub const MAX_TOKEN_ADDRS: usize = 8;
/// Bytes of user data a token carries at most.
pub const MAX_USER_DATA: usize = 256;
pub use crate::wire::MAX_TOKEN_LEN;
const _: () = assert!(
    MAX_TOKEN_LEN
        == 4 + 8 + 24 + (8 + 4 + 1 + MAX_TOKEN_ADDRS * 18 + 64 + 2 + MAX_USER_DATA) + TAG_LEN
);
/// Packets the replay window remembers behind the largest received.
pub const REPLAY_WINDOW: u64 = 1024;

/// How a client connects: with a connect token from the backend, or,
/// only when asked for by name, without any security.
#[derive(Clone)]
pub enum ClientSecurity {
    /// Present this token; packets are sealed with its keys.
    Token(ConnectToken),
    /// No token, no encryption, no authentication: for LAN tools and
    /// benchmarks only. A server that requires tokens refuses it.
    Insecure,
}

impl fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientSecurity::Token(t) => write!(f, "Token(client {})", t.client_id),
            ClientSecurity::Insecure => f.write_str("Insecure"),
        }
    }
}

/// What a server accepts: clients with a token minted under `key` that
/// lists one of `public_addrs`, or, only when asked for by name, anyone.
#[derive(Clone)]
pub enum ServerSecurity {
    /// Require a valid connect token and seal every packet.
    Tokens {
        /// The key shared with the backend's [`TokenMinter`].
        key: [u8; 32],
        /// The addresses clients reach this server at (as the backend
        /// writes them into tokens).
        public_addrs: Vec<SocketAddr>,
    },
    /// No tokens, no encryption: for LAN tools and benchmarks only. A
    /// client presenting a token is refused (the settings differ).
    Insecure,
}

impl fmt::Debug for ServerSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerSecurity::Tokens { public_addrs, .. } => f
                .debug_struct("Tokens")
                .field("public_addrs", public_addrs)
                .finish_non_exhaustive(),
            ServerSecurity::Insecure => f.write_str("Insecure"),
        }
    }
}

/// What the backend puts in a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    /// The servers the client may connect to (at most [`MAX_TOKEN_ADDRS`]).
    pub server_addrs: Vec<SocketAddr>,
    /// Unix time (seconds) after which servers refuse the token.
    pub expires_at: u64,
    /// The player, as the backend knows them; the server sees it.
    pub client_id: u64,
    /// Seconds of silence after which the game may drop the player; the
    /// server sees it.
    pub timeout_secs: u32,
    /// Opaque data for the server (at most [`MAX_USER_DATA`] bytes).
    pub user_data: Vec<u8>,
}

/// A connect token as the backend hands it to the client (over its own
/// authenticated channel, e.g. HTTPS): the public part in clear, the
/// private part sealed for the servers.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectToken {
    /// Servers to try, in order.
    pub server_addrs: Vec<SocketAddr>,
    /// Unix seconds after which it is refused.
    pub expires_at: u64,
    /// The client id sealed inside.
    pub client_id: u64,
    /// The timeout sealed inside.
    pub timeout_secs: u32,
    /// Key of the client's packets to the server.
    pub client_to_server_key: [u8; 32],
    /// Key of the server's packets to the client.
    pub server_to_client_key: [u8; 32],
    /// The sealed private part, sent in the HELLO.
    pub sealed: Vec<u8>,
}

impl fmt::Debug for ConnectToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectToken")
            .field("server_addrs", &self.server_addrs)
            .field("expires_at", &self.expires_at)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// Why a server refused a token. Each has its counter in
/// [`EndpointStats`](crate::EndpointStats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// Not sealed under the server's key as it claims (altered or made up).
    Forged,
    /// Sealed under another key (another key id).
    WrongKey,
    /// Its expiry has passed.
    Expired,
    /// It does not list this server's address.
    WrongServer,
    /// In use from another client address.
    Replayed,
}

impl TokenError {
    /// Short text, sent in the REFUSE.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenError::Forged => "connect token forged",
            TokenError::WrongKey => "connect token sealed under another key",
            TokenError::Expired => "connect token expired",
            TokenError::WrongServer => "connect token not for this server",
            TokenError::Replayed => "connect token in use from another address",
        }
    }
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a server learns from a valid token.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenClaims {
    /// The client id.
    pub client_id: u64,
    /// The timeout in seconds.
    pub timeout_secs: u32,
    /// The user data.
    pub user_data: Vec<u8>,
    pub(crate) c2s: [u8; 32],
    pub(crate) s2c: [u8; 32],
    pub(crate) tag: [u8; TAG_LEN],
    pub(crate) expires_at: u64,
}

/// The backend's side: mints tokens under the key it shares with servers.
///
/// ```
/// use keel_rudp_proto::{TokenMinter, TokenSpec};
/// let minter = TokenMinter::new([9; 32]);
/// let token = minter.mint(&TokenSpec {
///     server_addrs: vec!["203.0.113.7:4000".parse().unwrap()],
///     expires_at: 1_900_000_000,
///     client_id: 42,
///     timeout_secs: 10,
///     user_data: b"team=red".to_vec(),
/// }).unwrap();
/// assert_eq!(token.client_id, 42);
/// assert!(token.sealed.len() < 400);
/// ```
#[derive(Clone)]
pub struct TokenMinter {
    key: [u8; 32],
}

impl fmt::Debug for TokenMinter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenMinter { .. }")
    }
}

fn key_id(key: &[u8; 32]) -> [u8; 4] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(b"keel-rudp key id");
    let t = m.finalize().into_bytes();
    [t[0], t[1], t[2], t[3]]
}

fn token_aad(kid: &[u8], expires_at: u64) -> [u8; 15 + 4 + 4 + 8] {
    let mut a = [0u8; 31];
    a[..15].copy_from_slice(b"keel-rudp token");
    a[15..19].copy_from_slice(&VERSION.to_be_bytes());
    a[19..23].copy_from_slice(kid);
    a[23..].copy_from_slice(&expires_at.to_be_bytes());
    a
}

fn addr_bytes(a: SocketAddr) -> [u8; 18] {
    let ip = match a.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    let mut b = [0u8; 18];
    b[..16].copy_from_slice(&ip);
    b[16..].copy_from_slice(&a.port().to_be_bytes());
    b
}

fn same_addr(a: SocketAddr, b: SocketAddr) -> bool {
    addr_bytes(a) == addr_bytes(b)
}

impl TokenMinter {
    /// A minter with the key shared with the servers (32 random bytes,
    /// kept secret by the backend and the servers).
    pub fn new(key: [u8; 32]) -> Self {
        TokenMinter { key }
    }

    /// Mints a token with fresh session keys and nonce from the OS.
    pub fn mint(&self, spec: &TokenSpec) -> io::Result<ConnectToken> {
        let r: [u8; 24 + 64] = os_random()?;
        let mut nonce = [0u8; 24];
        nonce.copy_from_slice(&r[..24]);
        let mut c2s = [0u8; 32];
        c2s.copy_from_slice(&r[24..56]);
        let mut s2c = [0u8; 32];
        s2c.copy_from_slice(&r[56..]);
        self.mint_with(spec, nonce, c2s, s2c)
    }

    /// Mints a token with the given nonce and keys (which must be fresh
    /// random bytes: [`TokenMinter::mint`] draws them).
    pub fn mint_with(
        &self,
        spec: &TokenSpec,
        nonce: [u8; 24],
        c2s: [u8; 32],
        s2c: [u8; 32],
    ) -> io::Result<ConnectToken> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        if spec.server_addrs.is_empty() || spec.server_addrs.len() > MAX_TOKEN_ADDRS {
            return Err(bad("a token lists 1 to 8 server addresses"));
        }
        if spec.user_data.len() > MAX_USER_DATA {
            return Err(bad("a token's user data is at most 256 bytes"));
        }
        let kid = key_id(&self.key);
        let mut buf = vec![0u8; MAX_TOKEN_LEN];
        let mut w = Writer::new(&mut buf);
        let plain_start = 4 + 8 + 24;
        let ok = (|| {
            w.bytes(&kid)?;
            w.u64(spec.expires_at)?;
            w.bytes(&nonce)?;
            w.u64(spec.client_id)?;
            w.u32(spec.timeout_secs)?;
            w.u8(spec.server_addrs.len() as u8)?;
            for a in &spec.server_addrs {
                w.bytes(&addr_bytes(*a))?;
            }
            w.bytes(&c2s)?;
            w.bytes(&s2c)?;
            w.u16(spec.user_data.len() as u16)?;
            w.bytes(&spec.user_data)
        })();
        ok.map_err(|_| bad("token too long"))?;
        let end = w.len();
        let aead = XChaCha20Poly1305::new(Key::from_slice(&self.key));
        let tag = aead
            .encrypt_in_place_detached(
                XNonce::from_slice(&nonce),
                &token_aad(&kid, spec.expires_at),
                &mut buf[plain_start..end],
            )
            .map_err(|_| bad("sealing failed"))?;
        buf.truncate(end);
        buf.extend_from_slice(&tag);
        Ok(ConnectToken {
            server_addrs: spec.server_addrs.clone(),
            expires_at: spec.expires_at,
            client_id: spec.client_id,
            timeout_secs: spec.timeout_secs,
            client_to_server_key: c2s,
            server_to_client_key: s2c,
            sealed: buf,
        })
    }
}

/// Opens a sealed token with `key` and checks it for a server at one of
/// `own`, at unix time `unix_now`. The replay check is the caller's.
pub(crate) fn open_token(
    key: &[u8; 32],
    kid: &[u8; 4],
    own: &[SocketAddr],
    unix_now: u64,
    sealed: &[u8],
) -> Result<TokenClaims, TokenError> {
    if sealed.len() < 4 + 8 + 24 + TAG_LEN || sealed.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Forged);
    }
    if sealed[..4] != kid[..] {
        return Err(TokenError::WrongKey);
    }
    let expires_at = u64::from_be_bytes(sealed[4..12].try_into().unwrap_or([0; 8]));
    let nonce = XNonce::from_slice(&sealed[12..36]);
    let body_end = sealed.len() - TAG_LEN;
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&sealed[body_end..]);
    let mut plain = [0u8; MAX_TOKEN_LEN];
    let plain = &mut plain[..body_end - 36];
    plain.copy_from_slice(&sealed[36..body_end]);
    let aead = XChaCha20Poly1305::new(Key::from_slice(key));
    aead.decrypt_in_place_detached(
        nonce,
        &token_aad(kid, expires_at),
        plain,
        Tag::from_slice(&tag),
    )
    .map_err(|_| TokenError::Forged)?;
    // Authentic from here on: the backend wrote it, so a decode error is
    // a bug of the backend's, and refused as forged all the same.
    if expires_at <= unix_now {
        return Err(TokenError::Expired);
    }
    let mut r = Reader::new(plain);
    let parse = |r: &mut Reader<'_>| -> Result<TokenClaims, crate::wire::DecodeError> {
        let client_id = r.u64("client id")?;
        let timeout_secs = r.u32("timeout")?;
        let n = usize::from(r.u8("address count")?);
        let mut listed = false;
        for _ in 0..n.min(MAX_TOKEN_ADDRS) {
            let ip: [u8; 16] = r.array("address")?;
            let port = r.u16("port")?;
            let a = SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port);
            listed |= own.iter().any(|o| same_addr(*o, a));
        }
        let c2s = r.array("c2s key")?;
        let s2c = r.array("s2c key")?;
        let ud_len = usize::from(r.u16("user data length")?);
        let user_data = r.bytes(ud_len, "user data")?.to_vec();
        Ok(TokenClaims {
            client_id,
            timeout_secs: if listed { timeout_secs } else { u32::MAX },
            user_data,
            c2s,
            s2c,
            tag,
            expires_at,
        })
    };
    let claims = parse(&mut r).map_err(|_| TokenError::Forged)?;
    if claims.timeout_secs == u32::MAX {
        return Err(TokenError::WrongServer);
    }
    Ok(claims)
}

/// The key id of `key`: the first bytes of every token sealed under it.
pub(crate) fn token_key_id(key: &[u8; 32]) -> [u8; 4] {
    key_id(key)
}

/// Raw per-direction keys from a token, before they are bound to one
/// connection.
#[derive(Clone, Copy)]
pub(crate) struct SessionKeys {
    pub c2s: [u8; 32],
    pub s2c: [u8; 32],
}

/// One direction's packet key: HMAC-SHA256 under the token's key for that
/// direction over `"keel-rudp packet key "`, the label (`c2s` or `s2c`),
/// the hello nonce and the connection ID (`docs/rudp.md`, "Packet keys").
pub(crate) fn packet_key(
    key: &[u8; 32],
    label: &[u8],
    nonce: &[u8; 16],
    cid: ConnectionId,
) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    m.update(b"keel-rudp packet key ");
    m.update(label);
    m.update(nonce);
    m.update(&cid.0);
    m.finalize().into_bytes().into()
}

fn derive(key: &[u8; 32], label: &[u8], nonce: &[u8; 16], cid: ConnectionId) -> ChaCha20Poly1305 {
    let k = packet_key(key, label, nonce, cid);
    ChaCha20Poly1305::new(Key::from_slice(&k))
}

/// The AEAD state of one connection: a key per direction, bound to the
/// connection (the hello nonce and the connection ID enter the key, so two
/// connections from one token never share a key and nonce) and a replay
/// window in front of the connection.
pub(crate) struct PacketCrypto {
    seal: ChaCha20Poly1305,
    open: ChaCha20Poly1305,
    pub window: ReplayWindow,
}

impl PacketCrypto {
    pub(crate) fn new(
        keys: &SessionKeys,
        client: bool,
        nonce: &[u8; 16],
        cid: ConnectionId,
    ) -> Self {
        let c2s = derive(&keys.c2s, b"c2s", nonce, cid);
        let s2c = derive(&keys.s2c, b"s2c", nonce, cid);
        let (seal, open) = if client { (c2s, s2c) } else { (s2c, c2s) };
        PacketCrypto {
            seal,
            open,
            window: ReplayWindow::default(),
        }
    }

    fn nonce(pn: u64) -> Nonce {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&pn.to_be_bytes());
        *Nonce::from_slice(&n)
    }

    /// Seals `buf[header..len]` in place with `buf[..header]` as associated
    /// data and writes the tag after it; returns the new length.
    pub(crate) fn seal(&self, pn: u64, buf: &mut [u8], header: usize, len: usize) -> Option<usize> {
        if buf.len() < len + TAG_LEN {
            return None;
        }
        let (aad, rest) = buf.split_at_mut(header);
        let tag = self
            .seal
            .encrypt_in_place_detached(&Self::nonce(pn), aad, &mut rest[..len - header])
            .ok()?;
        buf[len..len + TAG_LEN].copy_from_slice(&tag);
        Some(len + TAG_LEN)
    }

    /// Opens `data` (header `header` bytes, then ciphertext and tag) into
    /// `out`; returns the plaintext length, or `None` if it is not
    /// authentic.
    pub(crate) fn open(
        &self,
        pn: u64,
        data: &[u8],
        header: usize,
        out: &mut [u8],
    ) -> Option<usize> {
        if data.len() < header + TAG_LEN {
            return None;
        }
        let body = data.len() - TAG_LEN - header;
        let out = out.get_mut(..body)?;
        out.copy_from_slice(&data[header..header + body]);
        self.open
            .decrypt_in_place_detached(
                &Self::nonce(pn),
                &data[..header],
                out,
                Tag::from_slice(&data[data.len() - TAG_LEN..]),
            )
            .ok()?;
        Some(body)
    }
}

/// Which of the last [`REPLAY_WINDOW`] packet numbers were received.
#[derive(Default)]
pub(crate) struct ReplayWindow {
    largest: Option<u64>,
    bits: [u64; (REPLAY_WINDOW / 64) as usize],
}

impl ReplayWindow {
    /// Whether `pn` is new (not seen and not too old).
    pub(crate) fn is_new(&self, pn: u64) -> bool {
        match self.largest {
            None => true,
            Some(l) if pn > l => true,
            Some(l) if l - pn >= REPLAY_WINDOW => false,
            Some(_) => self.bits[Self::slot(pn).0] & (1 << Self::slot(pn).1) == 0,
        }
    }

    fn slot(pn: u64) -> (usize, u64) {
        let i = pn % REPLAY_WINDOW;
        ((i / 64) as usize, i % 64)
    }

    /// Marks `pn` received (after it was authenticated).
    pub(crate) fn mark(&mut self, pn: u64) {
        let l = self.largest.unwrap_or(0);
        if self.largest.is_none() || pn > l {
            // Clear the slots that fall out of the window.
            let from = self.largest.map_or(0, |l| l + 1);
            if pn - from >= REPLAY_WINDOW {
                self.bits = [0; (REPLAY_WINDOW / 64) as usize];
            } else {
                for p in from..pn {
                    let (w, b) = Self::slot(p);
                    self.bits[w] &= !(1 << b);
                }
            }
            self.largest = Some(pn);
        }
        let (w, b) = Self::slot(pn);
        self.bits[w] |= 1 << b;
    }
}

/// `N` random bytes from the operating system's generator, for keys,
/// nonces and connection IDs (through the `getrandom` crate, so it works on
/// every target a driver runs on: Linux, Windows, macOS, Android, iOS).
///
/// A driver of this crate calls it for what [`Connection::connect`] and
/// [`TokenMinter::mint`] need from it; the error names what failed.
///
/// [`Connection::connect`]: crate::Connection::connect
///
/// ```
/// let key: [u8; 32] = keel_rudp_proto::os_random().unwrap();
/// assert_eq!(key.len(), 32);
/// ```
pub fn os_random<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| {
        io::Error::other(format!(
            "reading {N} random bytes from the OS for a key (getrandom): {e}"
        ))
    })?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TokenSpec {
        TokenSpec {
            server_addrs: vec!["192.0.2.1:4000".parse().unwrap()],
            expires_at: 1000,
            client_id: 7,
            timeout_secs: 5,
            user_data: vec![1, 2, 3],
        }
    }

    #[test]
    fn token_round_trip_and_refusals() {
        let key = [3; 32];
        let kid = token_key_id(&key);
        let own = ["192.0.2.1:4000".parse().unwrap()];
        let t = TokenMinter::new(key)
            .mint_with(&spec(), [1; 24], [2; 32], [4; 32])
            .unwrap();
        let c = open_token(&key, &kid, &own, 999, &t.sealed).unwrap();
        assert_eq!(
            (c.client_id, c.timeout_secs, &c.user_data[..]),
            (7, 5, &[1, 2, 3][..])
        );
        assert_eq!((c.c2s, c.s2c), ([2; 32], [4; 32]));
        assert_eq!(
            open_token(&key, &kid, &own, 1000, &t.sealed),
            Err(TokenError::Expired)
        );
        let other = ["192.0.2.1:4001".parse().unwrap()];
        assert_eq!(
            open_token(&key, &kid, &other, 0, &t.sealed),
            Err(TokenError::WrongServer)
        );
        let k2 = [5; 32];
        assert_eq!(
            open_token(&k2, &token_key_id(&k2), &own, 0, &t.sealed),
            Err(TokenError::WrongKey)
        );
        for i in 0..t.sealed.len() {
            let mut bad = t.sealed.clone();
            bad[i] ^= 1;
            let e = open_token(&key, &kid, &own, 0, &bad).unwrap_err();
            assert!(
                matches!(e, TokenError::Forged | TokenError::WrongKey),
                "byte {i}: {e:?}"
            );
        }
        assert_eq!(
            open_token(&key, &kid, &own, 0, &[]),
            Err(TokenError::Forged)
        );
    }

    #[test]
    fn replay_window() {
        let mut w = ReplayWindow::default();
        assert!(w.is_new(0));
        w.mark(0);
        assert!(!w.is_new(0));
        w.mark(5);
        assert!(w.is_new(3) && !w.is_new(5));
        w.mark(5 + REPLAY_WINDOW);
        assert!(!w.is_new(5), "too old");
        assert!(w.is_new(6) && !w.is_new(5 + REPLAY_WINDOW));
        w.mark(100_000);
        assert!(!w.is_new(100_000 - REPLAY_WINDOW) && w.is_new(100_000 - 1));
    }

    #[test]
    fn packets_seal_and_open_per_direction() {
        let keys = SessionKeys {
            c2s: [1; 32],
            s2c: [2; 32],
        };
        let cid = ConnectionId([1; 8]);
        let c = PacketCrypto::new(&keys, true, &[9; 16], cid);
        let s = PacketCrypto::new(&keys, false, &[9; 16], cid);
        let mut buf = [0u8; 64];
        buf[..10].copy_from_slice(b"headerbody");
        let n = c.seal(3, &mut buf, 6, 10).unwrap();
        let mut out = [0u8; 64];
        assert_eq!(s.open(3, &buf[..n], 6, &mut out), Some(4));
        assert_eq!(&out[..4], b"body");
        assert_eq!(s.open(4, &buf[..n], 6, &mut out), None, "other nonce");
        assert_eq!(c.open(3, &buf[..n], 6, &mut out), None, "own direction");
        buf[0] ^= 1;
        assert_eq!(
            s.open(3, &buf[..n], 6, &mut out),
            None,
            "header is authenticated"
        );
    }
}
