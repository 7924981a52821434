//! The meaning pass: [`RawArgs`] to a [`Command`]. Checks that each flag
//! belongs to the subcommand and is given once, parses every value
//! ([`super::values`], [`super::number`]), then the cross-checks between
//! flags (family against payload and `--connect`, bytes in flight,
//! server-side flags without a server).

use std::path::PathBuf;

use super::config::{
    AddressFamily, ChannelChoice, ClientSocketsChoice, Command, CompareConfig, FullPolicyChoice,
    IoModel, KcpMode, LaneSteeringChoice, OutputFormat, Protocol, RelayConfig, ReportConfig,
    RunConfig, ServeConfig, Shell, DEFAULT_BATCH, DEFAULT_BULK_DRAIN, DEFAULT_IO_THREADS,
    DEFAULT_KCP_WINDOW, DEFAULT_MAX_FLOWS, DEFAULT_MAX_SESSIONS, DEFAULT_PAYLOAD,
    DEFAULT_SERVER_LANES, DEFAULT_SERVE_IDLE_TIMEOUT, DEFAULT_WORK, MAX_ACK_DELAY_MS,
    MAX_CLIENTS_CLOSED_LOOP, MAX_CLIENTS_OPEN_LOOP, MAX_IN_FLIGHT_BYTES, MAX_MAX_FLOWS,
    MAX_MAX_SESSIONS, MAX_REDUNDANCY, MIN_PAYLOAD,
};
use super::error::FlagError;
use super::number::{parse_seconds, parse_u32, parse_uint};
use super::raw::{HelpLength, RawArgs, RawFlag};
use super::table::{find_flag, Subcommand};
use super::values::{
    parse_addr, parse_batch, parse_channel, parse_client_sockets, parse_family, parse_format,
    parse_full_policy, parse_idle_timeout, parse_impair, parse_io_model, parse_kcp_mode,
    parse_kcp_window, parse_lane_steering, parse_lanes, parse_payload, parse_protocol,
    parse_server_rcvbuf, parse_threads, parse_transfer, parse_work,
};

/// Validates [`RawArgs`] into a [`Command`]: values, ranges, scope of each
/// flag, repeats, and the cross-checks between flags.
pub fn validate(raw: RawArgs) -> Result<Command, FlagError> {
    if let Some(length) = raw.help {
        return Ok(Command::Help {
            sub: raw.subcommand,
            long: length == HelpLength::Long,
        });
    }
    if raw.version {
        return Ok(Command::Version);
    }
    // Scope and repeats first, so the later passes can assume one value each.
    for (i, f) in raw.flags.iter().enumerate() {
        check_scope(f, raw.subcommand)?;
        check_given_once(f, &raw.flags[..i])?;
    }
    match raw.subcommand {
        Subcommand::Run => validate_run(&raw).map(Command::Run),
        Subcommand::Serve => validate_serve(&raw).map(Command::Serve),
        Subcommand::Report => validate_report(&raw).map(Command::Report),
        Subcommand::Compare => validate_compare(&raw).map(Command::Compare),
        Subcommand::Completions => validate_completions(&raw).map(Command::Completions),
        Subcommand::Relay => validate_relay(&raw).map(Command::Relay),
    }
}

/// A flag of another subcommand is an error that says whose it is.
fn check_scope(f: &RawFlag, sub: Subcommand) -> Result<(), FlagError> {
    let spec = find_flag(f.name).expect("raw flags come from the table");
    if spec.accepted_by(sub) {
        return Ok(());
    }
    let owners: Vec<&str> = [
        (Subcommand::Run, "a run"),
        (Subcommand::Serve, "serve"),
        (Subcommand::Report, "report"),
        (Subcommand::Compare, "compare"),
        (Subcommand::Completions, "completions"),
        (Subcommand::Relay, "relay"),
    ]
    .into_iter()
    .filter(|(owner, _)| spec.accepted_by(*owner))
    .map(|(_, name)| name)
    .collect();
    Err(FlagError::new(
        format!("--{}", f.name),
        format!(
            "not accepted by {} (it belongs to {})",
            sub.name(),
            owners.join(" and ")
        ),
    ))
}

/// A flag given twice is an error (never "last wins").
fn check_given_once(f: &RawFlag, earlier: &[RawFlag]) -> Result<(), FlagError> {
    match earlier.iter().find(|p| p.name == f.name) {
        None => Ok(()),
        Some(prev) => Err(FlagError::new(
            format!("--{}", f.name),
            format!(
                "given more than once ({:?} then {:?}); each flag takes one value",
                prev.value.as_deref().unwrap_or(""),
                f.value.as_deref().unwrap_or("")
            ),
        )),
    }
}

fn value_of<'a>(raw: &'a RawArgs, name: &str) -> Option<&'a str> {
    raw.flags
        .iter()
        .find(|f| f.name == name)
        .and_then(|f| f.value.as_deref())
}

fn has(raw: &RawArgs, name: &str) -> bool {
    raw.flags.iter().any(|f| f.name == name)
}

fn no_positionals(raw: &RawArgs) -> Result<(), FlagError> {
    match raw.positionals.first() {
        None => Ok(()),
        Some(p) => Err(FlagError::new(
            // An empty argument (`keel-bench ""`) would otherwise make the
            // error read ": unexpected argument", naming nothing.
            if p.is_empty() {
                "\"\" (an empty argument)".to_string()
            } else {
                p.clone()
            },
            format!(
                "unexpected argument for {} (subcommands serve and report come first; \
                 everything else is --flag VALUE)",
                raw.subcommand.name()
            ),
        )),
    }
}

