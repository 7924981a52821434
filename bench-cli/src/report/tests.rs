//! Unit tests of the report on synthetic JSON lines.

use serde_json::{json, Value};

use super::*;

/// A passing run line with the given settings and numbers.
fn line(io_model: &str, threads: u64, window: u64, rate: f64, p99: f64) -> Value {
    json!({
        "schema_version": 1, "backend": "keel", "protocol": "udp",
        "address_family": "ipv4", "payload_bytes": 1024, "clients": 16,
        "window": window, "io_model": io_model, "handler_work": 0,
        "io_contexts": if io_model == "sharded" { threads } else { 1 },
        "io_threads": threads, "server_io_lanes": 1, "batch": 64,
        "requested_seconds": 1.0, "warmup_seconds": 0.25,
        "roundtrips_per_second": rate, "payload_mib_per_second": rate / 512.0,
        "rtt_p50_us": p99 / 2.0, "rtt_p99_us": p99, "rtt_p999_us": p99 * 2.0,
        "cpu_percent": 95.0, "udp_lost_messages": 0, "ok": true, "error": null,
    })
}

fn failed(mut v: Value, error: &str, lost: u64) -> Value {
    v["ok"] = json!(false);
    v["error"] = json!(error);
    v["udp_lost_messages"] = json!(lost);
    v
}

fn report_of(lines: &[Value]) -> Report {
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    Report::from_texts([("r.jsonl", text.as_str())])
}

#[test]
fn spread_median_min_max() {
    assert_eq!(Spread::of([]), None);
    let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
    let s = Spread::of([4.0, 1.0, 3.0, 2.0]).unwrap();
    assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
    assert_eq!(Spread::of([7.0]).unwrap().median, 7.0);
}

#[test]
fn groups_by_configuration_and_summarises_each() {
    let r = report_of(&[
        line("shared", 1, 1, 100.0, 10.0),
        line("shared", 4, 1, 80.0, 30.0),
        line("shared", 1, 1, 120.0, 50.0),
        line("shared", 4, 1, 90.0, 20.0),
        line("shared", 1, 1, 110.0, 20.0),
        line("shared", 4, 1, 70.0, 40.0),
    ]);
    assert_eq!(r.groups.len(), 2);
    assert_eq!(r.run_count(), 6);
    let (g, s) = r.summarised().next().unwrap();
    assert_eq!(g.key.io_threads, Some(1));
    assert_eq!(s.runs, 3);
    assert_eq!(
        s.throughput,
        Spread {
            median: 110.0,
            min: 100.0,
            max: 120.0
        }
    );
    // The median of the per-run p99s (10, 50, 20), not a pooled value.
    assert_eq!(s.p99_us.unwrap().median, 20.0);
    assert_eq!(s.p50_us.unwrap().median, 10.0);
    assert_eq!(s.p999_us.unwrap().median, 40.0);
    assert_eq!(s.cpu_percent.unwrap().median, 95.0);
    assert!(r.excluded().next().is_none());
    assert!(r.unreadable.is_empty());
}

#[test]
fn every_key_field_separates_configurations() {
    let base = line("shared", 1, 1, 100.0, 10.0);
    let changes: [(&str, Value); 10] = [
        ("protocol", json!("udp6")),
        ("address_family", json!("ipv6")),
        ("payload_bytes", json!(64)),
        ("clients", json!(1)),
        ("window", json!(16)),
        ("io_model", json!("sharded")),
        ("io_threads", json!(2)),
        ("server_io_lanes", json!(2)),
        ("handler_work", json!(10_000)),
        ("batch", json!(1)),
    ];
    for (name, value) in changes {
        let mut other = base.clone();
        other[name] = value;
        let r = report_of(&[base.clone(), other]);
        assert_eq!(r.groups.len(), 2, "{name} must be part of the key");
    }
    // Settings outside the key do not split a configuration, but are flagged.
    let mut longer = base.clone();
    longer["requested_seconds"] = json!(5.0);
    longer["cpu_percent"] = json!(50.0);
    let r = report_of(&[base.clone(), longer]);
    assert_eq!(r.groups.len(), 1);
    assert_eq!(r.groups[0].mixed, vec!["requested_seconds: 1.0, 5.0"]);
    assert!(r.markdown(&[]).contains("requested_seconds: 1.0, 5.0"));
}

