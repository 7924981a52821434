//! Mints a connect token as a game's backend would, and prints it.
//!
//! ```text
//! KEEL_TOKEN_KEY=<64 hex digits> cargo run -p keel-rudp --example mint_token -- \
//!     203.0.113.7:4000 4242 [seconds valid, default 30]
//! ```
//!
//! The key is the one the servers run with (`ServerSecurity::Tokens`).
//! Prints, on stdout, the token's text form (base64url, what the backend
//! hands the client, which reads it back with `text.parse::<ConnectToken>()`;
//! `docs/security.md`, "A token as bytes and as text"), and on stderr what
//! it says, one field a line. `TOKEN=$(mint_token ...)` keeps the text.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use keel_rudp::{TokenMinter, TokenSpec};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn parse_key(s: &str) -> Result<[u8; 32], String> {
    let s = s.trim();
    if s.len() != 64 {
        return Err(format!(
            "KEEL_TOKEN_KEY: expected 64 hex digits, got {}",
            s.len()
        ));
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .map_err(|e| format!("KEEL_TOKEN_KEY: byte {i}: {e}"))?;
    }
    Ok(k)
}

fn run() -> Result<(), String> {
    let key = parse_key(&std::env::var("KEEL_TOKEN_KEY").map_err(|_| {
        "KEEL_TOKEN_KEY: set it to the servers' token key (64 hex digits)".to_string()
    })?)?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [server, client_id, rest @ ..] = &args[..] else {
        return Err("usage: mint_token SERVER_ADDR CLIENT_ID [SECONDS_VALID]".into());
    };
    let server = server
        .parse()
        .map_err(|e| format!("SERVER_ADDR {server:?}: {e}"))?;
    let client_id = client_id
        .parse()
        .map_err(|e| format!("CLIENT_ID {client_id:?}: {e}"))?;
    let valid: u64 = match rest.first() {
        Some(s) => s.parse().map_err(|e| format!("SECONDS_VALID {s:?}: {e}"))?,
        None => 30,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let token = TokenMinter::new(key)
        .mint(&TokenSpec {
            server_addrs: vec![server],
            expires_at: now + valid,
            client_id,
            timeout_secs: 10,
            user_data: Vec::new(),
        })
        .map_err(|e| e.to_string())?;
    println!("{}", token.to_text());
    eprintln!("server_addrs {server}");
    eprintln!("expires_at {}", token.expires_at);
    eprintln!("client_id {}", token.client_id);
    eprintln!(
        "sealed {} bytes: {}",
        token.sealed.len(),
        hex(&token.sealed)
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mint_token: {e}");
            ExitCode::FAILURE
        }
    }
}
