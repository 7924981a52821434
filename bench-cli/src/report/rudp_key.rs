//! A keel-rudp benchmark line's configuration ([`RudpKey`], with each
//! direction's [`Link`] without its seed), its [`Case`], its measurements
//! ([`RudpRun`]), and the settings tables and charts name ([`RudpDim`]).

use std::fmt;

use keel_udp::Impairment;

use crate::report::fields::{count, opt, Fields};

/// Settings outside [`RudpKey`] that should still agree within a group:
/// the UDP matrix's, and the UDP matrix's key fields that the rudp key
/// does not hold.
pub(super) const OTHER_SETTINGS: &[&str] = &[
    "backend",
    "role",
    "connect",
    "requested_seconds",
    "warmup_seconds",
    "udp_server_receive_buffer_requested_bytes",
    "loss_timeout_ms",
    "address_family",
    "handler_work",
    "batch",
    "server_io_lanes",
];

/// The fewest clients (connections) that make a run part of the scale
/// case, for a line without a `case` field.
pub(super) const SCALE_MIN_CLIENTS: u64 = 100;

/// One direction's link conditioner setting without its seed: what makes
/// runs under it comparable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Link {
    /// Loss probability in parts per million; `None` when the setting did
    /// not parse.
    pub loss_ppm: Option<u64>,
    /// One-way delay, µs.
    pub delay_us: Option<u64>,
    /// Jitter, µs.
    pub jitter_us: Option<u64>,
    /// Settings other than loss, delay, jitter and seed that are not at
    /// their defaults (`dup=0.01`), or the whole text without its seed when
    /// it did not parse.
    pub other: String,
}

impl Link {
    /// No conditioner: nothing lost or delayed.
    pub(super) fn off() -> Link {
        Link {
            loss_ppm: Some(0),
            delay_us: Some(0),
            jitter_us: Some(0),
            other: String::new(),
        }
    }

    /// Reads an `impair` / `impair_server` value (`None` or `off`: no
    /// conditioner) into the link and its seed.
    pub(super) fn parse(text: Option<&str>) -> (Link, Option<u64>) {
        let Some(text) = text.map(str::trim).filter(|t| !t.is_empty() && *t != "off") else {
            return (Link::off(), None);
        };
        match text.parse::<Impairment>() {
            Ok(imp) => (
                Link {
                    loss_ppm: Some((imp.loss * 1e6).round() as u64),
                    delay_us: Some(imp.delay.as_micros() as u64),
                    jitter_us: Some(imp.jitter.as_micros() as u64),
                    other: extras(&imp),
                },
                Some(imp.seed),
            ),
            Err(_) => {
                let mut seed = None;
                let other: Vec<&str> = text
                    .split(',')
                    .filter(|item| match item.trim().strip_prefix("seed=") {
                        Some(s) => {
                            seed = s.parse().ok();
                            false
                        }
                        None => true,
                    })
                    .collect();
                (
                    Link {
                        loss_ppm: None,
                        delay_us: None,
                        jitter_us: None,
                        other: other.join(","),
                    },
                    seed,
                )
            }
        }
    }

    /// The loss probability in %, if known.
    pub(super) fn loss_percent(&self) -> Option<f64> {
        self.loss_ppm.map(|p| p as f64 / 1e4)
    }

    /// `10 %`, `0.5 %`, `?`.
    pub(super) fn loss_label(&self) -> String {
        self.loss_percent()
            .map_or_else(|| "?".to_string(), |p| format!("{} %", trim_number(p)))
    }

    /// Delay, jitter and the rest in words: `delay 25 ms, jitter 3 ms`,
    /// `no delay`.
    pub(super) fn shape_label(&self) -> String {
        let mut parts = Vec::new();
        match (self.delay_us, self.jitter_us) {
            (Some(0), Some(0)) => parts.push("no delay".to_string()),
            (d, j) => {
                parts.push(format!("delay {}", fmt_duration_us(d)));
                if j != Some(0) {
                    parts.push(format!("jitter {}", fmt_duration_us(j)));
                }
            }
        }
        if !self.other.is_empty() {
            parts.push(self.other.clone());
        }
        parts.join(", ")
    }

    /// The link without its loss.
    fn without_loss(&self) -> Link {
        Link {
            loss_ppm: None,
            ..self.clone()
        }
    }
}

