//! One parser per kind of flag value that is not a plain number:
//! addresses, names (`--io-model`, `--lane-steering`, ...), link
//! conditioner specs, the idle timeout. Each returns a [`FlagError`] naming
//! the flag and what it accepts.

use std::net::SocketAddr;
use std::time::Duration;

use keel_udp::Impairment;

use super::config::{
    AddressFamily, ChannelChoice, ClientSocketsChoice, FullPolicyChoice, IoModel, KcpMode,
    LaneSteeringChoice, OutputFormat, Protocol, MAX_IDLE_TIMEOUT_SECS, MAX_KCP_WINDOW,
    MAX_PAYLOAD_IPV4, MAX_PAYLOAD_IPV6, MAX_TRANSFER, MIN_PAYLOAD, MIN_TRANSFER,
};
use super::error::FlagError;
use super::number::{parse_seconds, parse_u32, parse_uint};

pub(crate) fn parse_addr(
    flag: &str,
    value: &str,
    port_zero_ok: bool,
) -> Result<SocketAddr, FlagError> {
    let accepted = if port_zero_ok {
        "an IP:PORT literal such as 0.0.0.0:7000 or [::]:7000"
    } else {
        "an IP:PORT literal with port 1..=65535, such as 10.0.0.2:7000 or [fd00::2]:7000"
    };
    let addr: SocketAddr = value.parse().map_err(|_| {
        FlagError::new(
            format!("--{flag}"),
            format!("expected {accepted} (no host names), got {value:?}"),
        )
    })?;
    if addr.port() == 0 && !port_zero_ok {
        return Err(FlagError::new(
            format!("--{flag}"),
            format!("expected {accepted}, got port 0 in {value:?}"),
        ));
    }
    Ok(addr)
}

pub(crate) fn parse_io_model(value: &str) -> Result<IoModel, FlagError> {
    match value {
        "shared" => Ok(IoModel::Shared),
        "sharded" => Ok(IoModel::Sharded),
        "owned" => Err(FlagError::new(
            "--io-model",
            "expected shared or sharded, got \"owned\": keel supports shared and sharded; \
             arknet's owned model has no keel equivalent",
        )),
        _ => Err(FlagError::new(
            "--io-model",
            format!("expected shared or sharded, got {value:?}"),
        )),
    }
}

pub(crate) fn parse_work(value: &str) -> Result<u64, FlagError> {
    parse_uint("work", value, 0, 10_000_000)
}

pub(crate) fn parse_lanes(value: &str) -> Result<u32, FlagError> {
    parse_u32("server-lanes", value, 1, 64)
}

pub(crate) fn parse_batch(value: &str) -> Result<u32, FlagError> {
    parse_u32("batch", value, 1, 1024)
}

pub(crate) fn parse_threads(value: &str) -> Result<u32, FlagError> {
    parse_u32("io-threads", value, 1, 64)
}

pub(crate) fn parse_server_rcvbuf(value: &str) -> Result<u64, FlagError> {
    parse_uint("udp-server-receive-buffer", value, 1, 1 << 30)
}

/// A link conditioner spec ([`Impairment`]'s textual shape); `off` (or an
/// impairment that does nothing) is `None`.
pub fn parse_impair(flag: &str, value: &str) -> Result<Option<Box<Impairment>>, FlagError> {
    let imp: Impairment = value.parse().map_err(|e: keel_udp::ImpairmentError| {
        FlagError::new(format!("--{flag}"), e.to_string())
    })?;
    Ok((!imp.is_off()).then(|| Box::new(imp)))
}

pub(crate) fn parse_client_sockets(value: &str) -> Result<ClientSocketsChoice, FlagError> {
    match value {
        "per-client" => Ok(ClientSocketsChoice::PerClient),
        "shared" => Ok(ClientSocketsChoice::Shared),
        _ => Err(FlagError::new(
            "--client-sockets",
            format!("expected per-client or shared, got {value:?}"),
        )),
    }
}

pub(crate) fn parse_lane_steering(value: &str) -> Result<LaneSteeringChoice, FlagError> {
    match value {
        "auto" => Ok(LaneSteeringChoice::Auto),
        "hash" => Ok(LaneSteeringChoice::Hash),
        "port" => Ok(LaneSteeringChoice::Port),
        _ => Err(FlagError::new(
            "--lane-steering",
            format!("expected auto, hash or port, got {value:?}"),
        )),
    }
}

/// `--idle-timeout`: `off`, or seconds in `0 < s <= 3600`.
pub(crate) fn parse_idle_timeout(value: &str) -> Result<Option<Duration>, FlagError> {
    if value == "off" {
        return Ok(None);
    }
    let s = parse_seconds("idle-timeout", value, false, MAX_IDLE_TIMEOUT_SECS).map_err(|_| {
        FlagError::new(
            "--idle-timeout",
            format!(
                "expected off or a finite number of seconds in 0 < s <= {MAX_IDLE_TIMEOUT_SECS}{}, \
                 got {value:?}",
                if value.parse::<f64>().is_ok_and(|s| s == 0.0) {
                    " (0 is not accepted: write off to turn the idle timeout off)"
                } else {
                    ""
                }
            ),
        )
    })?;
    // At least a microsecond: keel rejects a zero timeout, and a value
    // such as 0.0000000001 would round to one.
    Ok(Some(
        Duration::from_secs_f64(s).max(Duration::from_micros(1)),
    ))
}

