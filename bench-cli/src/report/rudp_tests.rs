//! Unit tests of the keel-rudp benchmark's part of the report, on
//! synthetic JSON lines.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::rudp_key::{Case, Link};
use super::stats::Spread;
use super::*;
use crate::flags::ReportConfig;

/// A passing game-tick line: `proto` (`rudp` or `kcp`) at `loss` % each
/// way, seed `seed`, with the given p99 (ms).
fn tick(proto: &str, loss: u32, seed: u64, p99_ms: f64) -> Value {
    let p = f64::from(loss) / 100.0;
    let mut v = json!({
        "schema_version": 1, "backend": "keel", "protocol": proto,
        "address_family": "ipv4", "payload_bytes": 400, "clients": 8, "window": 1,
        "io_model": "shared", "handler_work": 0, "io_contexts": 1, "io_threads": 1,
        "server_io_lanes": 1, "requested_seconds": 3.0, "warmup_seconds": 1.0,
        "roundtrips_per_second": 470.0, "rtt_p50_us": 51_000.0,
        "rtt_p99_us": p99_ms * 1000.0, "rtt_p999_us": p99_ms * 1200.0,
        "rtt_max_us": p99_ms * 1500.0, "cpu_percent": 8.0, "udp_lost_messages": 0,
        "ok": true, "error": null, "batch": null,
        "impair": format!("loss={p},delay=25ms,jitter=3ms,dup=0,reorder=0,reorder-delay=10ms,seed={seed},limit=4096,limit-bytes=16777216"),
        "impair_server": format!("loss={p},delay=25ms,jitter=3ms,dup=0,reorder=0,reorder-delay=10ms,seed={},limit=4096,limit-bytes=16777216", seed + 1000),
        "channel": "reliable-ordered", "rate_hz": 60,
        "messages_delivered": 1440, "wire_bytes_per_payload_byte": 1.1 + p,
    });
    if proto == "rudp" {
        v["messages_resent"] = json!(100 * u64::from(loss) + seed);
        v["redundant_copies"] = json!(0);
        v["encrypted"] = json!(false);
    } else {
        v["kcp_mode"] = json!("fast");
    }
    v
}

/// A bulk line: 1 MiB transfers, completion p99 `p99_ms`.
fn bulk(proto: &str, loss: u32, seed: u64, p99_ms: f64) -> Value {
    let mut v = tick(proto, loss, seed, p99_ms);
    v["transfer_bytes"] = json!(1 << 20);
    v["rate_hz"] = Value::Null;
    v["goodput_bytes_per_second"] = json!(2.0 * 1_048_576.0);
    v
}

/// A scale line: `clients` connections at 20 Hz, no loss.
fn scale(proto: &str, clients: u64, seed: u64, cpu_us: f64) -> Value {
    let mut v = tick(proto, 0, seed, 60.0);
    v["clients"] = json!(clients);
    v["rate_hz"] = json!(20);
    v["server_cpu_us_per_message"] = json!(cpu_us);
    v["rss_bytes_per_connection"] = json!(4096 * clients / 1000);
    if proto == "udp" {
        for k in [
            "channel",
            "messages_resent",
            "redundant_copies",
            "encrypted",
            "messages_delivered",
            "wire_bytes_per_payload_byte",
        ] {
            v.as_object_mut().unwrap().remove(k);
        }
    }
    v
}

/// A passing line of the UDP echo matrix.
fn udp(window: u64) -> Value {
    json!({
        "schema_version": 1, "backend": "keel", "protocol": "udp",
        "address_family": "ipv4", "payload_bytes": 1024, "clients": 16,
        "window": window, "io_model": "shared", "handler_work": 0, "io_contexts": 1,
        "io_threads": 1, "server_io_lanes": 1, "batch": 64,
        "requested_seconds": 1.0, "warmup_seconds": 0.25,
        "roundtrips_per_second": 100_000.0, "rtt_p50_us": 20.0, "rtt_p99_us": 40.0,
        "rtt_p999_us": 80.0, "cpu_percent": 95.0, "udp_lost_messages": 0,
        "ok": true, "error": null, "impair": null, "impair_server": null,
    })
}

fn failed(mut v: Value, error: &str) -> Value {
    v["ok"] = json!(false);
    v["error"] = json!(error);
    v
}

fn report_of(lines: &[Value]) -> Report {
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    Report::from_texts([("r.jsonl", text.as_str())])
}

/// The game-tick matrix: rudp and kcp at 0 and 10 %, seeds 1-3.
fn matrix() -> Vec<Value> {
    let mut lines = Vec::new();
    for loss in [0, 10] {
        for proto in ["rudp", "kcp"] {
            for seed in 1..=3 {
                let base = if proto == "rudp" { 50.0 } else { 70.0 };
                let p99 = base + 10.0 * f64::from(loss) + 5.0 * seed as f64;
                lines.push(tick(proto, loss, seed, p99));
            }
        }
    }
    lines
}

