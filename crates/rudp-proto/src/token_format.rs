//! A connect token as bytes and as text: what a game's backend hands a
//! client (over HTTPS, in a launcher's command line, in a JSON reply), in
//! a layout every client (Rust, C, C#, Python) reads the same way.
//!
//! Bytes, big-endian, documented in `docs/security.md` ("A token as bytes
//! and as text"):
//!
//! | field | bytes |
//! | --- | --- |
//! | magic `KRT` and layout version 1 | 4 |
//! | `expires_at` (Unix seconds) | 8 |
//! | `client_id` | 8 |
//! | `timeout_secs` | 4 |
//! | number of server addresses, 1 to 8 | 1 |
//! | each address: 16-byte IPv6 address (IPv4 as IPv4-mapped), port | 18 each |
//! | client-to-server key | 32 |
//! | server-to-client key | 32 |
//! | length of the sealed part, 1 to `MAX_TOKEN_LEN` | 2 |
//! | the sealed part (sent in the HELLO, opened by the server) | that many |
//!
//! Text: the bytes in base64url (RFC 4648, section 5: `A-Z a-z 0-9 - _`)
//! without padding, safe in a URL, a command line and JSON.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::security::{ConnectToken, MAX_TOKEN_ADDRS, MAX_TOKEN_LEN};

/// The first four bytes of a token's byte form: `KRT` and the layout
/// version.
pub const TOKEN_MAGIC: [u8; 4] = *b"KRT\x01";

/// Why bytes or text are not a connect token: names the field and what is
/// accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenParseError {
    /// The text has a character outside base64url (`A-Z a-z 0-9 - _`), at
    /// this byte offset, or a length no base64 text has.
    Text {
        /// Byte offset of the first bad character (the text's length for
        /// a bad length).
        at: usize,
    },
    /// The bytes do not start with [`TOKEN_MAGIC`]: not a keel-rudp
    /// connect token, or another layout version.
    Magic([u8; 4]),
    /// The bytes end inside this field.
    Truncated(&'static str),
    /// The number of server addresses is not 1 to 8.
    AddressCount(u8),
    /// The sealed part's length is not 1 to `MAX_TOKEN_LEN`.
    SealedLength(usize),
    /// Bytes after the sealed part.
    TrailingBytes(usize),
}

impl fmt::Display for TokenParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenParseError::Text { at } => write!(
                f,
                "connect token text: not base64url at byte {at} (A-Z, a-z, 0-9, '-' and '_', no padding, accepted)"
            ),
            TokenParseError::Magic(m) => write!(
                f,
                "connect token: starts with {m:02x?}, not \"KRT\" and layout version 1"
            ),
            TokenParseError::Truncated(what) => {
                write!(f, "connect token: ends inside its {what}")
            }
            TokenParseError::AddressCount(n) => write!(
                f,
                "connect token: {n} server addresses, 1 to {MAX_TOKEN_ADDRS} accepted"
            ),
            TokenParseError::SealedLength(n) => write!(
                f,
                "connect token: sealed part of {n} bytes, 1 to {MAX_TOKEN_LEN} accepted"
            ),
            TokenParseError::TrailingBytes(n) => {
                write!(f, "connect token: {n} bytes after its sealed part")
            }
        }
    }
}

impl std::error::Error for TokenParseError {}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 0x3f) as usize] as char);
        }
    }
    out
}

