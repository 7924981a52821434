//! The runs of the keel-rudp benchmark (issue 13): keel-rudp
//! (`--protocol rudp`), KCP (`--protocol kcp`) and plain keel-udp at an
//! open-loop rate (the scale case's baseline), usually under keel-udp's
//! link conditioner (`impair`, `impair_server`).
//!
//! A line is such a run (`RudpRun::is_rudp_line`) when its `protocol` is
//! `rudp` or `kcp`, or it has a `rate_hz` or a `transfer_bytes` number;
//! every other line belongs to the UDP echo matrix, so a line lands in one
//! of the two, never both. Runs are grouped by [`RudpKey`], whose link
//! settings ([`Link`]) leave the conditioner's seed out: the seeds of one
//! setting are its repetitions. Each [`RudpGroup`] is put in one [`Case`]
//! and summarised over the seeds that passed ([`RudpSummary`]).
//!
//! [`super::rudp_key`] reads a line's configuration and measurements
//! ([`RudpRun`]) and names its settings ([`RudpDim`]); this module groups
//! and summarises. (The reading is apart so that [`super::input`] can use
//! it while this module uses the input's runs: no circle.)

use std::collections::BTreeMap;

pub(super) use super::rudp_key::{
    dims_label, split_dims, trim_number, Case, RudpDim, RudpKey, RudpRun, CLIENTS, IO, LINK, LOSS,
    OTHER_SETTINGS, PAYLOAD, PROTOCOL, RATE, SERVER_LOSS, TRANSFER, WINDOW,
};

use super::input::Run;
use super::stats::{mixed_settings, Spread};

/// A configuration's numbers: for each, median [min, max] over the seeds
/// that passed (percentiles: of each run's own percentile, never pooled);
/// `None` when no passing run has it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RudpSummary {
    /// Runs that passed (the others are not in the numbers).
    pub runs_ok: usize,
    /// `rtt_p50_us` (bulk: per-transfer completion time).
    pub p50_us: Option<Spread>,
    /// `rtt_p99_us`.
    pub p99_us: Option<Spread>,
    /// `rtt_p999_us`.
    pub p999_us: Option<Spread>,
    /// `rtt_max_us`.
    pub max_us: Option<Spread>,
    /// `wire_bytes_per_payload_byte`.
    pub wire: Option<Spread>,
    /// `messages_resent`.
    pub resent: Option<Spread>,
    /// `goodput_bytes_per_second`.
    pub goodput: Option<Spread>,
    /// `server_cpu_us_per_message`.
    pub cpu_us_per_message: Option<Spread>,
    /// `rss_bytes_per_connection`.
    pub rss_per_connection: Option<Spread>,
    /// `server_datagrams_per_message`.
    pub datagrams_per_message: Option<Spread>,
    /// `udp_lost_messages`, over every run that reports it, failed ones
    /// included (losing messages is what fails a run).
    pub lost: Option<Spread>,
}

impl RudpSummary {
    fn of(runs: &[Run]) -> RudpSummary {
        let passed: Vec<&Run> = runs.iter().filter(|r| r.passed()).collect();
        let spread =
            |f: &dyn Fn(&Run) -> Option<f64>| Spread::of(passed.iter().filter_map(|r| f(r)));
        let extra = |f: fn(&RudpRun) -> Option<f64>| {
            Spread::of(passed.iter().filter_map(|r| r.rudp.as_ref().and_then(f)))
        };
        RudpSummary {
            runs_ok: passed.len(),
            p50_us: spread(&|r| r.rtt_p50_us),
            p99_us: spread(&|r| r.rtt_p99_us),
            p999_us: spread(&|r| r.rtt_p999_us),
            max_us: extra(|x| x.rtt_max_us),
            wire: extra(|x| x.wire_bytes_per_payload_byte),
            resent: extra(|x| x.messages_resent),
            goodput: extra(|x| x.goodput_bytes_per_second),
            cpu_us_per_message: extra(|x| x.server_cpu_us_per_message),
            rss_per_connection: extra(|x| x.rss_bytes_per_connection),
            datagrams_per_message: extra(|x| x.server_datagrams_per_message),
            lost: Spread::of(
                runs.iter()
                    .filter_map(|r| r.udp_lost_messages.map(|n| n as f64)),
            ),
        }
    }
}

/// The runs (seeds) of one configuration and their summary.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RudpGroup {
    /// The configuration.
    pub key: RudpKey,
    /// Its runs, in input order.
    pub runs: Vec<Run>,
    /// Its numbers, over the runs that passed.
    pub summary: RudpSummary,
    /// Settings outside the key on which the runs disagree.
    pub mixed: Vec<String>,
}

impl RudpGroup {
    /// The runs that failed.
    pub(super) fn failed(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| !r.passed())
    }

    /// `2/3`: runs that passed out of all.
    pub(super) fn runs_ok_label(&self) -> String {
        format!("{}/{}", self.summary.runs_ok, self.runs.len())
    }

    /// The group's case.
    pub(super) fn case(&self) -> Case {
        self.key.case()
    }
}

/// Groups runs of the keel-rudp benchmark (each with `rudp` set) by
/// configuration, in key order.
pub(super) fn groups(runs: Vec<Run>) -> Vec<RudpGroup> {
    let mut by_key: BTreeMap<RudpKey, Vec<Run>> = BTreeMap::new();
    for run in runs {
        let key = run.rudp.as_ref().map(|x| x.key.clone()).unwrap_or_default();
        by_key.entry(key).or_default().push(run);
    }
    by_key
        .into_iter()
        .map(|(key, runs)| RudpGroup {
            summary: RudpSummary::of(&runs),
            mixed: mixed_settings(&runs, OTHER_SETTINGS),
            key,
            runs,
        })
        .collect()
}