/// The markdown section of the keel-rudp benchmark (from its heading).
fn section(md: &str) -> &str {
    &md[md.find("## keel-rudp and KCP").expect("rudp section")..]
}

#[test]
fn seeds_are_repetitions_of_one_configuration_per_loss_and_protocol() {
    let r = report_of(&matrix());
    assert!(r.groups.is_empty(), "no rudp line in the UDP matrix");
    assert_eq!(r.run_count(), 12);
    assert_eq!(r.rudp.len(), 4);
    let order: Vec<(String, String, usize)> = r
        .rudp
        .iter()
        .map(|g| (g.key.loss_label(), g.key.protocol_label(), g.runs.len()))
        .collect();
    assert_eq!(
        order,
        [
            ("0 %".into(), "keel-rudp reliable-ordered".into(), 3),
            ("0 %".into(), "KCP fast".into(), 3),
            ("10 %".into(), "keel-rudp reliable-ordered".into(), 3),
            ("10 %".into(), "KCP fast".into(), 3),
        ]
    );
    let g = &r.rudp[2];
    assert_eq!(g.case(), Case::Latency);
    assert_eq!(g.key.link.loss_ppm, Some(100_000));
    assert_eq!(g.key.link.delay_us, Some(25_000));
    assert_eq!(g.key.link.jitter_us, Some(3_000));
    assert_eq!(g.key.link.other, "", "defaults are not part of the key");
    let seeds: Vec<_> = g
        .runs
        .iter()
        .map(|r| r.rudp.as_ref().unwrap().seed)
        .collect();
    assert_eq!(seeds, [Some(1), Some(2), Some(3)]);
    // The median of the runs' own p99s (155, 160, 165 ms).
    let s = &g.summary;
    assert_eq!(s.runs_ok, 3);
    assert_eq!(
        s.p99_us,
        Some(Spread {
            median: 160_000.0,
            min: 155_000.0,
            max: 165_000.0
        })
    );
    assert_eq!(s.resent.unwrap().median, 1002.0);
    assert!((s.wire.unwrap().median - 1.2).abs() < 1e-9);
    assert_eq!(r.rudp[3].summary.resent, None, "KCP reports no resends");
    assert!(r.rudp.iter().all(|g| g.mixed.is_empty()));
}

#[test]
fn every_key_field_separates_configurations_but_the_seed_does_not() {
    let base = tick("rudp", 5, 1, 100.0);
    let mut other_seed = tick("rudp", 5, 2, 120.0);
    other_seed["impair_server"] = json!("loss=0.05,delay=25ms,jitter=3ms,seed=77");
    let r = report_of(&[base.clone(), other_seed]);
    assert_eq!(
        r.rudp.len(),
        1,
        "seeds (and the echo's defaults) do not split"
    );

    let changes: [(&str, Value); 16] = [
        ("protocol", json!("kcp")),
        ("channel", json!("reliable-unordered")),
        ("kcp_mode", json!("normal")),
        ("encrypted", json!(true)),
        ("bulk_channel", json!(true)),
        ("ack_delay_ms", json!(51)),
        ("kcp_window", json!(1024)),
        ("rate_hz", json!(30)),
        ("transfer_bytes", json!(1 << 20)),
        ("payload_bytes", json!(64)),
        ("clients", json!(16)),
        ("window", json!(4)),
        ("io_threads", json!(2)),
        ("impair", json!("loss=0.10,delay=25ms,jitter=3ms,seed=1")),
        ("impair", json!("loss=0.05,delay=50ms,jitter=3ms,seed=1")),
        (
            "impair_server",
            json!("loss=0.05,delay=25ms,jitter=0,seed=1"),
        ),
    ];
    for (name, value) in changes {
        let mut other = base.clone();
        other[name] = value.clone();
        let r = report_of(&[base.clone(), other]);
        assert_eq!(r.rudp.len(), 2, "{name} = {value} must be part of the key");
    }
    // Settings outside the key do not split, but are flagged.
    let mut longer = base.clone();
    longer["requested_seconds"] = json!(10.0);
    longer["batch"] = json!(64);
    let r = report_of(&[base, longer]);
    assert_eq!(r.rudp.len(), 1);
    assert_eq!(
        r.rudp[0].mixed,
        ["requested_seconds: 10.0, 3.0", "batch: 64, absent"]
    );
    assert!(r.markdown(&[]).contains("requested_seconds: 10.0, 3.0"));
}