#[test]
fn a_failed_repetition_excludes_the_configuration_with_its_errors() {
    let mut bad = failed(
        line("shared", 1, 16, 0.0, 10.0),
        "udp_lost_messages = 767",
        767,
    );
    bad["repetition"] = json!(2);
    bad["command"] = json!("target/release/keel-bench --window 16");
    let r = report_of(&[
        line("shared", 1, 1, 100.0, 10.0),
        line("shared", 1, 16, 300.0, 10.0),
        bad,
        line("shared", 1, 16, 310.0, 10.0),
    ]);
    assert_eq!(r.groups.len(), 2);
    assert_eq!(r.summarised().count(), 1);
    let ex: Vec<_> = r.excluded().collect();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].key.window, Some(16));
    assert_eq!(ex[0].runs.len(), 3);
    let f: Vec<_> = ex[0].failed().collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].errors, vec!["udp_lost_messages = 767"]);
    assert_eq!(f[0].label(), "repetition 2 (r.jsonl:3)");

    let md = r.markdown(&[]);
    let summary = md.split("## Excluded").next().unwrap();
    assert!(!summary.contains("| 16 | shared"), "{md}");
    assert!(md.contains("## Excluded configurations"));
    assert!(md.contains("1 of 3 runs failed"));
    assert!(md.contains("repetition 2 (r.jsonl:3): udp_lost_messages = 767"));
    assert!(md.contains("`target/release/keel-bench --window 16`"));

    // The loss cell counts the failed run (loss is what fails it).
    let cell = r.loss.iter().find(|c| c.window == 16).unwrap();
    assert_eq!(cell.lost, vec![0, 767, 0]);
    assert_eq!((cell.median(), cell.max(), cell.failed_runs), (0.0, 767, 1));
}

#[test]
fn nulls_missing_fields_and_wrong_types_are_unknown_not_zero() {
    // A bad-arguments line: every configuration field null.
    let mut rejected = failed(
        line("shared", 1, 1, 0.0, 0.0),
        "--clients: expected 1..=1024",
        0,
    );
    for k in [
        "address_family",
        "payload_bytes",
        "clients",
        "window",
        "io_model",
        "io_threads",
        "server_io_lanes",
        "handler_work",
        "batch",
        "rtt_p99_us",
    ] {
        rejected[k] = Value::Null;
    }
    // matrix.sh says what it asked for: the failure lands in that config.
    rejected["requested"] = json!({"payload_bytes": 1024, "clients": 16, "window": 1,
        "io_model": "shared", "io_threads": 1, "server_io_lanes": 1, "handler_work": 0});
    let r = report_of(&[rejected.clone()]);
    let k = &r.groups[0].key;
    assert_eq!(
        (k.payload_bytes, k.clients, k.io_model.as_deref(), k.batch),
        (Some(1024), Some(16), Some("shared"), None)
    );
    assert!(r.groups[0].summary.is_none());

    // Without `requested`, the unknowns group together and print as "?".
    rejected.as_object_mut().unwrap().remove("requested");
    let r = report_of(&[rejected]);
    assert_eq!(r.groups[0].key.payload_bytes, None);
    assert!(r.markdown(&[]).contains("payload ? B, ? clients"));
    assert!(r.loss.is_empty(), "no payload or window: no loss cell");

    // A passing run missing its percentiles and CPU is summarised with "–".
    let mut sparse = line("shared", 1, 1, 100.0, 10.0);
    for k in ["rtt_p50_us", "rtt_p99_us", "rtt_p999_us", "cpu_percent"] {
        sparse.as_object_mut().unwrap().remove(k);
    }
    sparse["payload_mib_per_second"] = json!("fast");
    let r = report_of(&[sparse]);
    let (_, s) = r.summarised().next().unwrap();
    assert_eq!(
        (s.p99_us, s.cpu_percent, s.mib_per_second),
        (None, None, None)
    );
    assert!(r
        .markdown(&[])
        .contains("| 100 [100, 100] | – | – | – | – | – |"));

    // ok without a throughput, or no ok at all, is a failure.
    let mut no_rate = line("shared", 1, 1, 100.0, 10.0);
    no_rate["roundtrips_per_second"] = Value::Null;
    let mut no_ok = line("shared", 2, 1, 100.0, 10.0);
    no_ok.as_object_mut().unwrap().remove("ok");
    let mut silent = line("shared", 3, 1, 100.0, 10.0);
    silent["ok"] = json!(false);
    let r = report_of(&[no_rate, no_ok, silent]);
    let errors: Vec<_> = r.groups.iter().map(|g| g.runs[0].errors.join("")).collect();
    assert_eq!(
        errors,
        [
            "roundtrips_per_second missing or not a number",
            "ok missing or not a boolean",
            "ok is false (no error given)"
        ]
    );
    assert_eq!(r.summarised().count(), 0);
    assert!(r.markdown(&[]).contains("No configuration passed"));
}

#[test]
fn matrix_errors_fail_an_ok_run() {
    let mut v = line("shared", 1, 1, 100.0, 10.0);
    v["matrix_errors"] = json!(["payload_bytes: requested 64, got 1024"]);
    let r = report_of(&[v, line("shared", 1, 1, 100.0, 10.0)]);
    assert_eq!(r.summarised().count(), 0);
    assert_eq!(
        r.groups[0].runs[0].errors,
        ["matrix.sh: payload_bytes: requested 64, got 1024"]
    );
}

