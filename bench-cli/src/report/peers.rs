//! `keel-bench report` on the records of `scripts/rudp-peers.sh` (issue
//! 22): one record per run of three processes (client fields, `server_*`,
//! `relay_*`, and `lib`, `library`, `tuned`, `case`, `channel`, `loss`,
//! `seed`, `wire_bytes_per_payload_byte`).
//!
//! Such a record is told apart by its `lib`, `case`, `loss` and `seed`
//! fields ([`is_peer_record`]); [`split`] takes them out of a result file
//! before the rest of the report reads it, and `report::write_peers` writes
//! `peers.md` and its charts (`charts::peers`):
//!
//! * the calibration table, when there are `calibration-*` records:
//!   keel-bench's keel-rudp and KCP in one process against the same
//!   through the relay, p50 and p99 median [min, max] over the seeds;
//! * per case and channel, one row per library (and tuning) and loss: runs
//!   that passed of those made, delivery latency p50, p99, p99.9 and max
//!   (medians over the seeds of each run's own percentile, over every run
//!   whose client reported percentiles: an unreliable run that lost
//!   messages still has a latency), delivered and lost (sums), wire bytes
//!   per payload byte at the relay, whole-process CPU per message of the
//!   clients and of the server, the clients' and the server's RSS per
//!   connection (medians);
//!   then the settings of each library, as its lines say them;
//! * the charts, per case and channel: p99 against loss, server CPU per
//!   message against loss, wire bytes per payload byte against loss, one
//!   line per library (median dot, min-max whiskers over the seeds).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::stats::Spread;

/// The Markdown file of the peers' records.
pub(super) const PEERS_FILE: &str = "peers.md";

/// Whether a JSON line is a record of `scripts/rudp-peers.sh`.
pub(super) fn is_peer_record(v: &Value) -> bool {
    ["lib", "case", "loss", "seed"]
        .iter()
        .all(|k| v.get(k).is_some_and(|x| !x.is_null()))
}

/// `text` without its peers' records, and those records.
pub(super) fn split(text: &str) -> (String, Vec<Value>) {
    let mut rest = String::with_capacity(text.len());
    let mut records = Vec::new();
    for line in text.lines() {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if is_peer_record(&v) => records.push(v),
            _ => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
    }
    (rest, records)
}

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64).filter(|x| x.is_finite())
}

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A record's library as the tables name it: keel-bench's own by their
/// `library`, a keel-peer's with `tuned` or `defaults`.
pub(super) fn label(v: &Value) -> String {
    let lib = text(v, "lib");
    let name = match text(v, "library") {
        "" => lib,
        n => n,
    };
    if lib.starts_with("keel-bench-") || lib.starts_with("udp-") {
        name.to_string()
    } else if v.get("tuned").and_then(Value::as_bool).unwrap_or(false) {
        format!("{name} tuned")
    } else {
        format!("{name} defaults")
    }
}

/// The runs of one library, tuning, case, channel and loss.
pub(super) struct Group<'a> {
    pub(super) case: String,
    pub(super) channel: String,
    pub(super) library: String,
    /// Loss each way, a fraction.
    pub(super) loss: f64,
    pub(super) runs: Vec<&'a Value>,
}

impl Group<'_> {
    /// Median, min and max of `k` over the runs that have it.
    pub(super) fn spread(&self, k: &str) -> Option<Spread> {
        Spread::of(self.runs.iter().filter_map(|r| num(r, k)))
    }

    fn ok(&self) -> usize {
        self.runs
            .iter()
            .filter(|r| r.get("ok").and_then(Value::as_bool).unwrap_or(false))
            .count()
    }

    fn sum(&self, k: &str) -> Option<f64> {
        let xs: Vec<f64> = self.runs.iter().filter_map(|r| num(r, k)).collect();
        (!xs.is_empty()).then(|| xs.iter().sum())
    }
}

/// The records grouped, in case, channel, library, loss order.
pub(super) fn groups(records: &[Value]) -> Vec<Group<'_>> {
    let mut map: BTreeMap<(String, String, String, u64), Vec<&Value>> = BTreeMap::new();
    for r in records {
        let loss = num(r, "loss").unwrap_or(0.0);
        let key = (
            text(r, "case").to_string(),
            text(r, "channel").to_string(),
            label(r),
            (loss * 1e6).round() as u64,
        );
        map.entry(key).or_default().push(r);
    }
    map.into_iter()
        .map(|((case, channel, library, loss), runs)| Group {
            case,
            channel,
            library,
            loss: loss as f64 / 1e6,
            runs,
        })
        .collect()
}