#[test]
fn the_latency_table_is_the_one_rudp_matrix_sh_printed() {
    let md = report_of(&matrix()).markdown(&[]);
    assert!(md.contains("12 runs, all 12 of the keel-rudp benchmark in 4 configurations"));
    assert!(
        !md.contains("## Summary"),
        "no UDP section without UDP runs"
    );
    let s = section(&md);
    for text in [
        "### Latency under loss",
        "All rows: payload 400 B · 8 clients · 60 Hz · shared 1 thread · delay 25 ms, jitter 3 ms each way.",
        "| loss each way | protocol | runs ok | p50 ms | p99 ms | p99.9 ms | max ms | wire bytes / payload byte | resent |",
        "| 0 % | keel-rudp reliable-ordered | 3/3 | 51.0 | 60.0 | 72.0 | 90.0 | 1.100 | 2 |",
        "| 10 % | KCP fast | 3/3 | 51.0 | 180.0 | 216.0 | 270.0 | 1.200 | – |",
    ] {
        assert!(s.contains(text), "lacks {text:?} in\n{s}");
    }
    assert!(!s.contains("### Bulk"));
    assert!(!s.contains("### Scale"));
    assert!(!s.contains("### Failed runs"));
    assert!(
        !s.contains("settings |"),
        "nothing varies but loss and protocol"
    );
    // The chart is embedded only when it was written.
    assert!(!s.contains("rudp-p99.svg"));
    let md = report_of(&matrix()).markdown(&[RUDP_P99_FILE]);
    assert!(section(&md).contains("![p99 latency against loss](rudp-p99.svg)"));
}

#[test]
fn settings_that_vary_get_a_column() {
    let mut lines = matrix();
    let mut more = tick("rudp", 0, 1, 55.0);
    more["clients"] = json!(16);
    lines.push(more);
    let md = report_of(&lines).markdown(&[]);
    let s = section(&md);
    assert!(s.contains("| loss each way | protocol | runs ok | settings | p50 ms |"));
    assert!(s.contains("| 0 % | keel-rudp reliable-ordered | 1/1 | 16 clients | 51.0 |"));
    assert!(s.contains("All rows: payload 400 B · 60 Hz"));
}

#[test]
fn a_failed_seed_is_left_out_of_the_numbers_and_listed() {
    let mut lines = matrix();
    // Seed 2 of keel-rudp at 10 % failed; every KCP seed at 10 % failed.
    let i = lines
        .iter()
        .position(|v| {
            v["protocol"] == "rudp" && v["impair"].as_str().unwrap().contains("loss=0.1,")
        })
        .unwrap()
        + 1;
    lines[i] = failed(lines[i].clone(), "unfinished_messages = 3");
    lines[i]["command"] = json!("keel-bench --protocol rudp --impair loss=0.10");
    for v in lines.iter_mut() {
        if v["protocol"] == "kcp" && v["impair"].as_str().unwrap().contains("loss=0.1,") {
            *v = failed(v.clone(), "drain_timeouts = 1");
        }
    }
    let r = report_of(&lines);
    let g = &r.rudp[2];
    assert_eq!((g.summary.runs_ok, g.runs.len()), (2, 3));
    // p99s of seeds 1 and 3: 155 and 165 ms; seed 2's 160 is left out.
    let p99 = g.summary.p99_us.unwrap();
    assert_eq!((p99.min, p99.max), (155_000.0, 165_000.0));
    assert_eq!(g.failed().count(), 1);
    let kcp = &r.rudp[3];
    assert_eq!(kcp.summary.runs_ok, 0);
    assert_eq!(kcp.summary.p99_us, None);

    let md = r.markdown(&[]);
    let s = section(&md);
    assert!(
        s.contains("| 10 % | keel-rudp reliable-ordered | 2/3 | 51.0 | 160.0 |"),
        "{s}"
    );
    assert!(
        s.contains("| 10 % | KCP fast | 0/3 | – | – | – | – | – | – |"),
        "{s}"
    );
    assert!(s.contains("### Failed runs"));
    assert!(s.contains(
        "- keel-rudp reliable-ordered, loss 10 %, payload 400 B, 8 clients, 60 Hz, shared 1 thread, delay 25 ms, jitter 3 ms each way (2/3 ok):"
    ), "{s}");
    assert!(
        s.contains("  - seed 2 (r.jsonl:8): unfinished_messages = 3"),
        "{s}"
    );
    assert!(s.contains("    - command: `keel-bench --protocol rudp --impair loss=0.10`"));
    assert!(
        s.contains("  - seed 3 (r.jsonl:12): drain_timeouts = 1"),
        "{s}"
    );

    // The chart: a hollow dot for the partial point, none for KCP at 10 %.
    let svg = charts::rudp_p99_svg(&r).unwrap().unwrap();
    assert!(svg.contains("hollow dot: some runs failed"));
    let dots = filled_dots(&svg);
    assert_eq!(dots.len(), 3, "rudp 0 %, KCP 0 %, rudp 10 % ({dots:?})");
    assert_eq!(dots.iter().filter(|f| *f == "#FFFFFF").count(), 1);

    // Counted as summarised (a seed passed) or excluded (none did).
    let w = write_to("failed", &lines);
    assert_eq!((w.summarised, w.excluded), (3, 1));
}