fn validate_run(raw: &RawArgs) -> Result<RunConfig, FlagError> {
    no_positionals(raw)?;
    let mut cfg = RunConfig::default();
    for f in &raw.flags {
        set_run_flag(&mut cfg, f.name, f.value.as_deref().unwrap_or(""))?;
    }
    // Its range depends on --rate, wherever that came.
    if let Some(f) = raw.flags.iter().find(|f| f.name == "clients") {
        let max = if cfg.rate_hz.is_some() {
            MAX_CLIENTS_OPEN_LOOP
        } else {
            MAX_CLIENTS_CLOSED_LOOP
        };
        cfg.clients = parse_u32("clients", f.value.as_deref().unwrap_or(""), 1, max)?;
    }
    if let Some(addr) = cfg.connect {
        cfg.address_family = family_of_connect(raw, cfg.address_family, addr)?;
        no_server_flags_with_connect(raw)?;
    }
    check_payload_fits(&cfg)?;
    check_bytes_in_flight(&cfg)?;
    check_protocol_flags(raw, &cfg)?;
    check_transfer_flags(raw, &cfg)?;
    check_client_sockets(raw, &cfg)?;
    if cfg.transfer.is_some() && !has(raw, "drain") {
        cfg.drain = DEFAULT_BULK_DRAIN;
    }
    Ok(cfg)
}

/// `--client-sockets shared`: clients of this process on IPv4 loopback,
/// each sending from an address of its own, through no conditioner.
fn check_client_sockets(raw: &RawArgs, cfg: &RunConfig) -> Result<(), FlagError> {
    if cfg.client_sockets != ClientSocketsChoice::Shared {
        return Ok(());
    }
    let refuse = |why: &str| {
        Err(FlagError::new(
            "--client-sockets",
            format!("shared {why}; leave it out (per-client) for that run"),
        ))
    };
    if cfg.protocol == Protocol::Udp && cfg.rate_hz.is_none() {
        return refuse(
            "applies to --protocol rudp and kcp, and to --protocol udp with --rate (the \
             closed-loop UDP echo has clients of its own)",
        );
    }
    if cfg.address_family != AddressFamily::Ipv4 {
        return refuse(
            "needs --address-family ipv4: each client sends from an address of its own in \
             127.1.0.0/16",
        );
    }
    if cfg.connect.is_some() {
        return refuse(
            "is not for --connect: the clients' own addresses (127.1.x.y) reach only a server \
             on this host's loopback",
        );
    }
    if has(raw, "impair") && cfg.impair.is_some() {
        return refuse(
            "is not for --impair: the conditioner would send a datagram it held back from the \
             kernel's choice of address, not the client's",
        );
    }
    Ok(())
}

/// A keel-rudp flag `--name` given with `--protocol kcp`: refused, saying
/// it applies to `--protocol rudp` only and, in `kcp_instead`, what KCP has
/// (or lacks) instead.
fn rudp_only(
    raw: &RawArgs,
    cfg: &RunConfig,
    name: &str,
    kcp_instead: &str,
) -> Result<(), FlagError> {
    if cfg.protocol == Protocol::Kcp && has(raw, name) {
        return Err(FlagError::new(
            format!("--{name}"),
            format!("applies to --protocol rudp only ({kcp_instead})"),
        ));
    }
    Ok(())
}