/// The settings of `imp` other than loss, delay, jitter and seed that are
/// not at their defaults, as `key=value` pairs.
fn extras(imp: &Impairment) -> String {
    let d = Impairment::default();
    let mut out = Vec::new();
    if imp.duplicate != d.duplicate {
        out.push(format!("dup={}", imp.duplicate));
    }
    if imp.reorder != d.reorder {
        out.push(format!("reorder={}", imp.reorder));
    }
    if imp.reorder_delay != d.reorder_delay {
        out.push(format!(
            "reorder-delay={}",
            fmt_duration_us(Some(imp.reorder_delay.as_micros() as u64))
        ));
    }
    if imp.limit != d.limit {
        out.push(format!("limit={}", imp.limit));
    }
    if imp.limit_bytes != d.limit_bytes {
        out.push(format!("limit-bytes={}", imp.limit_bytes));
    }
    out.join(",")
}

/// `25 ms`, `1.5 ms`, `250 µs`, `?`.
fn fmt_duration_us(us: Option<u64>) -> String {
    match us {
        None => "?".to_string(),
        Some(us) if us >= 1000 => format!("{} ms", trim_number(us as f64 / 1000.0)),
        Some(us) => format!("{us} µs"),
    }
}

/// A number without trailing zeros, at most 3 decimals: `10`, `0.5`.
pub(super) fn trim_number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The settings that make two runs of the keel-rudp benchmark the same
/// configuration; `None` = the run did not say.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct RudpKey {
    /// `protocol`: `rudp`, `kcp` or `udp`.
    pub protocol: Option<String>,
    /// `channel` (keel-rudp's delivery mode).
    pub channel: Option<String>,
    /// `kcp_mode`.
    pub kcp_mode: Option<String>,
    /// `encrypted`.
    pub encrypted: Option<bool>,
    /// `bulk_channel` (keel-rudp's channel under congestion control).
    pub bulk_channel: Option<bool>,
    /// `ack_delay_ms` (the keel-rudp clients' `max_ack_delay`, ms); a rudp
    /// line without it (from before `--ack-delay`) ran at the default, so
    /// it reads as [`DEFAULT_ACK_DELAY_MS`](crate::flags::DEFAULT_ACK_DELAY_MS)
    /// and pools with the new lines at the default. `None` for KCP and
    /// keel-udp.
    pub ack_delay_ms: Option<u64>,
    /// `kcp_window` (KCP's windows, packets).
    pub kcp_window: Option<u64>,
    /// `dont_fragment` on a keel-udp line (`--dont-fragment`): true sets
    /// it apart; false or absent (lines from before the field) pool
    /// together; always false for keel-rudp and KCP, whose sockets the
    /// flag does not change.
    pub dont_fragment: bool,
    /// `rate_hz` (open loop); `None` in closed loop.
    pub rate_hz: Option<u64>,
    /// `transfer_bytes` (the bulk case).
    pub transfer_bytes: Option<u64>,
    /// `payload_bytes`.
    pub payload_bytes: Option<u64>,
    /// `clients` (connections).
    pub clients: Option<u64>,
    /// `window`.
    pub window: Option<u64>,
    /// `io_model`.
    pub io_model: Option<String>,
    /// `io_threads`.
    pub io_threads: Option<u64>,
    /// `impair` (the clients' sends) without its seed.
    pub link: Link,
    /// `impair_server` (the server's sends) without its seed.
    pub server_link: Link,
    /// `case`, which a script adds to the lines it writes
    /// (`scripts/rudp-scale.sh`: `scale`; `scripts/rudp-matrix.sh`:
    /// `latency`, `bulk`): the case whatever the client count. `None`
    /// (absent, or another value) leaves it to [`RudpKey::case`]'s rule.
    pub case: Option<Case>,
}

/// Sort rank of a protocol: keel-rudp, KCP, keel-udp, anything else.
fn protocol_rank(p: Option<&str>) -> u8 {
    match p {
        Some("rudp") => 0,
        Some("kcp") => 1,
        Some("udp") => 2,
        Some(_) => 3,
        None => 4,
    }
}

impl RudpKey {
    #[allow(clippy::type_complexity)]
    fn sort_tuple(
        &self,
    ) -> (
        (Option<u64>, Option<u64>),
        (u8, &Option<String>, &Option<String>, &Option<String>),
        (Option<bool>, Option<bool>, Option<u64>, Option<u64>, bool),
        (Option<u64>, Option<u64>, Option<u64>, Option<u64>),
        Option<u64>,
        (&Option<String>, Option<u64>),
        (&Link, &Link),
    ) {
        (
            (self.link.loss_ppm, self.server_link.loss_ppm),
            (
                protocol_rank(self.protocol.as_deref()),
                &self.protocol,
                &self.channel,
                &self.kcp_mode,
            ),
            (
                self.encrypted,
                self.bulk_channel,
                self.ack_delay_ms,
                self.kcp_window,
                self.dont_fragment,
            ),
            (
                self.transfer_bytes,
                self.payload_bytes,
                self.clients,
                self.rate_hz,
            ),
            self.window,
            (&self.io_model, self.io_threads),
            (&self.link, &self.server_link),
        )
    }

