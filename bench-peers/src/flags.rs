//! The command line (lexopt), validated into a [`Command`].
//!
//! ```text
//! keel-peer LIB server --bind ADDR [--tuned] [--redundancy LEVEL]
//! keel-peer LIB client --connect ADDR --clients N --rate HZ --payload BYTES \
//!     --seconds S [--warmup S] [--drain S] [--channel reliable-ordered|unreliable] [--tuned]
//!     [--redundancy LEVEL]
//! keel-peer --help | --version
//! ```
//!
//! As in keel-bench: every flag but the switches takes one value (`--flag V`
//! or `--flag=V`), a flag given twice is an error, unknown flags and stray
//! arguments are errors, and every error names the flag and what it
//! accepts.

use std::net::SocketAddr;
use std::time::Duration;

/// The libraries `LIB` can name (those not built in say so when run).
pub const LIBRARIES: &[&str] = &[
    "keel",
    "kcp",
    "ikcp",
    "quinn",
    "quinn-streams",
    "enet",
    "gns",
    "renet",
];

/// Most clients one process runs.
pub const MAX_CLIENTS: u32 = 10_000;
/// Most messages per second per client.
pub const MAX_RATE: u32 = 10_000;
/// Smallest payload: the header `[u64 seq][u64 send_ns]`.
pub const MIN_PAYLOAD: usize = 16;
/// Largest payload (every library here fragments up to this).
pub const MAX_PAYLOAD: usize = 16_384;
/// Longest phase (warmup, measured window or drain), seconds.
pub const MAX_SECONDS: f64 = 3_600.0;
/// Most messages one client process sends (clients x rate x (warmup +
/// seconds)): the load's bookkeeping holds each window message until its
/// echo.
pub const MAX_MESSAGES: f64 = 5_000_000.0;

/// Which kind of channel the messages go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// Reliable and ordered.
    ReliableOrdered,
    /// Unreliable (see each library's `settings` for which flavour).
    Unreliable,
}

impl Channel {
    /// The name on the command line and in the JSON line.
    pub fn name(self) -> &'static str {
        match self {
            Channel::ReliableOrdered => "reliable-ordered",
            Channel::Unreliable => "unreliable",
        }
    }
}

/// `keel-peer LIB server ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerArgs {
    /// The library (one of [`LIBRARIES`]).
    pub library: String,
    /// `--bind`.
    pub bind: SocketAddr,
    /// `--tuned`: the game tuning of issue 22 instead of the defaults.
    pub tuned: bool,
    /// `--redundancy` (keel only): the reliable-ordered channel's level,
    /// `None` for keel-rudp's default.
    pub redundancy: Option<u8>,
}

/// `keel-peer LIB client ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientArgs {
    /// The library (one of [`LIBRARIES`]).
    pub library: String,
    /// `--connect`: the server (or the relay in front of it).
    pub connect: SocketAddr,
    /// `--clients`: connections, each with its own socket.
    pub clients: u32,
    /// `--rate`: messages per second per client (open loop).
    pub rate: u32,
    /// `--payload`: bytes per message, header included.
    pub payload: usize,
    /// `--seconds`: the measured window.
    pub seconds: Duration,
    /// `--warmup`: sending but not measured, before the window (default 1 s).
    pub warmup: Duration,
    /// `--drain`: after the window, no sends, waiting for echoes (default 2 s).
    pub drain: Duration,
    /// `--channel` (default reliable-ordered).
    pub channel: Channel,
    /// `--tuned`.
    pub tuned: bool,
    /// `--redundancy` (keel only), as for the server.
    pub redundancy: Option<u8>,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `--help`.
    Help,
    /// `--version`.
    Version,
    /// An echo server.
    Server(ServerArgs),
    /// The clients' load.
    Client(ClientArgs),
}

/// The `--help` text.
pub const HELP: &str = "\
keel-peer: an echo peer of one reliable-UDP library, for keel-bench relay (issue 22)

usage:
  keel-peer LIB server --bind ADDR [--tuned] [--redundancy LEVEL]
  keel-peer LIB client --connect ADDR --clients N --rate HZ --payload BYTES
                       --seconds S [--warmup S] [--drain S]
                       [--channel reliable-ordered|unreliable] [--tuned]
                       [--redundancy LEVEL]
  keel-peer --help | --version