#[test]
fn missing_null_and_mistyped_fields_are_unknown() {
    let mut sparse = tick("rudp", 5, 1, 100.0);
    for k in [
        "messages_resent",
        "wire_bytes_per_payload_byte",
        "rtt_max_us",
        "channel",
        "impair_server",
    ] {
        sparse.as_object_mut().unwrap().remove(k);
    }
    sparse["rtt_p999_us"] = Value::Null;
    sparse["encrypted"] = json!("yes");
    let r = report_of(&[sparse]);
    let g = &r.rudp[0];
    assert_eq!(g.key.channel, None);
    assert_eq!(g.key.encrypted, None);
    assert_eq!(
        g.key.server_link,
        Link::off(),
        "no impair_server: no conditioner"
    );
    assert_eq!(g.key.loss_label(), "5 % / 0 %");
    let s = &g.summary;
    assert_eq!(
        (s.max_us, s.wire, s.resent, s.p999_us),
        (None, None, None, None)
    );
    assert_eq!(
        (s.goodput, s.cpu_us_per_message, s.rss_per_connection),
        (None, None, None)
    );
    let md = r.markdown(&[]);
    assert!(
        md.contains("| 5 % / 0 % | keel-rudp ? | 1/1 | 51.0 | 100.0 | – | – | – | – |"),
        "{md}"
    );

    // No impair at all: no conditioner, loss 0.
    let mut clean = tick("kcp", 0, 1, 60.0);
    clean.as_object_mut().unwrap().remove("impair");
    clean["impair_server"] = Value::Null;
    let r = report_of(&[clean]);
    assert_eq!(r.rudp[0].key.link, Link::off());
    assert!(r.markdown(&[]).contains("no delay each way"));

    // An impair that does not parse: loss unknown, the rest (without its
    // seed) still keys the group, so seeds still group.
    let mut odd = tick("rudp", 0, 1, 60.0);
    odd["impair"] = json!("loss=lots,seed=1");
    let mut odd2 = tick("rudp", 0, 2, 70.0);
    odd2["impair"] = json!("loss=lots,seed=2");
    let r = report_of(&[odd, odd2]);
    assert_eq!(r.rudp.len(), 1);
    assert_eq!(r.rudp[0].key.link.loss_ppm, None);
    assert_eq!(r.rudp[0].key.link.other, "loss=lots");
    assert_eq!(r.rudp[0].key.loss_label(), "? / 0 %");
    assert_eq!(charts::rudp_p99_svg(&r).unwrap(), None, "no x: no point");
    // The bulk and scale fields, absent from a game-tick line, leave the
    // report to its latency table.
    let r = report_of(&matrix());
    assert_eq!(charts::rudp_bulk_svg(&r).unwrap(), None);
    assert_eq!(charts::rudp_scale_svg(&r).unwrap(), None);
}

#[test]
fn rudp_and_udp_lines_never_share_a_table() {
    let mut lines = vec![udp(1), udp(1), udp(16)];
    lines.extend(matrix());
    // A UDP line with a rate is the scale case's baseline, not the matrix.
    lines.push(scale("udp", 1000, 1, 3.0));
    let r = report_of(&lines);
    assert_eq!(r.groups.len(), 2);
    assert!(r
        .groups
        .iter()
        .all(|g| g.runs.iter().all(|r| r.rudp.is_none())));
    assert_eq!(r.rudp.len(), 5);
    let scale: Vec<_> = r.rudp.iter().filter(|g| g.case() == Case::Scale).collect();
    assert_eq!(scale.len(), 1);
    assert_eq!(scale[0].key.protocol_label(), "keel-udp");
    assert_eq!(r.loss.len(), 2, "loss cells of the UDP runs only");
    assert_eq!(r.loss.iter().map(|c| c.lost.len()).sum::<usize>(), 3);

    // The UDP part reads as it did without the rudp lines.
    let udp_only = report_of(&lines[..3]).markdown(&[]);
    let both = r.markdown(&[]);
    let udp_part = |md: &str| -> String {
        let start = md.find("## Summary").unwrap();
        let end = md.find("## keel-rudp and KCP").unwrap_or(md.len());
        md[start..end].to_string()
    };
    assert_eq!(udp_part(&udp_only), udp_part(&both));
    assert!(!udp_only.contains("keel-rudp"));
    assert!(both.contains(
        "(16 runs: 3 of the UDP echo matrix in 2 configurations (2 summarised, 0 excluded), \
         13 of the keel-rudp benchmark in 5 configurations (section *keel-rudp and KCP*))"
    ));
    assert!(!udp_part(&both).contains("| rudp"));
    assert!(!section(&both).contains("| 1024 |"));
}