/// `x` scaled by `by`, with `digits` decimals, or `–`.
fn cell(x: Option<f64>, by: f64, digits: usize) -> String {
    x.map_or_else(|| "–".to_string(), |x| format!("{:.*}", digits, x / by))
}

/// `median [min, max]`, scaled, or `–`.
fn spread_cell(s: Option<Spread>, by: f64) -> String {
    match s {
        None => "–".to_string(),
        Some(s) if s.min == s.max => format!("{:.1}", s.median / by),
        Some(s) => format!(
            "{:.1} [{:.1}, {:.1}]",
            s.median / by,
            s.min / by,
            s.max / by
        ),
    }
}

fn percent(loss: f64) -> String {
    let p = loss * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{} %", p.round())
    } else {
        format!("{p} %")
    }
}

/// The calibration table: in-process against relayed, by loss and library.
fn calibration(groups: &[Group<'_>], s: &mut String) {
    let inproc: Vec<&Group<'_>> = groups
        .iter()
        .filter(|g| g.case == "calibration-inprocess")
        .collect();
    if inproc.is_empty() {
        return;
    }
    s.push_str("## Calibration: in one process against through the relay\n\n");
    s.push_str(
        "keel-bench's keel-rudp and KCP fast, 8 clients, 400 B at 60 Hz: in one process \
         (keel-bench's conditioner on each socket) and as three processes through `keel-bench \
         relay` (the same loss, delay and jitter each way). Medians [min, max] over the seeds.\n\n",
    );
    s.push_str(
        "| loss each way | library | runs ok in-process / relay | p50 ms in-process | p50 ms relay \
         | p99 ms in-process | p99 ms relay | wire bytes / payload byte in-process / relay |\n",
    );
    s.push_str("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for a in inproc {
        let b = groups
            .iter()
            .find(|g| g.case == "calibration-relay" && g.library == a.library && g.loss == a.loss);
        let _ = writeln!(
            s,
            "| {} | {} | {}/{} / {} | {} | {} | {} | {} | {} / {} |",
            percent(a.loss),
            a.library,
            a.ok(),
            a.runs.len(),
            b.map_or("–".to_string(), |b| format!(
                "{}/{}",
                b.ok(),
                b.runs.len()
            )),
            spread_cell(a.spread("rtt_p50_us"), 1000.0),
            spread_cell(b.and_then(|b| b.spread("rtt_p50_us")), 1000.0),
            spread_cell(a.spread("rtt_p99_us"), 1000.0),
            spread_cell(b.and_then(|b| b.spread("rtt_p99_us")), 1000.0),
            cell(
                a.spread("wire_bytes_per_payload_byte").map(|x| x.median),
                1.0,
                3
            ),
            cell(
                b.and_then(|b| b.spread("wire_bytes_per_payload_byte"))
                    .map(|x| x.median),
                1.0,
                3
            ),
        );
    }
    s.push('\n');
}

/// The relay's own cost: keel-bench's UDP echo, direct and through an
/// unimpaired relay, alternated (`relay-cost`), and busy (`relay-load`).
fn relay_cost(groups: &[Group<'_>], s: &mut String) {
    for (case, title, words) in [
        (
            "relay-cost",
            "## The relay's own cost\n\n",
            "keel-bench's UDP echo (`serve` and `--connect`, 1 client, window 1, 400 B, closed \
             loop), direct and through `keel-bench relay` with no impairment, alternated; medians \
             [min, max] over the repetitions. The relay's CPU is its whole process over its life.\n\n",
        ),
        (
            "relay-load",
            "## The relay's own cost, busy\n\n",
            "keel-bench's UDP echo (`serve` and `--connect`, 100 clients, window 4, 400 B, closed \
             loop) through `keel-bench relay` with no impairment; medians [min, max] over the \
             repetitions. The relay's CPU is its whole process over its life.\n\n",
        ),
    ] {
        relay_cost_table(groups, case, title, words, s);
    }
}

fn relay_cost_table(groups: &[Group<'_>], case: &str, title: &str, words: &str, s: &mut String) {
    let rows: Vec<&Group<'_>> = groups.iter().filter(|g| g.case == case).collect();
    if rows.is_empty() {
        return;
    }
    s.push_str(title);
    s.push_str(words);
    s.push_str(
        "| path | runs ok | round trips/s | p50 µs | p99 µs | p99.9 µs | relay CPU µs/datagram \
         | relay CPU % |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for g in rows {
        let med = |k: &str| g.spread(k).map(|x| x.median);
        let cpu_percent = Spread::of(g.runs.iter().filter_map(|r| {
            Some(num(r, "relay_cpu_seconds")? * 100.0 / num(r, "relay_elapsed_seconds")?)
        }))
        .map(|x| x.median);
        let _ = writeln!(
            s,
            "| {} | {}/{} | {} | {} | {} | {} | {} | {} |",
            g.library,
            g.ok(),
            g.runs.len(),
            cell(med("roundtrips_per_second"), 1.0, 0),
            spread_cell(g.spread("rtt_p50_us"), 1.0),
            spread_cell(g.spread("rtt_p99_us"), 1.0),
            cell(med("rtt_p999_us"), 1.0, 1),
            cell(med("relay_cpu_us_per_datagram"), 1.0, 2),
            cell(cpu_percent, 1.0, 1),
        );
    }
    s.push('\n');
}

/// What a case is, in words.
pub(super) fn case_words(case: &str) -> String {
    match case {
        "tick8" => "400 B at 60 Hz, 8 clients".into(),
        "tick100" => "400 B at 60 Hz, 100 clients".into(),
        "small8" => "100 B at 30 Hz, 8 clients".into(),
        "small100" => "100 B at 30 Hz, 100 clients".into(),
        "scale" => "1,000 connections, 100 B at 20 Hz".into(),
        "calibration-relay" => "calibration through the relay: 400 B at 60 Hz, 8 clients".into(),
        other => other.into(),
    }
}

/// The Markdown of the peers' records.
pub(super) fn markdown(records: &[Value], charts: &[String]) -> String {
    let groups = groups(records);
    let mut s = String::from("# Reliable-UDP libraries through one impairment relay\n\n");
    let _ = writeln!(
        s,
        "{} runs (scripts/rudp-peers.sh: server, `keel-bench relay` and clients, three \
         processes a run). Loss each way, 25 ms delay each way with its jitter (a 50 ms RTT). \
         Latency: message sent to its echo received, on the client's clock; medians over the \
         seeds of each run's percentile, [min, max] where the seeds differ. Wire: bytes at the \
         relay both ways (UDP payload, as received) over the payload bytes of the messages \
         the server echoed, counted twice. CPU: whole process (every thread), per message.\n",
        records.len()
    );
    calibration(&groups, &mut s);
    relay_cost(&groups, &mut s);
    let mut sections: Vec<(String, String)> = Vec::new();
    for g in &groups {
        let k = (g.case.clone(), g.channel.clone());
        if !["calibration-inprocess", "relay-cost", "relay-load"].contains(&g.case.as_str())
            && !sections.contains(&k)
        {
            sections.push(k);
        }
    }
    for (case, channel) in &sections {
        let _ = writeln!(s, "## {}, {channel}\n", case_words(case));
        s.push_str(
            "| loss each way | library | runs ok | p50 ms | p99 ms | p99.9 ms | max ms | delivered \
             | lost | wire bytes / payload byte | client CPU µs/msg | server CPU µs/msg | client \
             RSS KiB/conn | server RSS KiB/conn |\n",
        );
        s.push_str(
            "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        let mut rows: Vec<&Group<'_>> = groups
            .iter()
            .filter(|g| &g.case == case && &g.channel == channel)
            .collect();
        rows.sort_by(|a, b| a.loss.total_cmp(&b.loss).then(a.library.cmp(&b.library)));
        for g in &rows {
            let med = |k: &str| g.spread(k).map(|x| x.median);
            let _ = writeln!(
                s,
                "| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                percent(g.loss),
                g.library,
                g.ok(),
                g.runs.len(),
                spread_cell(g.spread("rtt_p50_us"), 1000.0),
                spread_cell(g.spread("rtt_p99_us"), 1000.0),
                cell(med("rtt_p999_us"), 1000.0, 1),
                cell(med("rtt_max_us"), 1000.0, 1),
                cell(g.sum("messages_delivered"), 1.0, 0),
                cell(g.sum("lost"), 1.0, 0),
                cell(med("wire_bytes_per_payload_byte"), 1.0, 3),
                cell(med("cpu_us_per_message"), 1.0, 1),
                cell(med("server_cpu_us_per_message"), 1.0, 1),
                cell(med("rss_bytes_per_connection"), 1024.0, 1),
                cell(med("server_rss_bytes_per_connection"), 1024.0, 1),
            );
        }
        s.push('\n');
        for name in charts
            .iter()
            .filter(|n| n.ends_with(&format!("-{case}-{channel}.svg")))
        {
            let _ = writeln!(s, "![{name}]({name})\n");
        }
    }
    let mut settings: BTreeMap<String, (String, String)> = BTreeMap::new();
    for r in records.iter().filter(|r| !text(r, "settings").is_empty()) {
        settings
            .entry(label(r))
            .or_insert_with(|| (text(r, "settings").to_string(), text(r, "pump").to_string()));
    }
    if !settings.is_empty() {
        s.push_str("## Settings\n\n");
        for (lib, (set, pump)) in settings {
            let _ = write!(s, "* {lib}: {}", if set.is_empty() { "–" } else { &set });
            if !pump.is_empty() {
                let _ = write!(s, "; pumped by {pump}");
            }
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(lib: &str, tuned: bool, loss: f64, seed: u64, p99: f64) -> String {
        serde_json::json!({
            "lib": lib, "library": if lib == "enet" { "enet" } else { "keel-rudp (keel-bench)" },
            "tuned": tuned, "case": "tick8", "channel": "reliable-ordered", "loss": loss,
            "seed": seed, "ok": true, "rtt_p50_us": 50000.0, "rtt_p99_us": p99,
            "messages_delivered": 100, "lost": 0, "wire_bytes_per_payload_byte": 1.2,
            "cpu_us_per_message": 10.0, "server_cpu_us_per_message": 20.0,
            "settings": "s", "pump": "p"
        })
        .to_string()
    }

    #[test]
    fn peer_records_are_split_out_grouped_and_tabled() {
        let text = [
            "{\"backend\":\"keel\",\"ok\":true}".to_string(),
            rec("keel-bench-rudp", false, 0.1, 1, 200_000.0),
            rec("keel-bench-rudp", false, 0.1, 2, 220_000.0),
            rec("keel-bench-rudp", false, 0.1, 3, 260_000.0),
            rec("enet", true, 0.1, 1, 300_000.0),
            "not json".to_string(),
        ]
        .join("\n");
        let (rest, records) = split(&text);
        assert_eq!(records.len(), 4);
        assert_eq!(rest.lines().count(), 2, "{rest}");
        let g = groups(&records);
        assert_eq!(g.len(), 2);
        let keel = g
            .iter()
            .find(|g| g.library.starts_with("keel-rudp"))
            .unwrap();
        assert_eq!(keel.spread("rtt_p99_us").unwrap().median, 220_000.0);
        assert_eq!(g.iter().filter(|g| g.library == "enet tuned").count(), 1);
        let md = markdown(&records, &[]);
        assert!(
            md.contains("| 10 % | keel-rudp (keel-bench) | 3/3 | 50.0 | 220.0 [200.0, 260.0] |"),
            "{md}"
        );
        assert!(md.contains("* enet tuned: s; pumped by p"), "{md}");
    }

    /// relay-load runs get the busy table of the relay's cost, not a
    /// section of their own like a library case.
    #[test]
    fn relay_load_runs_are_the_busy_relay_table() {
        let r = |seed: u64, cpu: f64| {
            serde_json::json!({
                "lib": "udp-relay", "library": "udp through the relay", "tuned": false,
                "case": "relay-load", "channel": "none", "loss": 0.0, "seed": seed, "ok": true,
                "roundtrips_per_second": 25000.0, "rtt_p50_us": 12000.0, "rtt_p99_us": 40000.0,
                "relay_cpu_us_per_datagram": cpu, "relay_cpu_seconds": 1.5,
                "relay_elapsed_seconds": 5.0
            })
        };
        let md = markdown(&[r(1, 5.0), r(2, 6.0), r(3, 7.0)], &[]);
        assert!(md.contains("## The relay's own cost, busy"), "{md}");
        assert!(
            md.contains("| udp through the relay | 3/3 | 25000 | 12000.0 | 40000.0 |"),
            "{md}"
        );
        assert!(md.contains("| 6.00 | 30.0 |"), "{md}");
        assert!(!md.contains("## relay-load"), "{md}");
    }
}