/// `--channel` and `--rate` belong to `--protocol rudp`; a keel-rudp run
/// has `--connect` against `serve --protocol rudp|kcp`, and no UDP-only
/// knobs.
fn check_protocol_flags(raw: &RawArgs, cfg: &RunConfig) -> Result<(), FlagError> {
    if cfg.protocol == Protocol::Udp {
        for name in [
            "channel",
            "kcp-mode",
            "encrypt",
            "transfer",
            "kcp-window",
            "bulk-channel",
            "ack-delay",
            "redundancy",
        ] {
            if has(raw, name) {
                return Err(FlagError::new(
                    format!("--{name}"),
                    "applies to --protocol rudp and kcp only (the UDP echo has no channels)",
                ));
            }
        }
        if cfg.rate_hz.is_some() {
            for name in ["connect", "lane-steering", "loss-timeout"] {
                if has(raw, name) {
                    return Err(FlagError::new(
                        format!("--{name}"),
                        "applies to the closed-loop UDP echo only, not with --rate (the open \
                         loop runs its own server, kernel-hash steering, and gives a message \
                         up after 1 s)",
                    ));
                }
            }
        }
        return Ok(());
    }
    if has(raw, "dont-fragment") {
        return Err(FlagError::new(
            "--dont-fragment",
            "applies to --protocol udp only (keel-rudp's sockets set Don't Fragment by \
             default; KCP's keep keel-udp's default)",
        ));
    }
    rudp_only(raw, cfg, "encrypt", "KCP has no encryption")?;
    if cfg.protocol == Protocol::Rudp {
        if let Some(name) = ["kcp-mode", "kcp-window"]
            .into_iter()
            .find(|name| has(raw, name))
        {
            return Err(FlagError::new(
                format!("--{name}"),
                "applies to --protocol kcp only",
            ));
        }
    }
    rudp_only(
        raw,
        cfg,
        "ack-delay",
        "KCP sends its acknowledgements every --kcp-mode interval",
    )?;
    rudp_only(raw, cfg, "redundancy", "KCP has no redundancy")?;
    if cfg.redundancy.is_some_and(|r| r > 0) && (cfg.bulk_channel || !cfg.channel.reliable()) {
        return Err(FlagError::new(
            "--redundancy",
            format!(
                "applies to a reliable channel that is not --bulk-channel (0 accepted with \
                 --channel {}{})",
                cfg.channel.as_str(),
                if cfg.bulk_channel {
                    " --bulk-channel"
                } else {
                    ""
                }
            ),
        ));
    }
    rudp_only(
        raw,
        cfg,
        "bulk-channel",
        "KCP has no channels; --kcp-mode picks its congestion window",
    )?;
    if cfg.protocol == Protocol::Kcp && cfg.channel != ChannelChoice::ReliableOrdered {
        return Err(FlagError::new(
            "--channel",
            format!(
                "--protocol kcp accepts reliable-ordered only (KCP's one delivery mode), got {}",
                cfg.channel.as_str()
            ),
        ));
    }
    if has(raw, "encrypt") && cfg.connect.is_some() {
        return Err(FlagError::new(
            "--encrypt",
            "not with --connect: the connect tokens are minted with a key the server of this \
             process holds, and `serve --protocol rudp` runs in keel-rudp's insecure mode",
        ));
    }
    let udp_only = [
        "batch",
        "lane-steering",
        "udp-server-receive-buffer",
        "loss-timeout",
    ];
    match udp_only.into_iter().find(|name| has(raw, name)) {
        None => Ok(()),
        Some(name) => Err(FlagError::new(
            format!("--{name}"),
            format!(
                "applies to --protocol udp only, not {} (accepted with it: --channel, --rate, \
                 --payload, --clients, --window, --seconds, --warmup, --drain, --io-model, \
                 --io-threads, --work, --server-lanes, --impair, --impair-server, --transfer, \
                 --format, --output)",
                cfg.protocol.as_str()
            ),
        )),
    }
}

/// `--transfer` (the bulk case: one message at a time per client, on a
/// reliable channel) against the flags that shape the echo instead, and
/// `clients × transfer` against [`MAX_IN_FLIGHT_BYTES`]. Runs after
/// [`check_protocol_flags`], so the protocol is rudp or kcp here.
fn check_transfer_flags(raw: &RawArgs, cfg: &RunConfig) -> Result<(), FlagError> {
    let Some(transfer) = cfg.transfer else {
        return Ok(());
    };
    let conflicts = [
        ("window", "one transfer at a time per client"),
        (
            "rate",
            "the next transfer starts when the receipt of the last arrives",
        ),
        ("payload", "--transfer is the message size"),
    ];
    if let Some((name, why)) = conflicts.into_iter().find(|(name, _)| has(raw, name)) {
        return Err(FlagError::new(
            format!("--{name}"),
            format!(
                "does not apply with --transfer ({why}); accepted with --transfer: \
                 --protocol rudp|kcp, --clients, --seconds, --warmup, --channel \
                 reliable-ordered|reliable-unordered, --bulk-channel, --kcp-mode, \
                 --kcp-window, --io-model, --io-threads, --work, --server-lanes, --impair, \
                 --impair-server, --encrypt, --format, --output"
            ),
        ));
    }
    if !cfg.channel.reliable() {
        return Err(FlagError::new(
            "--channel",
            format!(
                "--transfer needs a reliable channel (reliable-ordered or reliable-unordered), \
                 got {}",
                cfg.channel.as_str()
            ),
        ));
    }
    let in_flight = u64::from(cfg.clients) * transfer;
    if in_flight > MAX_IN_FLIGHT_BYTES {
        return Err(FlagError::new(
            "--transfer",
            format!(
                "--clients x --transfer = {} x {transfer} = {in_flight} bytes in flight, more \
                 than the {MAX_IN_FLIGHT_BYTES} (256 MiB) allowed",
                cfg.clients
            ),
        ));
    }
    Ok(())
}

/// `--output FILE`: a path, not empty (the file is created when the run
/// starts, so a path that cannot be written fails before it).
fn parse_output(v: &str) -> Result<PathBuf, FlagError> {
    parse_path("output", v)
}

/// A file path flag: not empty.
fn parse_path(name: &str, v: &str) -> Result<PathBuf, FlagError> {
    if v.is_empty() {
        return Err(FlagError::new(
            format!("--{name}"),
            "expected a file path, got \"\"",
        ));
    }
    Ok(PathBuf::from(v))
}