fn b64url_decode(text: &str) -> Result<Vec<u8>, TokenParseError> {
    let t = text.as_bytes();
    if t.len() % 4 == 1 {
        return Err(TokenParseError::Text { at: t.len() });
    }
    let mut out = Vec::with_capacity(t.len() / 4 * 3 + 2);
    for (c, chunk) in t.chunks(4).enumerate() {
        let mut n = 0u32;
        for (i, &ch) in chunk.iter().enumerate() {
            let v = match ch {
                b'A'..=b'Z' => ch - b'A',
                b'a'..=b'z' => ch - b'a' + 26,
                b'0'..=b'9' => ch - b'0' + 52,
                b'-' => 62,
                b'_' => 63,
                _ => return Err(TokenParseError::Text { at: c * 4 + i }),
            };
            n |= u32::from(v) << (18 - 6 * i);
        }
        let bytes = chunk.len() - 1;
        // Bits past the last whole byte must be zero (one text per token).
        let unused = 24 - 8 * bytes as u32;
        if unused < 24 && n & ((1 << unused) - 1) != 0 && chunk.len() < 4 {
            return Err(TokenParseError::Text {
                at: c * 4 + chunk.len() - 1,
            });
        }
        for i in 0..bytes {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Ok(out)
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TokenParseError> {
        if self.0.len() < n {
            return Err(TokenParseError::Truncated(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], TokenParseError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
}

impl ConnectToken {
    /// The token as bytes, in the layout of [`ConnectToken::from_bytes`].
    ///
    /// # Examples
    ///
    /// ```
    /// use keel_rudp_proto::{ConnectToken, TokenMinter, TokenSpec};
    ///
    /// let token = TokenMinter::new([7; 32]).mint(&TokenSpec {
    ///     server_addrs: vec!["192.0.2.1:9000".parse().unwrap()],
    ///     expires_at: 2_000_000_000,
    ///     client_id: 42,
    ///     timeout_secs: 10,
    ///     user_data: Vec::new(),
    /// })?;
    /// let text = token.to_text(); // what the backend sends the client
    /// let back: ConnectToken = text.parse()?;
    /// assert_eq!(back, token);
    /// assert_eq!(ConnectToken::from_bytes(&token.to_bytes())?, token);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + 8 + 8 + 4 + 1 + 18 * 8 + 64 + 2 + self.sealed.len());
        b.extend_from_slice(&TOKEN_MAGIC);
        b.extend_from_slice(&self.expires_at.to_be_bytes());
        b.extend_from_slice(&self.client_id.to_be_bytes());
        b.extend_from_slice(&self.timeout_secs.to_be_bytes());
        b.push(self.server_addrs.len() as u8);
        for a in &self.server_addrs {
            let ip = match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            b.extend_from_slice(&ip.octets());
            b.extend_from_slice(&a.port().to_be_bytes());
        }
        b.extend_from_slice(&self.client_to_server_key);
        b.extend_from_slice(&self.server_to_client_key);
        b.extend_from_slice(&(self.sealed.len() as u16).to_be_bytes());
        b.extend_from_slice(&self.sealed);
        b
    }

    /// Reads a token from its bytes (untrusted input: every field is
    /// checked, none trusted; the server checks the sealed part).
    pub fn from_bytes(bytes: &[u8]) -> Result<ConnectToken, TokenParseError> {
        let mut c = Cursor(bytes);
        let magic: [u8; 4] = c.array("magic")?;
        if magic != TOKEN_MAGIC {
            return Err(TokenParseError::Magic(magic));
        }
        let expires_at = u64::from_be_bytes(c.array("expires_at")?);
        let client_id = u64::from_be_bytes(c.array("client_id")?);
        let timeout_secs = u32::from_be_bytes(c.array("timeout_secs")?);
        let [count] = c.array("address count")?;
        if count == 0 || count as usize > MAX_TOKEN_ADDRS {
            return Err(TokenParseError::AddressCount(count));
        }
        let mut server_addrs = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let ip = Ipv6Addr::from(c.array::<16>("server address")?);
            let port = u16::from_be_bytes(c.array("server port")?);
            let ip = match ip.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(ip),
            };
            server_addrs.push(SocketAddr::new(ip, port));
        }
        let client_to_server_key = c.array("client-to-server key")?;
        let server_to_client_key = c.array("server-to-client key")?;
        let len = u16::from_be_bytes(c.array("sealed length")?) as usize;
        if len == 0 || len > MAX_TOKEN_LEN {
            return Err(TokenParseError::SealedLength(len));
        }
        let sealed = c.take(len, "sealed part")?.to_vec();
        if !c.0.is_empty() {
            return Err(TokenParseError::TrailingBytes(c.0.len()));
        }
        Ok(ConnectToken {
            server_addrs,
            expires_at,
            client_id,
            timeout_secs,
            client_to_server_key,
            server_to_client_key,
            sealed,
        })
    }

    /// The token as text: its bytes in base64url without padding. It
    /// carries the session keys: send it to the client over an
    /// authenticated, encrypted channel (HTTPS) and keep it out of logs.
    pub fn to_text(&self) -> String {
        b64url_encode(&self.to_bytes())
    }

    /// Reads a token from its text form ([`ConnectToken::to_text`]);
    /// surrounding whitespace is ignored.
    pub fn from_text(text: &str) -> Result<ConnectToken, TokenParseError> {
        ConnectToken::from_bytes(&b64url_decode(text.trim())?)
    }
}

impl std::str::FromStr for ConnectToken {
    type Err = TokenParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConnectToken::from_text(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::{TokenMinter, TokenSpec};
    use proptest::prelude::*;

    fn token() -> ConnectToken {
        TokenMinter::new([3; 32])
            .mint_with(
                &TokenSpec {
                    server_addrs: vec![
                        "192.0.2.1:9000".parse().unwrap(),
                        "[2001:db8::1]:9001".parse().unwrap(),
                    ],
                    expires_at: 1_900_000_000,
                    client_id: 77,
                    timeout_secs: 10,
                    user_data: b"lobby 3".to_vec(),
                },
                [1; 24],
                [2; 32],
                [4; 32],
            )
            .unwrap()
    }

    #[test]
    fn bytes_and_text_round_trip() {
        let t = token();
        assert_eq!(ConnectToken::from_bytes(&t.to_bytes()), Ok(t.clone()));
        let text = t.to_text();
        assert!(text
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_eq!(format!(" {text}\n").parse::<ConnectToken>(), Ok(t));
    }

    #[test]
    fn bad_input_names_what_is_wrong() {
        let b = token().to_bytes();
        assert_eq!(
            ConnectToken::from_bytes(&b[..10]),
            Err(TokenParseError::Truncated("expires_at"))
        );
        let mut m = b.clone();
        m[3] = 2;
        assert_eq!(
            ConnectToken::from_bytes(&m),
            Err(TokenParseError::Magic(*b"KRT\x02"))
        );
        let mut n = b.clone();
        n[24] = 9;
        assert_eq!(
            ConnectToken::from_bytes(&n),
            Err(TokenParseError::AddressCount(9))
        );
        let mut extra = b.clone();
        extra.push(0);
        assert_eq!(
            ConnectToken::from_bytes(&extra),
            Err(TokenParseError::TrailingBytes(1))
        );
        assert_eq!(
            "abc*def".parse::<ConnectToken>(),
            Err(TokenParseError::Text { at: 3 })
        );
        assert_eq!(
            "abcde".parse::<ConnectToken>(),
            Err(TokenParseError::Text { at: 5 })
        );
        assert_eq!(
            TokenParseError::AddressCount(9).to_string(),
            "connect token: 9 server addresses, 1 to 8 accepted"
        );
    }

    proptest! {
        #[test]
        fn base64url_round_trips_and_random_text_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            junk in ".{0,80}",
        ) {
            prop_assert_eq!(b64url_decode(&b64url_encode(&bytes)), Ok(bytes));
            let _ = junk.parse::<ConnectToken>();
        }
    }
}