#[test]
fn bulk_and_scale_tables() {
    let mut lines = matrix();
    for loss in [0, 10] {
        for proto in ["rudp", "kcp"] {
            for seed in 1..=2 {
                lines.push(bulk(proto, loss, seed, 400.0 + f64::from(loss) * 20.0));
            }
        }
    }
    for clients in [5000, 1000] {
        for proto in ["udp", "rudp", "kcp"] {
            let cpu = match proto {
                "udp" => 2.0,
                "rudp" => 6.0,
                _ => 9.0,
            } * clients as f64
                / 1000.0;
            lines.push(scale(proto, clients, 1, cpu));
        }
    }
    let r = report_of(&lines);
    let md = r.markdown(&[RUDP_BULK_FILE, RUDP_SCALE_FILE]);
    let s = section(&md);
    for text in [
        "### Bulk transfers",
        "All rows: payload 400 B · 8 clients · closed loop · 1 MiB transfers · window 1",
        "| loss each way | protocol | runs ok | completion p50 ms | completion p99 ms | completion max ms | goodput MiB/s | wire bytes / payload byte | resent |",
        "| 10 % | keel-rudp reliable-ordered | 2/2 | 51.0 | 600.0 | 900.0 | 2.00 | 1.200 | 1001.5 |",
        "![p99 transfer completion time against loss](rudp-bulk.svg)",
        "### Scale",
        "| connections | rate | protocol | runs ok | server CPU µs / message | server datagrams / message | RSS per connection KiB | lost messages | p99 ms |",
        "| 1000 | 20 Hz | keel-rudp reliable-ordered | 1/1 | 6.00 | – | 4.0 | 0 (max 0) | 60.0 |",
        "| 5000 | 20 Hz | keel-udp | 1/1 | 10.0 | – | 20.0 | 0 (max 0) | 60.0 |",
        "![Server CPU per message against connections](rudp-scale.svg)",
    ] {
        assert!(s.contains(text), "lacks {text:?} in\n{s}");
    }
    // Scale rows by connections, then keel-rudp, KCP, keel-udp.
    let at = |t: &str| s.find(t).unwrap();
    assert!(at("| 1000 | 20 Hz | keel-udp") < at("| 5000 | 20 Hz | keel-rudp"));
    assert!(at("| 1000 | 20 Hz | keel-rudp") < at("| 1000 | 20 Hz | KCP"));
    assert!(at("| 1000 | 20 Hz | KCP") < at("| 1000 | 20 Hz | keel-udp"));

    let b = charts::rudp_bulk_svg(&r).unwrap().unwrap();
    for text in [
        "Bulk: p99 transfer completion time against loss",
        "p99 completion time, ms (lower is better)",
        "1 MiB transfers",
        "keel-rudp reliable-ordered",
        "KCP fast",
        "dot: median over 2 runs (seeds); whiskers: min–max",
    ] {
        assert!(b.contains(text), "rudp-bulk.svg lacks {text:?}");
    }
    assert_eq!(filled_dots(&b).len(), 4);
    let c = charts::rudp_scale_svg(&r).unwrap().unwrap();
    for text in [
        "Scale: server CPU per message against connections",
        "server CPU per message, µs (lower is better)",
        "connections (clients)",
        "keel-udp",
        ">\n1k\n<",
        ">\n5k\n<",
        "dot: one run",
    ] {
        assert!(c.contains(text), "rudp-scale.svg lacks {text:?}");
    }
    assert_eq!(filled_dots(&c).len(), 6);
    for (name, svg) in [("bulk", &b), ("scale", &c)] {
        assert_legible(name, svg);
    }
}

/// The fill of each median dot of a line chart (its outline circles have
/// no fill).
fn filled_dots(svg: &str) -> Vec<String> {
    svg.match_indices("<circle ")
        .map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()])
        .filter(|e| !e.contains("fill=\"none\""))
        .map(|e| {
            let f = &e[e.find("fill=\"").unwrap() + 6..];
            f[..f.find('"').unwrap()].to_string()
        })
        .collect()
}