/// Parses one run flag's value into `cfg` (ranges of the flag alone).
fn set_run_flag(cfg: &mut RunConfig, name: &str, v: &str) -> Result<(), FlagError> {
    match name {
        "protocol" => cfg.protocol = parse_protocol(v)?,
        "address-family" => cfg.address_family = parse_family(v)?,
        "payload" => cfg.payload = parse_payload(v)?,
        // Its range depends on --rate: parsed in validate_run.
        "clients" => {}
        "window" => cfg.window = parse_u32("window", v, 1, 1024)?,
        "seconds" => cfg.seconds = parse_seconds("seconds", v, false, 3600.0)?,
        "warmup" => cfg.warmup = parse_seconds("warmup", v, true, 3600.0)?,
        "drain" => cfg.drain = parse_seconds("drain", v, false, 3600.0)?,
        "io-model" => cfg.io_model = parse_io_model(v)?,
        "io-threads" => cfg.io_threads = parse_threads(v)?,
        "work" => cfg.work = parse_work(v)?,
        "udp-server-receive-buffer" => {
            cfg.udp_server_receive_buffer = Some(parse_server_rcvbuf(v)?)
        }
        "server-lanes" => cfg.server_lanes = parse_lanes(v)?,
        "lane-steering" => cfg.lane_steering = parse_lane_steering(v)?,
        "batch" => cfg.batch = parse_batch(v)?,
        "loss-timeout" => cfg.loss_timeout_ms = Some(parse_uint("loss-timeout", v, 1, 3_600_000)?),
        "connect" => cfg.connect = Some(parse_addr("connect", v, false)?),
        "impair" => cfg.impair = parse_impair("impair", v)?,
        "impair-server" => cfg.impair_server = parse_impair("impair-server", v)?,
        "format" => cfg.format = parse_format(v)?,
        "output" => cfg.output = Some(parse_output(v)?),
        "histogram" => cfg.histogram = Some(parse_path("histogram", v)?),
        "channel" => cfg.channel = parse_channel(v)?,
        "kcp-mode" => cfg.kcp_mode = parse_kcp_mode(v)?,
        "encrypt" => cfg.encrypt = true,
        "dont-fragment" => cfg.dont_fragment = true,
        "rate" => cfg.rate_hz = Some(parse_u32("rate", v, 1, 10_000)?),
        "transfer" => cfg.transfer = Some(parse_transfer(v)?),
        "kcp-window" => cfg.kcp_window = parse_kcp_window(v)?,
        "bulk-channel" => cfg.bulk_channel = true,
        "ack-delay" => cfg.ack_delay_ms = parse_u32("ack-delay", v, 0, MAX_ACK_DELAY_MS)?,
        "redundancy" => cfg.redundancy = Some(parse_u32("redundancy", v, 0, MAX_REDUNDANCY)? as u8),
        "client-sockets" => cfg.client_sockets = parse_client_sockets(v)?,
        other => unreachable!("flag --{other} is not in the run scope"),
    }
    Ok(())
}

/// With `--connect`, the family is the address's; an `--address-family`
/// that says otherwise is an error, not silently overridden.
fn family_of_connect(
    raw: &RawArgs,
    given: AddressFamily,
    addr: std::net::SocketAddr,
) -> Result<AddressFamily, FlagError> {
    let family = AddressFamily::of(&addr);
    if has(raw, "address-family") && family != given {
        return Err(FlagError::new(
            "--address-family",
            format!(
                "{} contradicts --connect {addr} ({}); leave it out or make them agree",
                given.as_str(),
                family.as_str()
            ),
        ));
    }
    Ok(family)
}

/// `--connect` runs no server, so the flags that configure one are errors
/// (they would silently do nothing).
fn no_server_flags_with_connect(raw: &RawArgs) -> Result<(), FlagError> {
    if has(raw, "impair-server") {
        return Err(FlagError::new(
            "--impair-server",
            "impairs the in-process server's sends, and --connect runs no server; \
             use --impair to impair the clients' sends instead",
        ));
    }
    let server_side = [
        "work",
        "server-lanes",
        "udp-server-receive-buffer",
        "lane-steering",
    ];
    match server_side.into_iter().find(|name| has(raw, name)) {
        None => Ok(()),
        Some(name) => Err(FlagError::new(
            format!("--{name}"),
            "configures the server, which --connect does not run; \
             pass it to `keel-bench serve` instead",
        )),
    }
}

/// `--payload` against the limit keel-udp applies to the server address:
/// the family's ([`AddressFamily::max_payload`]), or with `--connect`
/// [`keel_udp::max_payload`] of that address (an IPv4-mapped IPv6 peer is
/// IPv4 on the wire).
fn check_payload_fits(cfg: &RunConfig) -> Result<(), FlagError> {
    let max = match cfg.connect {
        Some(addr) => keel_udp::max_payload(&addr) as u64,
        None => cfg.address_family.max_payload(),
    };
    if cfg.payload <= max {
        return Ok(());
    }
    let what = match cfg.connect {
        Some(addr) if max < cfg.address_family.max_payload() => {
            format!("{addr} (an IPv4-mapped address: IPv4 on the wire)")
        }
        _ => cfg.address_family.as_str().to_string(),
    };
    Err(FlagError::new(
        "--payload",
        format!(
            "expected an integer in {MIN_PAYLOAD}..={max} for {what}, got \"{}\"",
            cfg.payload
        ),
    ))
}

/// `clients × window × payload` at most [`MAX_IN_FLIGHT_BYTES`].
fn check_bytes_in_flight(cfg: &RunConfig) -> Result<(), FlagError> {
    let in_flight = u64::from(cfg.clients) * u64::from(cfg.window) * cfg.payload;
    if in_flight <= MAX_IN_FLIGHT_BYTES {
        return Ok(());
    }
    Err(FlagError::new(
        "--clients x --window x --payload",
        format!(
            "{} x {} x {} = {in_flight} bytes in flight, more than the \
             {MAX_IN_FLIGHT_BYTES} (256 MiB) allowed",
            cfg.clients, cfg.window, cfg.payload
        ),
    ))
}