    /// Which case the configuration belongs to: its `case` field, else
    /// bulk with a `transfer_bytes`, scale for plain keel-udp or
    /// [`SCALE_MIN_CLIENTS`] clients or more, latency otherwise.
    pub(super) fn case(&self) -> Case {
        if let Some(case) = self.case {
            case
        } else if self.transfer_bytes.is_some() {
            Case::Bulk
        } else if self.protocol.as_deref() == Some("udp")
            || self.clients.is_some_and(|c| c >= SCALE_MIN_CLIENTS)
        {
            Case::Scale
        } else {
            Case::Latency
        }
    }

    /// The protocol in words: `keel-rudp reliable-ordered`, `keel-rudp
    /// reliable-ordered, encrypted`, `keel-rudp reliable-ordered, bulk
    /// channel`, `keel-rudp reliable-ordered, ack delay 51 ms` (an ack
    /// delay other than the default 5 ms), `KCP fast`, `KCP fast, window
    /// 1024` (a window other than the default 128), `keel-udp`, `keel-udp,
    /// Don't Fragment`.
    pub(super) fn protocol_label(&self) -> String {
        match self.protocol.as_deref() {
            Some("rudp") => {
                let mut s = format!("keel-rudp {}", opt(&self.channel));
                if self.encrypted == Some(true) {
                    s.push_str(", encrypted");
                }
                if self.bulk_channel == Some(true) {
                    s.push_str(", bulk channel");
                }
                match self.ack_delay_ms {
                    Some(ms) if ms != u64::from(crate::flags::DEFAULT_ACK_DELAY_MS) => {
                        s.push_str(&format!(", ack delay {ms} ms"));
                    }
                    _ => {}
                }
                s
            }
            Some("kcp") => match self.kcp_window {
                Some(w) if w != u64::from(crate::flags::DEFAULT_KCP_WINDOW) => {
                    format!("KCP {}, window {w}", opt(&self.kcp_mode))
                }
                _ => format!("KCP {}", opt(&self.kcp_mode)),
            },
            Some("udp") if self.dont_fragment => "keel-udp, Don't Fragment".to_string(),
            Some("udp") => "keel-udp".to_string(),
            Some(other) => other.to_string(),
            None => "?".to_string(),
        }
    }

    /// Loss on each direction: `10 %` when both ends lose the same, else
    /// `10 % / 5 %` (clients / server).
    pub(super) fn loss_label(&self) -> String {
        if self.link.loss_ppm == self.server_link.loss_ppm {
            self.link.loss_label()
        } else {
            format!(
                "{} / {}",
                self.link.loss_label(),
                self.server_link.loss_label()
            )
        }
    }

    /// Delay and jitter: `delay 25 ms, jitter 3 ms each way` or both ends'.
    pub(super) fn link_label(&self) -> String {
        let (c, s) = (self.link.without_loss(), self.server_link.without_loss());
        if c == s {
            format!("{} each way", c.shape_label())
        } else {
            format!("clients: {}; server: {}", c.shape_label(), s.shape_label())
        }
    }

    /// The configuration of a line across loss levels: the loss of the
    /// clients' link is the x axis, so it is left out; the server's is kept
    /// only where it differs from the clients'.
    pub(super) fn without_loss(&self) -> RudpKey {
        let server_loss = if self.server_link.loss_ppm == self.link.loss_ppm {
            None
        } else {
            self.server_link.loss_ppm
        };
        RudpKey {
            link: self.link.without_loss(),
            server_link: Link {
                loss_ppm: server_loss,
                ..self.server_link.clone()
            },
            ..self.clone()
        }
    }

    /// The configuration of a line across connection counts.
    pub(super) fn without_clients(&self) -> RudpKey {
        RudpKey {
            clients: None,
            ..self.clone()
        }
    }
}

impl PartialOrd for RudpKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RudpKey {
    /// Loss first, then keel-rudp before KCP before keel-udp, then the
    /// workload.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.sort_tuple()
            .cmp(&other.sort_tuple())
            .then_with(|| self.case.cmp(&other.case))
    }
}