pub(crate) fn parse_full_policy(value: &str) -> Result<FullPolicyChoice, FlagError> {
    match value {
        "refuse" => Ok(FullPolicyChoice::Refuse),
        "evict-idlest" => Ok(FullPolicyChoice::EvictIdlest),
        _ => Err(FlagError::new(
            "--full-policy",
            format!("expected refuse or evict-idlest, got {value:?}"),
        )),
    }
}

/// `--protocol`: `udp` or `rudp`.
pub(crate) fn parse_protocol(value: &str) -> Result<Protocol, FlagError> {
    match value {
        "udp" => Ok(Protocol::Udp),
        "rudp" => Ok(Protocol::Rudp),
        "kcp" => Ok(Protocol::Kcp),
        _ => Err(FlagError::new(
            "--protocol",
            format!(
                "expected udp, rudp or kcp, got {value:?}: keel-bench supports udp (the UDP \
                 part of arknet's benchmark), rudp (keel-rudp) and kcp (KCP as a peer); \
                 arknet's tcp is not supported"
            ),
        )),
    }
}

/// `--kcp-mode`: `fast`, `default` or `normal`.
pub(crate) fn parse_kcp_mode(value: &str) -> Result<KcpMode, FlagError> {
    match value {
        "fast" => Ok(KcpMode::Fast),
        "default" => Ok(KcpMode::Default),
        "normal" => Ok(KcpMode::Normal),
        _ => Err(FlagError::new(
            "--kcp-mode",
            format!("expected fast, default or normal, got {value:?}"),
        )),
    }
}

/// `--channel`: a keel-rudp channel kind.
pub(crate) fn parse_channel(value: &str) -> Result<ChannelChoice, FlagError> {
    match value {
        "reliable-ordered" => Ok(ChannelChoice::ReliableOrdered),
        "reliable-unordered" => Ok(ChannelChoice::ReliableUnordered),
        "unreliable-sequenced" => Ok(ChannelChoice::UnreliableSequenced),
        "unreliable" => Ok(ChannelChoice::Unreliable),
        _ => Err(FlagError::new(
            "--channel",
            format!(
                "expected reliable-ordered, reliable-unordered, unreliable-sequenced or \
                 unreliable, got {value:?}"
            ),
        )),
    }
}

/// `--address-family`: `ipv4` or `ipv6`.
pub(crate) fn parse_family(value: &str) -> Result<AddressFamily, FlagError> {
    match value {
        "ipv4" => Ok(AddressFamily::Ipv4),
        "ipv6" => Ok(AddressFamily::Ipv6),
        _ => Err(FlagError::new(
            "--address-family",
            format!("expected ipv4 or ipv6, got {value:?}"),
        )),
    }
}

/// `--payload`, before the family is known: the widest range (IPv6's);
/// `validate` then checks it against the family.
pub(crate) fn parse_payload(value: &str) -> Result<u64, FlagError> {
    parse_uint("payload", value, MIN_PAYLOAD, MAX_PAYLOAD_IPV6).map_err(|_| {
        FlagError::new(
            "--payload",
            format!(
                "expected an integer in {MIN_PAYLOAD}..={MAX_PAYLOAD_IPV4} \
                 (ipv6: {MIN_PAYLOAD}..={MAX_PAYLOAD_IPV6}), got {value:?}"
            ),
        )
    })
}

/// `--format`: `json`, `human` or `both`.
pub(crate) fn parse_format(value: &str) -> Result<OutputFormat, FlagError> {
    match value {
        "json" => Ok(OutputFormat::Json),
        "human" => Ok(OutputFormat::Human),
        "both" => Ok(OutputFormat::Both),
        _ => Err(FlagError::new(
            "--format",
            format!(
                "expected json, human or both, got {value:?} (without --format: json on \
                 stdout, plus the summary on stderr when stdout is a terminal)"
            ),
        )),
    }
}

/// `--transfer`: message bytes of the bulk case, a plain integer (no size
/// suffix: no size flag of keel-bench takes one).
pub(crate) fn parse_transfer(value: &str) -> Result<u64, FlagError> {
    parse_uint("transfer", value, MIN_TRANSFER, MAX_TRANSFER).map_err(|_| {
        FlagError::new(
            "--transfer",
            format!(
                "expected an integer in {MIN_TRANSFER}..={MAX_TRANSFER} (bytes, header \
                 included; a plain integer without suffix, e.g. 1048576 for 1 MiB), got {value:?}"
            ),
        )
    })
}

/// `--kcp-window`: KCP's windows in packets.
pub(crate) fn parse_kcp_window(value: &str) -> Result<u16, FlagError> {
    let n = parse_u32("kcp-window", value, 1, u32::from(MAX_KCP_WINDOW))?;
    Ok(u16::try_from(n).expect("range fits u16"))
}