fn validate_serve(raw: &RawArgs) -> Result<ServeConfig, FlagError> {
    no_positionals(raw)?;
    let Some(bind) = value_of(raw, "bind") else {
        return Err(FlagError::new(
            "--bind",
            "required by serve: an IP:PORT literal such as 0.0.0.0:7000 or [::]:7000",
        ));
    };
    let mut cfg = ServeConfig {
        bind: parse_addr("bind", bind, true)?,
        io_model: IoModel::Shared,
        io_threads: DEFAULT_IO_THREADS,
        server_lanes: DEFAULT_SERVER_LANES,
        seconds: None,
        sockperf: false,
        work: DEFAULT_WORK,
        batch: DEFAULT_BATCH,
        udp_server_receive_buffer: None,
        lane_steering: LaneSteeringChoice::Auto,
        idle_timeout: Some(DEFAULT_SERVE_IDLE_TIMEOUT),
        max_sessions: DEFAULT_MAX_SESSIONS,
        full_policy: FullPolicyChoice::EvictIdlest,
        format: OutputFormat::Auto,
        output: None,
        protocol: Protocol::Udp,
        channel: ChannelChoice::ReliableOrdered,
        kcp_mode: KcpMode::default(),
        kcp_window: DEFAULT_KCP_WINDOW,
        payload: DEFAULT_PAYLOAD,
    };
    for f in &raw.flags {
        set_serve_flag(&mut cfg, f.name, f.value.as_deref().unwrap_or(""))?;
    }
    check_serve_protocol(raw, &cfg)?;
    Ok(cfg)
}

/// `serve --protocol`: the flags of the UDP echo server against those of
/// the keel-rudp and KCP servers.
fn check_serve_protocol(raw: &RawArgs, cfg: &ServeConfig) -> Result<(), FlagError> {
    let (theirs, why): (&[&str], &str) = match cfg.protocol {
        Protocol::Udp => (
            &["channel", "kcp-mode", "kcp-window", "payload"],
            "applies to serve --protocol rudp or kcp only (the UDP echo has no connections)",
        ),
        Protocol::Rudp => (
            &[
                "kcp-mode",
                "kcp-window",
                "sockperf",
                "batch",
                "udp-server-receive-buffer",
                "lane-steering",
                "idle-timeout",
                "max-sessions",
                "full-policy",
                "format",
                "output",
            ],
            "applies to serve --protocol udp (kcp-mode, kcp-window: kcp) only; serve --protocol              rudp takes --bind, --seconds, --io-model, --io-threads, --server-lanes, --work,              --channel, --payload",
        ),
        Protocol::Kcp => (
            &[
                "channel",
                "sockperf",
                "batch",
                "udp-server-receive-buffer",
                "lane-steering",
                "idle-timeout",
                "max-sessions",
                "full-policy",
                "format",
                "output",
                "server-lanes",
            ],
            "applies to serve --protocol udp (channel: rudp) only; serve --protocol kcp takes              --bind, --seconds, --io-model, --io-threads, --work, --kcp-mode, --kcp-window,              --payload",
        ),
    };
    match theirs.iter().find(|name| has(raw, name)) {
        None => Ok(()),
        Some(name) => Err(FlagError::new(format!("--{name}"), why)),
    }
}

fn validate_relay(raw: &RawArgs) -> Result<RelayConfig, FlagError> {
    no_positionals(raw)?;
    let required = |name: &str, example: &str| {
        value_of(raw, name).ok_or_else(|| {
            FlagError::new(
                format!("--{name}"),
                format!("required by relay: an IP:PORT literal such as {example}"),
            )
        })
    };
    let bind = parse_addr("bind", required("bind", "127.0.0.1:7001")?, true)?;
    let upstream = parse_addr("upstream", required("upstream", "127.0.0.1:7000")?, false)?;
    let impair_of = |name: &str| -> Result<keel_udp::Impairment, FlagError> {
        Ok(match value_of(raw, name) {
            Some(v) => parse_impair(name, v)?.map(|b| *b).unwrap_or_default(),
            None => keel_udp::Impairment::default(),
        })
    };
    let mut impair = impair_of("impair")?;
    let mut impair_server = impair_of("impair-server")?;
    if let Some(v) = value_of(raw, "seed") {
        let seed = parse_uint("seed", v, 0, u64::MAX)?;
        if let Some(name) = ["impair", "impair-server"].into_iter().find(|n| {
            value_of(raw, n).is_some_and(|v| v.split(',').any(|kv| kv.starts_with("seed=")))
        }) {
            return Err(FlagError::new(
                "--seed",
                format!("--{name} has a seed= of its own; give the seed once (--seed sets both directions')"),
            ));
        }
        impair.seed = seed;
        impair_server.seed = seed;
    }
    let seconds = value_of(raw, "seconds")
        .map(|v| parse_seconds("seconds", v, false, 86_400.0))
        .transpose()?;
    let max_flows = value_of(raw, "max-flows")
        .map(|v| parse_u32("max-flows", v, 1, MAX_MAX_FLOWS))
        .transpose()?
        .unwrap_or(DEFAULT_MAX_FLOWS);
    if bind.is_ipv4() != upstream.is_ipv4() {
        return Err(FlagError::new(
            "--upstream",
            format!("{upstream} is not of --bind {bind}'s address family"),
        ));
    }
    Ok(RelayConfig {
        bind,
        upstream,
        impair,
        impair_server,
        seconds,
        max_flows,
    })
}