/// At most 960 px wide, and no text under 16 px.
#[track_caller]
fn assert_legible(name: &str, svg: &str) {
    let width: f64 = {
        let w = &svg[svg.find(" width=\"").unwrap() + 8..];
        w[..w.find('"').unwrap()].parse().unwrap()
    };
    assert!(width <= 960.0, "{name} is {width} px wide");
    let sizes: Vec<f64> = svg
        .match_indices("font-size=\"")
        .map(|(i, _)| {
            let s = &svg[i + 11..];
            s[..s.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    assert!(!sizes.is_empty());
    assert!(sizes.iter().all(|&s| s >= 16.0), "{name}: {sizes:?}");
}

#[test]
fn the_p99_chart_has_a_line_per_protocol_against_loss() {
    let mut lines = matrix();
    for seed in 1..=3 {
        lines.push(tick("rudp", 20, seed, 300.0));
        lines.push(tick("kcp", 20, seed, 400.0));
    }
    let svg = charts::rudp_p99_svg(&report_of(&lines)).unwrap().unwrap();
    for text in [
        "p99 message latency against loss",
        "loss on each direction, %",
        "p99 latency (echo delivered), ms (lower is better)",
        "dot: median over 3 runs (seeds); whiskers: min–max",
        "payload 400 B · 8 clients · 60 Hz · shared 1 thread · delay 25 ms, jitter 3 ms each way",
        "keel-rudp reliable-ordered",
        "KCP fast",
        // A tick at each loss level.
        ">\n0\n<",
        ">\n10\n<",
        ">\n20\n<",
    ] {
        assert!(svg.contains(text), "rudp-p99.svg lacks {text:?}");
    }
    assert!(!svg.contains("hollow"));
    // Three dots per protocol, in its colour; one line each.
    let dots = filled_dots(&svg);
    assert_eq!(dots.len(), 6);
    assert_eq!(dots.iter().filter(|f| *f == "#0072B2").count(), 3);
    assert_eq!(dots.iter().filter(|f| *f == "#E69F00").count(), 3);
    let polylines = svg.matches("<polyline").count();
    assert!(polylines >= 2, "{polylines} polylines");
    assert_legible("p99", &svg);
    // The median dot of KCP at 20 % sits above keel-rudp's (SVG y grows
    // downwards).
    let cy: Vec<f64> = svg
        .match_indices("<circle ")
        .map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()])
        .filter(|e| !e.contains("fill=\"none\""))
        .map(|e| {
            let c = &e[e.find("cy=\"").unwrap() + 4..];
            c[..c.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    let (rudp_20, kcp_20) = (cy[2], cy[5]);
    assert!(kcp_20 < rudp_20, "{cy:?}");
}

/// A fresh output directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("keel-report-rudp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `lines` as the one input of a report into the scratch directory
/// `name`/out.
fn write_to(name: &str, lines: &[Value]) -> Written {
    let dir = scratch(name);
    write_in(&dir, lines)
}

fn write_in(dir: &std::path::Path, lines: &[Value]) -> Written {
    let input = dir.join("r.jsonl");
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&input, text).unwrap();
    write(&ReportConfig {
        inputs: vec![input],
        out: dir.join("out"),
    })
    .unwrap()
}

#[test]
fn charts_are_written_when_there_is_data_and_stale_ones_removed() {
    let dir = scratch("stale");
    let out = dir.join("out");
    let names = |w: &Written| -> Vec<String> {
        w.files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    let mut all = matrix();
    all.push(bulk("rudp", 0, 1, 400.0));
    all.push(scale("rudp", 1000, 1, 6.0));
    all.push(udp(1));
    let w = write_in(&dir, &all);
    assert_eq!(
        names(&w),
        [
            MARKDOWN_FILE,
            THROUGHPUT_FILE,
            P99_FILE,
            LOSS_FILE,
            RUDP_P99_FILE,
            RUDP_BULK_FILE,
            RUDP_SCALE_FILE,
            RTT_CDF_FILE
        ]
    );
    let md = std::fs::read_to_string(out.join(MARKDOWN_FILE)).unwrap();
    assert!(md.contains("![p99 RTT by IO model](p99.svg)"));
    assert!(md.contains("](rudp-scale.svg)"));
    assert!(md.contains("## RTT distribution\n"));
    assert!(md.contains("![RTT distribution by configuration](rtt-cdf.svg)"));

    // The game-tick matrix alone: the other charts go.
    let w = write_in(&dir, &matrix());
    assert_eq!(names(&w), [MARKDOWN_FILE, RUDP_P99_FILE, RTT_CDF_FILE]);
    for gone in [
        THROUGHPUT_FILE,
        P99_FILE,
        LOSS_FILE,
        RUDP_BULK_FILE,
        RUDP_SCALE_FILE,
    ] {
        assert!(!out.join(gone).exists(), "stale {gone} left");
    }
    assert_eq!((w.runs, w.summarised, w.excluded), (12, 4, 0));

    // UDP alone: no rudp chart left.
    let w = write_in(&dir, &[udp(1)]);
    assert_eq!(
        names(&w),
        [
            MARKDOWN_FILE,
            THROUGHPUT_FILE,
            P99_FILE,
            LOSS_FILE,
            RTT_CDF_FILE
        ]
    );
    assert!(!out.join(RUDP_P99_FILE).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bulk case's variants are told apart by name: keel-rudp's bulk
/// channel, and a KCP window other than the default 128.
#[test]
fn bulk_channel_and_kcp_window_name_the_protocol() {
    let mut plain = bulk("rudp", 5, 1, 400.0);
    plain["bulk_channel"] = json!(false);
    let mut cc = bulk("rudp", 5, 1, 900.0);
    cc["bulk_channel"] = json!(true);
    let mut kcp128 = bulk("kcp", 5, 1, 800.0);
    kcp128["kcp_window"] = json!(128);
    let mut kcp1024 = bulk("kcp", 5, 1, 300.0);
    kcp1024["kcp_window"] = json!(1024);
    let r = report_of(&[plain, cc, kcp128, kcp1024]);
    let labels: Vec<String> = r.rudp.iter().map(|g| g.key.protocol_label()).collect();
    assert_eq!(
        labels,
        [
            "keel-rudp reliable-ordered",
            "keel-rudp reliable-ordered, bulk channel",
            "KCP fast",
            "KCP fast, window 1024",
        ]
    );
}

/// keel-rudp's ack delay is part of the configuration, named when it is
/// not the default 5 ms; a line from before `--ack-delay` (no
/// `ack_delay_ms`) ran at the default and keeps its old label.
#[test]
fn an_ack_delay_other_than_the_default_names_the_protocol() {
    let mut default = tick("rudp", 0, 1, 60.0);
    default["ack_delay_ms"] = json!(5);
    let mut held = tick("rudp", 0, 1, 55.0);
    held["ack_delay_ms"] = json!(51);
    let r = report_of(&[default.clone(), held]);
    let labels: Vec<String> = r.rudp.iter().map(|g| g.key.protocol_label()).collect();
    assert_eq!(
        labels,
        [
            "keel-rudp reliable-ordered",
            "keel-rudp reliable-ordered, ack delay 51 ms",
        ]
    );
    assert!(r.rudp.iter().all(|g| g.runs.len() == 1), "never pooled");
    let md = r.markdown(&[]);
    assert!(section(&md).contains("| 0 % | keel-rudp reliable-ordered, ack delay 51 ms | 1/1 |"));
    let svg = charts::rudp_p99_svg(&r).unwrap().unwrap();
    assert!(svg.contains("keel-rudp reliable-ordered, ack delay 51 ms"));

    let old = tick("rudp", 0, 2, 65.0);
    assert!(old.get("ack_delay_ms").is_none());
    let r = report_of(std::slice::from_ref(&old));
    assert_eq!(r.rudp[0].key.protocol_label(), "keel-rudp reliable-ordered");
    assert_eq!(r.rudp[0].key.ack_delay_ms, Some(5));
    let r = report_of(&[old, default]);
    assert_eq!(r.rudp.len(), 1, "an old line pools with the default");
    // Not a setting of KCP.
    let r = report_of(&[tick("kcp", 0, 1, 70.0)]);
    assert_eq!(r.rudp[0].key.ack_delay_ms, None);
    assert_eq!(r.rudp[0].key.protocol_label(), "KCP fast");
}

/// The scale table's *server datagrams / message* is the median over the
/// seeds that passed, – where the lines do not report it.
#[test]
fn the_scale_table_shows_server_datagrams_per_message() {
    let mut lines = Vec::new();
    for (seed, datagrams) in [(1, 3.25), (2, 1.5), (3, 2.0)] {
        let mut v = scale("rudp", 1000, seed, 6.0);
        v["server_datagrams_per_message"] = json!(datagrams);
        lines.push(v);
    }
    // A failed seed is left out of the median.
    let mut bad = scale("rudp", 1000, 4, 6.0);
    bad["server_datagrams_per_message"] = json!(40.0);
    lines.push(failed(bad, "udp_lost_messages 7"));
    let mut udp = scale("udp", 1000, 1, 2.0);
    udp["server_datagrams_per_message"] = json!(1.0);
    lines.push(udp);
    lines.push(scale("kcp", 1000, 1, 9.0));
    let r = report_of(&lines);
    let d = r.rudp[0].summary.datagrams_per_message.unwrap();
    assert_eq!((d.median, d.min, d.max), (2.0, 1.5, 3.25));
    let md = r.markdown(&[]);
    let s = section(&md);
    for text in [
        "| runs ok | server CPU µs / message | server datagrams / message | RSS per connection KiB |",
        "| 1000 | 20 Hz | keel-rudp reliable-ordered | 3/4 | 6.00 | 2.00 | 4.0 |",
        "| 1000 | 20 Hz | KCP fast | 1/1 | 9.00 | – | 4.0 |",
        "| 1000 | 20 Hz | keel-udp | 1/1 | 2.00 | 1.00 | 4.0 |",
        "*server datagrams / message* is `server_datagrams_per_message`",
    ] {
        assert!(s.contains(text), "lacks {text:?} in\n{s}");
    }
}

#[test]
fn a_case_field_files_runs_whatever_their_client_count() {
    // rudp-scale.sh with CONNS=10: "case": "scale" makes them scale runs
    // (without it 10 clients under the 100-client rule read as latency).
    let mut lines = Vec::new();
    for proto in ["udp", "rudp", "kcp"] {
        let mut v = scale(proto, 10, 1, 20.0);
        v["case"] = json!("scale");
        lines.push(v);
    }
    // rudp-matrix.sh with CLIENTS=200: "case": "latency" keeps them there.
    let mut many = tick("rudp", 5, 1, 100.0);
    many["clients"] = json!(200);
    many["case"] = json!("latency");
    lines.push(many);
    let r = report_of(&lines);
    let case_of = |proto: &str, clients: u64| {
        r.rudp
            .iter()
            .find(|g| g.key.protocol.as_deref() == Some(proto) && g.key.clients == Some(clients))
            .unwrap()
            .case()
    };
    for proto in ["udp", "rudp", "kcp"] {
        assert_eq!(case_of(proto, 10), Case::Scale, "{proto}");
    }
    assert_eq!(case_of("rudp", 200), Case::Latency);
    let md = r.markdown(&[]);
    let s = section(&md);
    let latency = &s[s.find("### Latency under loss").unwrap()..s.find("### Scale").unwrap()];
    assert!(
        !latency.contains("| 10 |") && latency.contains("200 clients"),
        "{s}"
    );
    assert!(
        s.contains("| 10 | 20 Hz | keel-rudp reliable-ordered | 1/1 | 20.0 |"),
        "{s}"
    );

    // Without the field the rule stands: 10 rudp clients are latency, and
    // an unknown value is no field.
    let mut plain = scale("rudp", 10, 1, 20.0);
    assert_eq!(report_of(&[plain.clone()]).rudp[0].case(), Case::Latency);
    plain["case"] = json!("other");
    assert_eq!(report_of(&[plain]).rudp[0].case(), Case::Latency);
}

/// Lines written before percentiles were clamped could say `rtt_p99_us`
/// 41909.5 with `rtt_max_us` 41900.5 (docs/performance/rudp.md, issue 24):
/// the tables never show a percentile above the maximum.
#[test]
fn no_percentile_in_a_table_is_above_the_maximum() {
    let mut lines = Vec::new();
    for seed in 1..=3 {
        let mut v = tick("rudp", 0, seed, 42.5);
        v["rtt_max_us"] = json!(41_900.5);
        v["rtt_p999_us"] = json!(43_000.0);
        lines.push(v);
    }
    let md = report_of(&lines).markdown(&[]);
    let s = section(&md);
    assert!(
        s.contains("| 0 % | keel-rudp reliable-ordered | 3/3 | 41.9 | 41.9 | 41.9 | 41.9 |"),
        "{s}"
    );
}

/// Issue 24: rudp-bulk.svg's linear axis squashed two of three lines onto
/// zero when KCP's transfers took seconds and keel-rudp's milliseconds.
/// Values that span more than 10x get a log axis that says so; the p99
/// chart of the matrix (within 10x) stays linear.
#[test]
fn lines_far_apart_get_a_log_axis() {
    let mut lines = Vec::new();
    for loss in [0, 10] {
        for seed in 1..=2 {
            lines.push(bulk("rudp", loss, seed, 40.0 + f64::from(loss)));
            lines.push(bulk("kcp", loss, seed, 60.0 + 2000.0 * f64::from(loss)));
        }
    }
    let svg = charts::rudp_bulk_svg(&report_of(&lines)).unwrap().unwrap();
    assert!(
        svg.contains("p99 completion time, ms, log scale (lower is better)"),
        "{svg}"
    );
    // Decades on the axis, so keel-rudp's 40-50 ms are not at the bottom
    // of a 20 s scale.
    for tick in [">\n100\n<", ">\n10000\n<"] {
        assert!(svg.contains(tick), "lacks tick {tick:?}");
    }
    assert_legible("bulk", &svg);
    let linear = charts::rudp_p99_svg(&report_of(&matrix()))
        .unwrap()
        .unwrap();
    assert!(!linear.contains("log scale"));
}

/// keel-udp with `--dont-fragment` is its own configuration, in the scale
/// table and in the UDP matrix; lines without the field (older ones) and
/// with it false pool as before.
#[test]
fn dont_fragment_udp_lines_are_a_configuration_of_their_own() {
    let mut df = scale("udp", 1000, 1, 2.0);
    df["dont_fragment"] = json!(true);
    let mut plain = scale("udp", 1000, 2, 3.0);
    plain["dont_fragment"] = json!(false);
    let old = scale("udp", 1000, 3, 3.0);
    let r = report_of(&[df, plain, old]);
    let mut labels: Vec<_> = r
        .rudp
        .iter()
        .map(|g| (g.key.protocol_label(), g.runs.len()))
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        [
            ("keel-udp".to_string(), 2),
            ("keel-udp, Don't Fragment".to_string(), 1)
        ]
    );
    // A rudp line's dont_fragment (keel-rudp's own default) changes nothing.
    let mut rudp_df = scale("rudp", 1000, 1, 5.0);
    rudp_df["dont_fragment"] = json!(true);
    let r = report_of(&[rudp_df, scale("rudp", 1000, 2, 5.0)]);
    assert_eq!(r.rudp.len(), 1);

    // The closed-loop matrix: udp-df beside udp.
    let mut u = udp(1);
    u["dont_fragment"] = json!(true);
    let r = report_of(&[udp(1), u]);
    let mut protocols: Vec<_> = r
        .groups
        .iter()
        .map(|g| g.key.protocol.clone().unwrap())
        .collect();
    protocols.sort();
    assert_eq!(protocols, ["udp", "udp-df"]);
}