LIB: keel, kcp (the kcp crate), ikcp (KCP's C ikcp.c), quinn, quinn-streams,
enet, gns, renet (gns and renet only when built with their cargo features).

server: binds, prints `ready ADDR` on stderr, echoes every message back on
the channel it came on until SIGINT/SIGTERM, then prints one JSON line.
client: connects N clients (each its own socket), sends HZ messages a second
each ([u64 seq][u64 send_ns][pad]), open loop, for warmup + seconds, waits
drain for the echoes, prints one JSON line; exit 0 iff ok.

  --bind ADDR        server address (IP:PORT; port 0 picks one)
  --connect ADDR     server or relay address
  --clients N        1..=10000
  --rate HZ          messages per second per client, 1..=10000
  --payload BYTES    16..=16384 (the 16-byte header included)
  --seconds S        measured window, seconds (>0, at most 3600)
  --warmup S         before the window, not measured (default 1)
  --drain S          after the window, no sends, waiting for echoes (default 2)
  --channel C        reliable-ordered (default) or unreliable
  --tuned            the game tuning of issue 22 (see bench-peers/README.md)
  --redundancy L     keel only: the reliable-ordered channel's redundancy level
                     (keel-rudp's ChannelConfig::with_redundancy), 0..=5; give
                     the same level to the server and the client (default:
                     keel-rudp's, 2)
";

/// Highest `--redundancy` (keel-rudp's `MAX_REDUNDANCY`; a test checks).
pub const MAX_REDUNDANCY_FLAG: u8 = 5;

/// A flag error in words: the flag and what it accepts.
pub type FlagError = String;

fn seconds(flag: &str, v: &str, zero_ok: bool) -> Result<Duration, FlagError> {
    let ok = !v.is_empty()
        && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && v.bytes().filter(|&b| b == b'.').count() <= 1
        && v != ".";
    let s: f64 = if ok {
        v.parse().unwrap_or(f64::NAN)
    } else {
        f64::NAN
    };
    if !s.is_finite() || s > MAX_SECONDS || (!zero_ok && s <= 0.0) {
        let lo = if zero_ok { "0" } else { "more than 0" };
        return Err(format!(
            "{flag}: expected seconds ({lo}, at most {MAX_SECONDS}, digits with an optional fraction), got {v:?}"
        ));
    }
    Ok(Duration::from_secs_f64(s))
}

fn uint(flag: &str, v: &str, lo: u64, hi: u64) -> Result<u64, FlagError> {
    match v.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) && v.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!(
            "{flag}: expected an integer {lo}..={hi}, got {v:?}"
        )),
    }
}

fn addr(flag: &str, v: &str) -> Result<SocketAddr, FlagError> {
    v.parse()
        .map_err(|_| format!("{flag}: expected IP:PORT (e.g. 127.0.0.1:7000), got {v:?}"))
}