impl fmt::Display for RudpKey {
    /// One line: `keel-rudp reliable-ordered, loss 10 %, payload 400 B,
    /// 8 clients, 60 Hz, delay 25 ms, jitter 3 ms each way`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec![self.protocol_label(), format!("loss {}", self.loss_label())];
        for d in ALL_SETTINGS {
            let v = (d.get)(self);
            if !v.is_empty() {
                parts.push(v);
            }
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// The three cases of issue 13 a configuration can belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Case {
    /// Messages at a rate (or a window) under loss: delivery latency.
    Latency,
    /// `transfer_bytes` transfers: completion time and goodput.
    Bulk,
    /// Many connections ([`SCALE_MIN_CLIENTS`] or more), or plain
    /// keel-udp at a rate: server CPU and memory per connection.
    Scale,
}

impl Case {
    /// The value of a line's `case` field: `latency`, `bulk` or `scale`.
    fn parse(text: &str) -> Option<Case> {
        match text {
            "latency" => Some(Case::Latency),
            "bulk" => Some(Case::Bulk),
            "scale" => Some(Case::Scale),
            _ => None,
        }
    }
}

/// A setting of [`RudpKey`] named in table sentences, columns and chart
/// legends.
pub(super) struct RudpDim {
    /// What it is, e.g. `clients` (names each dimension where it is
    /// defined; nothing reads it).
    #[allow(dead_code)]
    pub name: &'static str,
    /// Its value in words, e.g. `8 clients`; empty when it does not apply
    /// (a closed-loop window of an open-loop run, a transfer size outside
    /// the bulk case).
    pub get: fn(&RudpKey) -> String,
}

/// The protocol (keel-rudp channel, KCP mode, keel-udp).
pub(super) const PROTOCOL: RudpDim = RudpDim {
    name: "protocol",
    get: RudpKey::protocol_label,
};
/// Loss each way.
pub(super) const LOSS: RudpDim = RudpDim {
    name: "loss",
    get: |k| format!("loss {}", k.loss_label()),
};
/// Payload bytes per message.
pub(super) const PAYLOAD: RudpDim = RudpDim {
    name: "payload",
    get: |k| format!("payload {} B", opt(&k.payload_bytes)),
};
/// Clients (connections).
pub(super) const CLIENTS: RudpDim = RudpDim {
    name: "clients",
    get: |k| count(k.clients, "client"),
};
/// Open-loop rate.
pub(super) const RATE: RudpDim = RudpDim {
    name: "rate",
    get: |k| match k.rate_hz {
        Some(r) => format!("{r} Hz"),
        None => "closed loop".to_string(),
    },
};
/// Transfer size (bulk case only).
pub(super) const TRANSFER: RudpDim = RudpDim {
    name: "transfer",
    get: |k| {
        k.transfer_bytes
            .map_or_else(String::new, |b| format!("{} transfers", fmt_bytes(b)))
    },
};
/// Window (closed loop only).
pub(super) const WINDOW: RudpDim = RudpDim {
    name: "window",
    get: |k| {
        if k.rate_hz.is_some() {
            String::new()
        } else {
            format!("window {}", opt(&k.window))
        }
    },
};
/// IO model and threads.
pub(super) const IO: RudpDim = RudpDim {
    name: "IO",
    get: |k| format!("{} {}", opt(&k.io_model), count(k.io_threads, "thread")),
};
/// Delay, jitter and other conditioner settings.
pub(super) const LINK: RudpDim = RudpDim {
    name: "link",
    get: RudpKey::link_label,
};
/// Server loss, where it differs from the clients'.
pub(super) const SERVER_LOSS: RudpDim = RudpDim {
    name: "server loss",
    get: |k| {
        if k.server_link.loss_ppm == k.link.loss_ppm {
            String::new()
        } else {
            format!("server loss {}", k.server_link.loss_label())
        }
    },
};

/// Every setting but protocol and loss, in the order they are named.
pub(super) const ALL_SETTINGS: &[RudpDim] = &[PAYLOAD, CLIENTS, RATE, TRANSFER, WINDOW, IO, LINK];

/// `1 MiB`, `64 KiB`, `1000 B`.
pub(super) fn fmt_bytes(b: u64) -> String {
    const KIB: u64 = 1024;
    if b >= KIB * KIB && b.is_multiple_of(KIB * KIB) {
        format!("{} MiB", b / (KIB * KIB))
    } else if b >= KIB && b.is_multiple_of(KIB) {
        format!("{} KiB", b / KIB)
    } else {
        format!("{b} B")
    }
}

/// Splits `dims` into what every key shares (non-empty values, in words)
/// and the dims that vary.
pub(super) fn split_dims<'d>(
    keys: &[&RudpKey],
    dims: &'d [RudpDim],
) -> (Vec<String>, Vec<&'d RudpDim>) {
    let mut constant = Vec::new();
    let mut varying = Vec::new();
    for d in dims {
        let mut values: Vec<String> = keys.iter().map(|k| (d.get)(k)).collect();
        values.sort();
        values.dedup();
        match values.as_slice() {
            [] => {}
            [one] => {
                if !one.is_empty() {
                    constant.push(one.clone());
                }
            }
            _ => varying.push(d),
        }
    }
    (constant, varying)
}