#[test]
fn unreadable_lines_are_listed_and_blank_lines_skipped() {
    let good = line("shared", 1, 1, 100.0, 10.0).to_string();
    let text = format!("{good}\n\n{{\"ok\": tru\n[1, 2]\n   \n{good}\n");
    let r = Report::from_texts([("a.jsonl", text.as_str())]);
    assert_eq!(r.run_count(), 2);
    assert_eq!(r.unreadable.len(), 2);
    assert_eq!(r.unreadable[0].source.line, 3);
    assert!(r.unreadable[0].reason.starts_with("not JSON"));
    assert_eq!(r.unreadable[1].source.to_string(), "a.jsonl:4");
    assert_eq!(
        r.unreadable[1].reason,
        "expected a JSON object, got an array"
    );
    let md = r.markdown(&[]);
    assert!(md.contains("## Unreadable lines"));
    assert!(md.contains("2 unreadable lines"));
}

#[test]
fn table_order_puts_shared_before_sharded_and_threads_ascending() {
    let r = report_of(&[
        line("sharded", 4, 1, 1.0, 1.0),
        line("shared", 4, 1, 1.0, 1.0),
        line("shared", 1, 1, 1.0, 1.0),
        line("shared", 2, 1, 1.0, 1.0),
    ]);
    let order: Vec<_> = r
        .groups
        .iter()
        .map(|g| (g.key.io_model.clone().unwrap(), g.key.io_threads.unwrap()))
        .collect();
    assert_eq!(
        order,
        [
            ("shared".to_string(), 1),
            ("shared".to_string(), 2),
            ("shared".to_string(), 4),
            ("sharded".to_string(), 4)
        ]
    );
}

#[test]
fn markdown_escapes_table_cells_and_code() {
    let mut v = line("sh|ared", 1, 1, 100.0, 10.0);
    v["command"] = json!("a `b` c");
    let bad = failed(v.clone(), "oops", 0);
    let r = report_of(&[line("sh|ared", 1, 1, 100.0, 10.0), bad]);
    let md = r.markdown(&[]);
    assert!(md.contains("`` a `b` c ``"), "{md}");
    let r = report_of(&[line("sh|ared", 1, 1, 100.0, 10.0)]);
    assert!(r.markdown(&[]).contains("sh\\|ared"));
}

/// True when `svg` looks like one complete SVG document.
fn is_svg(svg: &str) -> bool {
    svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>")
}

#[test]
fn charts_have_titles_units_and_labels() {
    let mut lines = Vec::new();
    for rep in 0..3 {
        for (model, threads) in [("shared", 1), ("shared", 4), ("sharded", 4)] {
            for window in [1, 16] {
                let rate = 100_000.0 + 1000.0 * f64::from(rep);
                lines.push(line(model, threads, window, rate, 40.0 + f64::from(rep)));
            }
        }
    }
    lines[1] = failed(lines[1].clone(), "udp_lost_messages = 5", 5);
    let r = report_of(&lines);
    let t = charts::throughput_svg(&r).unwrap().unwrap();
    assert!(is_svg(&t));
    for text in [
        "UDP round trips per second by IO model",
        "round trips per second",
        "shared: 1 context, 4 threads",
        "sharded: 4 contexts, 1 thread each",
        "window 1",
        "workload",
        "101k",
    ] {
        assert!(t.contains(text), "throughput.svg lacks {text:?}");
    }
    // The window 16 / shared 1 configuration failed: no bar, but its loss shows.
    let p = charts::p99_svg(&r).unwrap().unwrap();
    assert!(is_svg(&p));
    assert!(p.contains("p99 RTT, µs"));
    let l = charts::loss_svg(&r).unwrap().unwrap();
    assert!(is_svg(&l));
    for text in [
        "Lost UDP echoes by payload and window",
        "window (datagrams in flight per client)",
        "payload (bytes per datagram)",
        "1 of 18 runs lost echoes",
        "max 5 · 9 runs, 1 failed",
        "no loss",
        "pooled over IO model",
    ] {
        assert!(l.contains(text), "loss.svg lacks {text:?}");
    }
}

#[test]
fn charts_only_with_data() {
    let r = report_of(&[failed(line("shared", 1, 1, 0.0, 1.0), "x", 0)]);
    assert_eq!(charts::throughput_svg(&r).unwrap(), None);
    assert_eq!(charts::p99_svg(&r).unwrap(), None);
    let loss = charts::loss_svg(&r).unwrap().unwrap();
    assert!(loss.contains("no loss: no echo lost in any of the 1 runs"));
    assert_eq!(charts::loss_svg(&Report::default()).unwrap(), None);
}