/// Parses one serve flag's value into `cfg`.
fn set_serve_flag(cfg: &mut ServeConfig, name: &str, v: &str) -> Result<(), FlagError> {
    match name {
        "bind" => {}
        "io-model" => cfg.io_model = parse_io_model(v)?,
        "io-threads" => cfg.io_threads = parse_threads(v)?,
        "server-lanes" => cfg.server_lanes = parse_lanes(v)?,
        "lane-steering" => cfg.lane_steering = parse_lane_steering(v)?,
        "seconds" => cfg.seconds = Some(parse_seconds("seconds", v, false, 86_400.0)?),
        "sockperf" => cfg.sockperf = true,
        "work" => cfg.work = parse_work(v)?,
        "batch" => cfg.batch = parse_batch(v)?,
        "udp-server-receive-buffer" => {
            cfg.udp_server_receive_buffer = Some(parse_server_rcvbuf(v)?)
        }
        "idle-timeout" => cfg.idle_timeout = parse_idle_timeout(v)?,
        "max-sessions" => cfg.max_sessions = parse_u32("max-sessions", v, 1, MAX_MAX_SESSIONS)?,
        "full-policy" => cfg.full_policy = parse_full_policy(v)?,
        "format" => cfg.format = parse_format(v)?,
        "output" => cfg.output = Some(parse_output(v)?),
        "protocol" => cfg.protocol = parse_protocol(v)?,
        "channel" => cfg.channel = parse_channel(v)?,
        "kcp-mode" => cfg.kcp_mode = parse_kcp_mode(v)?,
        "kcp-window" => cfg.kcp_window = parse_kcp_window(v)?,
        "payload" => cfg.payload = parse_payload(v)?,
        other => unreachable!("flag --{other} is not in the serve scope"),
    }
    Ok(())
}

fn validate_report(raw: &RawArgs) -> Result<ReportConfig, FlagError> {
    if raw.positionals.is_empty() {
        return Err(FlagError::new(
            "FILES",
            "report needs at least one result file (JSON lines written by runs)",
        ));
    }
    let Some(out) = value_of(raw, "out") else {
        return Err(FlagError::new(
            "--out",
            "required by report: the directory for the table and charts",
        ));
    };
    if out.is_empty() {
        return Err(FlagError::new(
            "--out",
            "expected a directory path, got \"\"",
        ));
    }
    Ok(ReportConfig {
        inputs: raw.positionals.iter().map(PathBuf::from).collect(),
        out: PathBuf::from(out),
    })
}

fn validate_compare(raw: &RawArgs) -> Result<CompareConfig, FlagError> {
    match raw.positionals.as_slice() {
        [a, b] if !a.is_empty() && !b.is_empty() => Ok(CompareConfig {
            baseline: PathBuf::from(a),
            candidate: PathBuf::from(b),
        }),
        other => Err(FlagError::new(
            "FILES",
            format!(
                "compare needs exactly two result files, the baseline then the candidate \
                 (got {})",
                other.len()
            ),
        )),
    }
}