/// The non-empty values of `dims` for `key`, joined with `, `.
pub(super) fn dims_label(key: &RudpKey, dims: &[&RudpDim]) -> String {
    dims.iter()
        .map(|d| (d.get)(key))
        .filter(|v| !v.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a run of the keel-rudp benchmark adds to a
/// [`Run`](crate::report::Run).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RudpRun {
    /// Its configuration.
    pub key: RudpKey,
    /// The seed of `impair`, if any: which repetition this is.
    pub seed: Option<u64>,
    /// `rtt_max_us`.
    pub rtt_max_us: Option<f64>,
    /// `wire_bytes_per_payload_byte`.
    pub wire_bytes_per_payload_byte: Option<f64>,
    /// `messages_resent`.
    pub messages_resent: Option<f64>,
    /// `goodput_bytes_per_second` (bulk case).
    pub goodput_bytes_per_second: Option<f64>,
    /// `server_cpu_us_per_message` (scale case).
    pub server_cpu_us_per_message: Option<f64>,
    /// `rss_bytes_per_connection` (scale case).
    pub rss_bytes_per_connection: Option<f64>,
    /// `server_datagrams_per_message` (open loop).
    pub server_datagrams_per_message: Option<f64>,
}

impl RudpRun {
    /// True for a line of the keel-rudp benchmark: `protocol` `rudp` or
    /// `kcp`, or a `rate_hz` or `transfer_bytes` number.
    pub(in crate::report) fn is_rudp_line(f: &Fields<'_>) -> bool {
        matches!(f.text("protocol").as_deref(), Some("rudp" | "kcp"))
            || f.int("rate_hz").is_some()
            || f.int("transfer_bytes").is_some()
    }

    /// Reads the rudp part of a line.
    pub(in crate::report) fn read(f: &Fields<'_>) -> RudpRun {
        let (link, seed) = Link::parse(f.text("impair").as_deref());
        let (server_link, _) = Link::parse(f.text("impair_server").as_deref());
        let protocol = f.text("protocol");
        let ack_delay_ms = f.int("ack_delay_ms").or_else(|| {
            (protocol.as_deref() == Some("rudp"))
                .then_some(u64::from(crate::flags::DEFAULT_ACK_DELAY_MS))
        });
        RudpRun {
            key: RudpKey {
                protocol,
                channel: f.text("channel"),
                kcp_mode: f.text("kcp_mode"),
                encrypted: f.field("encrypted").and_then(|v| v.as_bool()),
                bulk_channel: f.field("bulk_channel").and_then(|v| v.as_bool()),
                ack_delay_ms,
                kcp_window: f.int("kcp_window"),
                dont_fragment: f.udp_dont_fragment(),
                rate_hz: f.int("rate_hz"),
                transfer_bytes: f.int("transfer_bytes"),
                payload_bytes: f.int("payload_bytes"),
                clients: f.int("clients"),
                window: f.int("window"),
                io_model: f.text("io_model"),
                io_threads: f.int("io_threads"),
                link,
                server_link,
                case: f.text("case").as_deref().and_then(Case::parse),
            },
            seed,
            rtt_max_us: f.measured("rtt_max_us"),
            wire_bytes_per_payload_byte: f.measured("wire_bytes_per_payload_byte"),
            messages_resent: f.measured("messages_resent"),
            goodput_bytes_per_second: f.measured("goodput_bytes_per_second"),
            server_cpu_us_per_message: f.measured("server_cpu_us_per_message"),
            rss_bytes_per_connection: f.measured("rss_bytes_per_connection"),
            server_datagrams_per_message: f.measured("server_datagrams_per_message"),
        }
    }
}