/// Parses `keel-peer`'s arguments (without the program name).
pub fn parse<I>(args: I) -> Result<Command, FlagError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut positional: Vec<String> = Vec::new();
    let mut values: Vec<(String, String)> = Vec::new();
    let mut tuned = false;
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Short('V') | Long("version") => return Ok(Command::Version),
            Long("tuned") => {
                if tuned {
                    return Err("--tuned: given twice".into());
                }
                tuned = true;
            }
            Long(name) => {
                let flag = format!("--{name}");
                const TAKES: &[&str] = &[
                    "--bind",
                    "--connect",
                    "--clients",
                    "--rate",
                    "--payload",
                    "--seconds",
                    "--warmup",
                    "--drain",
                    "--channel",
                    "--redundancy",
                ];
                if !TAKES.contains(&flag.as_str()) {
                    return Err(format!("{flag}: unknown flag (see --help)"));
                }
                let v = p
                    .value()
                    .map_err(|_| format!("{flag}: missing value"))?
                    .into_string()
                    .map_err(|_| format!("{flag}: not UTF-8"))?;
                if v.starts_with("--") {
                    return Err(format!("{flag}: missing value (got the flag {v})"));
                }
                if values.iter().any(|(f, _)| *f == flag) {
                    return Err(format!("{flag}: given twice"));
                }
                values.push((flag, v));
            }
            Value(v) => positional.push(
                v.into_string()
                    .map_err(|_| "arguments must be UTF-8".to_string())?,
            ),
            Short(c) => return Err(format!("-{c}: unknown flag (see --help)")),
        }
    }
    let (library, role) = match positional.as_slice() {
        [l, r] => (l.clone(), r.as_str()),
        [] => return Err("expected LIB server|client (see --help)".into()),
        [_] => return Err("expected a role after LIB: server or client".into()),
        [_, _, extra, ..] => return Err(format!("unexpected argument {extra:?}")),
    };
    if !LIBRARIES.contains(&library.as_str()) {
        return Err(format!(
            "LIB: expected one of {}, got {library:?}",
            LIBRARIES.join(", ")
        ));
    }
    let take = |values: &mut Vec<(String, String)>, flag: &str| -> Option<String> {
        let i = values.iter().position(|(f, _)| f == flag)?;
        Some(values.remove(i).1)
    };
    let redundancy = match take(&mut values, "--redundancy") {
        None => None,
        Some(_) if library != "keel" => {
            return Err(format!(
                "--redundancy: keel-rudp's level, for LIB keel only (got LIB {library:?})"
            ))
        }
        Some(v) => Some(uint("--redundancy", &v, 0, MAX_REDUNDANCY_FLAG.into())? as u8),
    };
    let cmd = match role {
        "server" => {
            let bind = take(&mut values, "--bind").ok_or("server: --bind ADDR is required")?;
            Command::Server(ServerArgs {
                library,
                bind: addr("--bind", &bind)?,
                tuned,
                redundancy,
            })
        }
        "client" => {
            let mut need = |flag: &str| {
                take(&mut values, flag).ok_or_else(|| format!("client: {flag} is required"))
            };
            let connect = addr("--connect", &need("--connect")?)?;
            let clients = uint("--clients", &need("--clients")?, 1, MAX_CLIENTS.into())? as u32;
            let rate = uint("--rate", &need("--rate")?, 1, MAX_RATE.into())? as u32;
            let payload = uint(
                "--payload",
                &need("--payload")?,
                MIN_PAYLOAD as u64,
                MAX_PAYLOAD as u64,
            )? as usize;
            let secs = seconds("--seconds", &need("--seconds")?, false)?;
            let warmup = match take(&mut values, "--warmup") {
                Some(v) => seconds("--warmup", &v, true)?,
                None => Duration::from_secs(1),
            };
            let drain = match take(&mut values, "--drain") {
                Some(v) => seconds("--drain", &v, true)?,
                None => Duration::from_secs(2),
            };
            let channel = match take(&mut values, "--channel").as_deref() {
                None | Some("reliable-ordered") => Channel::ReliableOrdered,
                Some("unreliable") => Channel::Unreliable,
                Some(v) => {
                    return Err(format!(
                        "--channel: expected reliable-ordered or unreliable, got {v:?}"
                    ))
                }
            };
            let total =
                f64::from(clients) * f64::from(rate) * (secs.as_secs_f64() + warmup.as_secs_f64());
            if total > MAX_MESSAGES {
                return Err(format!(
                    "--clients x --rate x (--warmup + --seconds): at most {MAX_MESSAGES} messages \
                     per run, got {total}"
                ));
            }
            Command::Client(ClientArgs {
                library,
                connect,
                clients,
                rate,
                payload,
                seconds: secs,
                warmup,
                drain,
                channel,
                tuned,
                redundancy,
            })
        }
        other => return Err(format!("role: expected server or client, got {other:?}")),
    };
    if let Some((flag, _)) = values.first() {
        return Err(format!("{flag}: not a flag of {role} (see --help)"));
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, FlagError> {
        parse(s.split_whitespace())
    }

    #[test]
    fn client_flags_and_defaults() {
        let Command::Client(c) =
            p("kcp client --connect 127.0.0.1:9 --clients 8 --rate 60 --payload 400 --seconds 3")
                .unwrap()
        else {
            panic!("not a client")
        };
        assert_eq!((c.clients, c.rate, c.payload), (8, 60, 400));
        assert_eq!(c.warmup, Duration::from_secs(1));
        assert_eq!(c.drain, Duration::from_secs(2));
        assert_eq!(c.channel, Channel::ReliableOrdered);
        assert!(!c.tuned);
    }

    #[test]
    fn redundancy_is_keels_and_bounded() {
        let base = "client --connect 127.0.0.1:9 --clients 8 --rate 60 --payload 400 --seconds 3";
        let Command::Client(c) = p(&format!("keel {base} --redundancy 0")).unwrap() else {
            panic!("not a client")
        };
        assert_eq!(c.redundancy, Some(0));
        let Command::Server(s) = p("keel server --bind 127.0.0.1:0 --redundancy=5").unwrap() else {
            panic!("not a server")
        };
        assert_eq!(s.redundancy, Some(5));
        let Command::Client(c) = p(&format!("keel {base}")).unwrap() else {
            panic!("not a client")
        };
        assert_eq!(c.redundancy, None);
        let e = p(&format!("keel {base} --redundancy 6")).unwrap_err();
        assert!(e.contains("--redundancy") && e.contains("0..=5"), "{e}");
        let e = p(&format!("ikcp {base} --redundancy 1")).unwrap_err();
        assert!(e.contains("--redundancy") && e.contains("keel only"), "{e}");
    }

    #[test]
    fn errors_name_the_flag() {
        let base = "kcp client --connect 127.0.0.1:9 --rate 60 --payload 400 --seconds 3";
        assert!(p(&format!("{base} --clients 0"))
            .unwrap_err()
            .starts_with("--clients"));
        assert!(p(&format!("{base} --clients 1 --clients 2"))
            .unwrap_err()
            .contains("twice"));
        assert!(p(&format!("{base} --clients 1 --bind 127.0.0.1:1"))
            .unwrap_err()
            .starts_with("--bind: not a flag of client"));
        assert!(p("kcp server --bind nowhere")
            .unwrap_err()
            .starts_with("--bind"));
        assert!(p("udt server --bind 127.0.0.1:0")
            .unwrap_err()
            .starts_with("LIB"));
        assert!(p(&format!("{base} --clients 1 --payload 8")).is_err());
        assert!(p(&format!("{base} --clients 1 --warmup -1")).is_err());
        let big = "kcp client --connect 127.0.0.1:9 --clients 10000 --rate 1000 --payload 400";
        assert!(p(&format!("{big} --seconds 3"))
            .unwrap_err()
            .contains("at most"));
    }
}