fn validate_completions(raw: &RawArgs) -> Result<Shell, FlagError> {
    match raw.positionals.as_slice() {
        [s] if s == "bash" => Ok(Shell::Bash),
        [s] if s == "zsh" => Ok(Shell::Zsh),
        [s] if s == "fish" => Ok(Shell::Fish),
        [s] => Err(FlagError::new(
            "SHELL",
            format!("expected bash, zsh or fish, got {s:?}"),
        )),
        other => Err(FlagError::new(
            "SHELL",
            format!(
                "completions needs one shell: bash, zsh or fish (got {} arguments)",
                other.len()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::raw::parse_raw;
    use super::super::table::FLAGS;
    use super::*;

    fn parse(args: Vec<&str>) -> Result<Command, FlagError> {
        validate(parse_raw(args)?)
    }

    #[test]
    fn every_scoped_flag_is_handled() {
        // Each flag in a scope parses with a valid value in that scope
        // (no unreachable!), which keeps FLAGS and the validators in step.
        let sample = |name: &str| match name {
            "protocol" => "udp",
            "address-family" => "ipv4",
            "io-model" => "shared",
            "lane-steering" => "auto",
            "full-policy" => "evict-idlest",
            "connect" | "upstream" => "127.0.0.1:7000",
            "bind" => "127.0.0.1:7000",
            "out" => "dir",
            "payload" => "64",
            "format" => "both",
            "output" => "out.json",
            "histogram" => "rtt.hgrm",
            "channel" => "unreliable",
            "kcp-mode" => "default",
            "transfer" => "65536",
            "impair" | "impair-server" => "loss=0.1,delay=1ms",
            "client-sockets" => "shared",
            _ => "1",
        };
        for f in FLAGS.iter().filter(|f| f.name != "help") {
            let arg = if f.is_switch() {
                format!("--{}", f.name)
            } else {
                format!("--{}={}", f.name, sample(f.name))
            };
            if f.for_run()
                && [
                    "channel",
                    "rate",
                    "encrypt",
                    "transfer",
                    "bulk-channel",
                    "ack-delay",
                    "redundancy",
                    "client-sockets",
                ]
                .contains(&f.name)
            {
                parse(vec!["--protocol", "rudp", arg.as_str()]).unwrap();
            } else if ["kcp-mode", "kcp-window"].contains(&f.name) {
                parse(vec!["--protocol", "kcp", arg.as_str()]).unwrap();
            } else if f.for_run() && f.name != "connect" {
                parse(vec![arg.as_str()]).unwrap();
            }
            if f.for_serve() {
                let mut args = vec!["serve", arg.as_str()];
                if f.name != "bind" {
                    args.extend(["--bind", "127.0.0.1:0"]);
                }
                if ["channel", "payload"].contains(&f.name) {
                    args.extend(["--protocol", "rudp"]);
                } else if ["kcp-mode", "kcp-window"].contains(&f.name) {
                    args.extend(["--protocol", "kcp"]);
                }
                parse(args).unwrap();
            }
            if f.accepted_by(Subcommand::Relay) {
                let mut args = vec!["relay", arg.as_str()];
                if f.name != "bind" {
                    args.extend(["--bind", "127.0.0.1:0"]);
                }
                if f.name != "upstream" {
                    args.extend(["--upstream", "127.0.0.1:7000"]);
                }
                parse(args).unwrap();
            }
        }
    }

    fn run_cfg(args: &[&str]) -> RunConfig {
        match parse(args.to_vec()) {
            Ok(Command::Run(c)) => c,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn rejected(args: &[&str], flag: &str) -> String {
        let e = parse(args.to_vec()).expect_err(&format!("{args:?} must be rejected"));
        assert_eq!(e.flag, flag, "{args:?}: {e}");
        e.message
    }

    #[test]
    fn transfer_is_a_plain_byte_count_for_rudp_and_kcp() {
        for proto in ["rudp", "kcp"] {
            let c = run_cfg(&["--protocol", proto, "--transfer", "1048576"]);
            assert_eq!(c.transfer, Some(1 << 20));
            let c = run_cfg(&["--protocol", proto, "--transfer=16"]);
            assert_eq!(c.transfer, Some(16));
            let c = run_cfg(&["--protocol", proto, "--transfer", "67108864"]);
            assert_eq!(c.transfer, Some(64 << 20));
        }
        assert_eq!(run_cfg(&["--protocol", "rudp"]).transfer, None);
        for bad in [
            "15",
            "0",
            "67108865",
            "1MiB",
            "1M",
            "1k",
            "1_048_576",
            "-1",
            "1e6",
            "",
        ] {
            let m = rejected(&["--protocol", "rudp", "--transfer", bad], "--transfer");
            assert!(m.contains("16..=67108864"), "{m}");
            assert!(m.contains(&format!("{bad:?}")), "{m}");
        }
    }

    #[test]
    fn transfer_needs_rudp_or_kcp_and_a_reliable_channel() {
        let m = rejected(&["--transfer", "65536"], "--transfer");
        assert!(m.contains("rudp and kcp only"), "{m}");
        let m = rejected(&["--protocol", "udp", "--transfer", "65536"], "--transfer");
        assert!(m.contains("rudp and kcp only"), "{m}");
        for ch in ["unreliable", "unreliable-sequenced"] {
            let m = rejected(
                &["--protocol", "rudp", "--transfer", "65536", "--channel", ch],
                "--channel",
            );
            assert!(m.contains("reliable-ordered or reliable-unordered"), "{m}");
        }
        let c = run_cfg(&[
            "--protocol",
            "rudp",
            "--transfer",
            "65536",
            "--channel",
            "reliable-unordered",
        ]);
        assert_eq!(c.channel, ChannelChoice::ReliableUnordered);
    }

    #[test]
    fn transfer_excludes_the_echo_shapes() {
        for (flag, value) in [("--window", "4"), ("--rate", "60"), ("--payload", "1200")] {
            let m = rejected(
                &["--protocol", "kcp", "--transfer", "65536", flag, value],
                flag,
            );
            assert!(m.contains("does not apply with --transfer"), "{m}");
        }
        // 256 MiB in flight at most: 256 clients of 1 MiB fit, 257 do not.
        let c = run_cfg(&[
            "--protocol",
            "rudp",
            "--transfer",
            "1048576",
            "--clients",
            "256",
        ]);
        assert_eq!(c.clients, 256);
        let m = rejected(
            &[
                "--protocol",
                "rudp",
                "--transfer",
                "1048576",
                "--clients",
                "257",
            ],
            "--transfer",
        );
        assert!(m.contains("256 MiB"), "{m}");
    }

    #[test]
    fn redundancy_is_rudp_reliable_and_bounded() {
        assert_eq!(run_cfg(&["--protocol", "rudp"]).redundancy, None);
        assert_eq!(
            run_cfg(&["--protocol", "rudp", "--redundancy", "5"]).redundancy,
            Some(5)
        );
        rejected(&["--protocol", "rudp", "--redundancy", "6"], "--redundancy");
        rejected(&["--protocol", "kcp", "--redundancy", "1"], "--redundancy");
        rejected(&["--redundancy", "1"], "--redundancy");
        rejected(
            &[
                "--protocol",
                "rudp",
                "--channel",
                "unreliable",
                "--redundancy",
                "1",
            ],
            "--redundancy",
        );
        rejected(
            &[
                "--protocol",
                "rudp",
                "--bulk-channel",
                "--transfer",
                "65536",
                "--redundancy",
                "1",
            ],
            "--redundancy",
        );
    }

    #[test]
    fn ack_delay_is_the_rudp_clients_and_bounded() {
        assert_eq!(run_cfg(&["--protocol", "rudp"]).ack_delay_ms, 5);
        assert_eq!(
            run_cfg(&["--protocol", "rudp", "--ack-delay", "51"]).ack_delay_ms,
            51
        );
        assert_eq!(
            run_cfg(&["--protocol", "rudp", "--ack-delay", "0"]).ack_delay_ms,
            0
        );
        let m = rejected(
            &["--protocol", "rudp", "--ack-delay", "1001"],
            "--ack-delay",
        );
        assert!(m.contains("1000"), "{m}");
        let m = rejected(&["--protocol", "kcp", "--ack-delay", "5"], "--ack-delay");
        assert!(m.contains("rudp only"), "{m}");
        rejected(&["--ack-delay", "5"], "--ack-delay");
    }

    /// The keel-rudp flags refused with --protocol kcp, each message word
    /// for word (one helper writes them all).
    #[test]
    fn dont_fragment_is_for_the_udp_echo_only() {
        assert!(run_cfg(&["--dont-fragment"]).dont_fragment);
        assert!(!run_cfg(&[]).dont_fragment);
        assert!(run_cfg(&["--dont-fragment", "--rate", "20"]).dont_fragment);
        for proto in ["rudp", "kcp"] {
            let e = parse(vec!["--protocol", proto, "--dont-fragment"]).unwrap_err();
            assert_eq!(e.flag, "--dont-fragment", "{proto}");
            assert!(e.message.contains("applies to --protocol udp only"), "{e}");
        }
    }

    #[test]
    fn rudp_only_flags_say_what_kcp_has_instead() {
        for (args, flag, want) in [
            (
                &["--encrypt"][..],
                "--encrypt",
                "applies to --protocol rudp only (KCP has no encryption)",
            ),
            (
                &["--ack-delay", "5"][..],
                "--ack-delay",
                "applies to --protocol rudp only (KCP sends its acknowledgements every \
                 --kcp-mode interval)",
            ),
            (
                &["--redundancy", "0"][..],
                "--redundancy",
                "applies to --protocol rudp only (KCP has no redundancy)",
            ),
            (
                &["--redundancy", "2", "--bulk-channel"][..],
                "--redundancy",
                "applies to --protocol rudp only (KCP has no redundancy)",
            ),
            (
                &["--bulk-channel"][..],
                "--bulk-channel",
                "applies to --protocol rudp only (KCP has no channels; --kcp-mode picks its \
                 congestion window)",
            ),
        ] {
            let mut all = vec!["--protocol", "kcp"];
            all.extend_from_slice(args);
            assert_eq!(rejected(&all, flag), want, "{all:?}");
        }
    }

    #[test]
    fn kcp_window_and_bulk_channel_belong_to_their_protocols() {
        assert_eq!(run_cfg(&["--protocol", "kcp"]).kcp_window, 128);
        let c = run_cfg(&["--protocol", "kcp", "--kcp-window", "1024"]);
        assert_eq!(c.kcp_window, 1024);
        for bad in ["0", "32769", "abc", "-1"] {
            let m = rejected(&["--protocol", "kcp", "--kcp-window", bad], "--kcp-window");
            assert!(m.contains("1..=32768"), "{m}");
        }
        let m = rejected(
            &["--protocol", "rudp", "--kcp-window", "256"],
            "--kcp-window",
        );
        assert!(m.contains("kcp only"), "{m}");
        rejected(&["--kcp-window", "256"], "--kcp-window");
        assert!(run_cfg(&["--protocol", "rudp", "--bulk-channel"]).bulk_channel);
        assert!(!run_cfg(&["--protocol", "rudp"]).bulk_channel);
        let m = rejected(&["--protocol", "kcp", "--bulk-channel"], "--bulk-channel");
        assert!(m.contains("rudp only"), "{m}");
        rejected(&["--bulk-channel"], "--bulk-channel");
    }

    #[test]
    fn client_sockets_shared_is_for_this_hosts_ipv4_loopback_without_a_conditioner() {
        use ClientSocketsChoice::{PerClient, Shared};
        assert_eq!(run_cfg(&["--protocol", "rudp"]).client_sockets, PerClient);
        for p in ["rudp", "kcp"] {
            let c = run_cfg(&["--protocol", p, "--client-sockets", "shared"]);
            assert_eq!(c.client_sockets, Shared);
        }
        let c = run_cfg(&["--rate", "20", "--client-sockets", "shared"]);
        assert_eq!(c.client_sockets, Shared);
        let m = rejected(&["--client-sockets", "both"], "--client-sockets");
        assert!(m.contains("per-client or shared"), "{m}");
        for (args, says) in [
            (&["--client-sockets", "shared"][..], "with --rate"),
            (
                &[
                    "--protocol",
                    "rudp",
                    "--client-sockets",
                    "shared",
                    "--address-family",
                    "ipv6",
                ],
                "ipv4",
            ),
            (
                &[
                    "--protocol",
                    "kcp",
                    "--client-sockets",
                    "shared",
                    "--connect",
                    "127.0.0.1:9",
                ],
                "--connect",
            ),
            (
                &[
                    "--protocol",
                    "rudp",
                    "--client-sockets",
                    "shared",
                    "--impair",
                    "loss=0.1",
                ],
                "--impair",
            ),
        ] {
            let m = rejected(args, "--client-sockets");
            assert!(m.contains(says), "{args:?}: {m}");
        }
        // A conditioner that does nothing is no conditioner.
        let c = run_cfg(&[
            "--protocol",
            "rudp",
            "--client-sockets",
            "shared",
            "--impair",
            "loss=0",
        ]);
        assert_eq!(c.client_sockets, Shared);
    }
}
