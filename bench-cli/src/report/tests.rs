//! Unit tests of the report on synthetic JSON lines.

use serde_json::{json, Value};

use super::stats::Spread;
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

/// The value of each `name="…"` attribute in `svg`, in order.
fn attrs<'a>(svg: &'a str, name: &str) -> Vec<&'a str> {
    let pat = format!(" {name}=\"");
    svg.match_indices(&pat)
        .map(|(i, _)| {
            let rest = &svg[i + pat.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

/// The canvas width of `svg`, in px.
fn svg_width(svg: &str) -> f64 {
    attrs(svg, "width")[0].parse().unwrap()
}

/// The elements `<tag …/>` of `svg`.
fn elements<'a>(svg: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag} ");
    svg.match_indices(&open)
        .map(|(i, _)| {
            let rest = &svg[i..];
            &rest[..rest.find('>').unwrap() + 1]
        })
        .collect()
}

/// Asserts that `svg` fits a page and its text stays legible there: at
/// most 1200 px wide, and no text under 14 px once the whole chart is
/// scaled down to 900 px (it is not scaled up when narrower).
#[track_caller]
fn assert_legible_on_a_page(name: &str, svg: &str) {
    let width = svg_width(svg);
    assert!(width <= 1200.0, "{name} is {width} px wide");
    let scale = (900.0 / width).min(1.0);
    let sizes: Vec<f64> = attrs(svg, "font-size")
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(!sizes.is_empty());
    for size in sizes {
        assert!(
            size * scale >= 14.0,
            "{name}: {size} px text is {} px on a 900 px page",
            size * scale
        );
    }
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
        "round trips per second (higher is better)",
        // The x axis: counts under their IO model.
        ">\n1\n<",
        ">\n4\n<",
        "shared",
        "threads, 1 context",
        "sharded",
        "contexts, 1 thread each",
        // The legend names what varies, the subtitle what does not.
        "window 1",
        "window 16",
        "udp/ipv4 · payload 1024 B · 16 clients · work 0 · batch 64 · 1 server lane",
        "101k",
    ] {
        assert!(t.contains(text), "throughput.svg lacks {text:?}");
    }
    // One bar per configuration that passed: the window 16 / shared 1
    // configuration failed, so 5 bars, plus the 2 legend swatches.
    let coloured = elements(&t, "rect")
        .iter()
        .filter(|e| e.contains("fill=\"#0072B2\"") || e.contains("fill=\"#E69F00\""))
        .count();
    assert_eq!(coloured, 5 + 2);

    let p = charts::p99_svg(&r).unwrap().unwrap();
    assert!(is_svg(&p));
    assert!(p.contains("p99 RTT, µs, log scale (lower is better)"));
    let dots = elements(&p, "circle")
        .iter()
        .filter(|e| !e.contains("fill=\"none\""))
        .count();
    assert_eq!(dots, 5, "one dot per configuration that passed");

    let l = charts::loss_svg(&r).unwrap().unwrap();
    assert!(is_svg(&l));
    for text in [
        "Lost UDP echoes by payload and window",
        "window (datagrams in flight per client)",
        "payload (bytes per datagram)",
        "1 of 18 runs lost echoes",
        "max 5 · 9 runs",
        "1 failed",
        "no loss",
        "pooled over IO model",
    ] {
        assert!(l.contains(text), "loss.svg lacks {text:?}");
    }
    for (name, svg) in [("throughput", &t), ("p99", &p), ("loss", &l)] {
        assert_legible_on_a_page(name, svg);
    }
}

#[test]
fn charts_stay_page_sized_with_many_configurations() {
    // 2 models × 6 counts × 4 lane counts × 2 windows = 96 configurations.
    let mut lines = Vec::new();
    for model in ["shared", "sharded"] {
        for threads in [1, 2, 3, 4, 8, 16] {
            for lanes in [1, 2, 3, 4] {
                for window in [1, 16] {
                    let mut v = line(model, threads, window, 123_456.0, 250.0);
                    v["server_io_lanes"] = json!(lanes);
                    lines.push(v);
                }
            }
        }
    }
    let r = report_of(&lines);
    assert_eq!(r.summarised().count(), 96);
    let t = charts::throughput_svg(&r).unwrap().unwrap();
    let p = charts::p99_svg(&r).unwrap().unwrap();
    for (name, svg) in [("throughput", &t), ("p99", &p)] {
        assert_legible_on_a_page(name, svg);
        // Short labels: the IO shape is never spelled out per position.
        assert!(!svg.contains("shared: 1 context"), "{name}");
        assert!(svg.contains("window 16, 4 server lanes"), "{name}");
        assert!(svg.contains(">\n16\n<"), "{name}");
    }

    // A wide loss grid: 12 windows.
    let lines: Vec<Value> = (0..12)
        .map(|i| failed(line("shared", 1, 1 << i, 0.0, 1.0), "lost", 1 << (2 * i)))
        .collect();
    let l = charts::loss_svg(&report_of(&lines)).unwrap().unwrap();
    assert_legible_on_a_page("loss", &l);
    assert!(l.contains(">\n2048\n<"));
}

#[test]
fn p99_is_on_a_log_axis_so_one_outlier_does_not_flatten_the_rest() {
    let r = report_of(&[
        line("shared", 1, 1, 100.0, 100.0),
        line("shared", 2, 1, 100.0, 200.0),
        line("shared", 4, 1, 100.0, 8000.0),
    ]);
    let p = charts::p99_svg(&r).unwrap().unwrap();
    let mut ys: Vec<f64> = elements(&p, "circle")
        .iter()
        .filter(|e| !e.contains("fill=\"none\""))
        .map(|e| attrs(e, "cy")[0].parse().unwrap())
        .collect();
    assert_eq!(ys.len(), 3);
    ys.sort_by(f64::total_cmp);
    let (y8000, y200, y100) = (ys[0], ys[1], ys[2]);
    // On a linear axis 100 → 200 µs would be 1.3 % of 100 → 8000 µs; on a
    // log axis it is 16 %.
    let share = (y100 - y200) / (y100 - y8000);
    assert!(share > 0.1, "100 and 200 µs are {share} of the span apart");
    for tick in ["100", "1000"] {
        assert!(
            p.contains(&format!(">\n{tick}\n<")),
            "p99.svg lacks tick {tick}"
        );
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

/// Issue 19: keel-bench now counts warm-up losses apart from
/// `udp_lost_messages` (among `warmup_errors`); the loss table adds them
/// back, and does not add them twice on an older line, whose
/// `udp_lost_messages` already held them.
#[test]
fn lost_echoes_are_both_phases_on_new_lines_and_not_doubled_on_old_ones() {
    let mut new = failed(
        line("shared", 1, 64, 0.0, 10.0),
        "warm-up failed: warmup_errors = 537 (udp_lost_warmup_messages = 537)",
        0,
    );
    new["udp_lost_warmup_messages"] = json!(537);
    new["warmup_errors"] = json!(537);
    let mut old = failed(
        line("shared", 1, 16, 0.0, 10.0),
        "udp_lost_messages = 540",
        540,
    );
    old["udp_lost_warmup_messages"] = json!(520);
    old["warmup_errors"] = json!(0);
    let r = report_of(&[new, old]);
    let lost: Vec<(u64, Vec<u64>)> = r.loss.iter().map(|c| (c.window, c.lost.clone())).collect();
    assert_eq!(lost, vec![(16, vec![540]), (64, vec![537])]);
}

/// Issue 24: udp-limits' runs (one IO shape, a payload × window grid) made
/// "by IO model" charts with one x position, "1", and every configuration a
/// colour over it. With one IO shape the configurations are the x axis:
/// grouped by payload, a position per window, one colour.
#[test]
fn one_io_shape_puts_the_configurations_on_the_x_axis() {
    let mut lines = Vec::new();
    for payload in [64, 1024, 8192] {
        for window in [1, 16, 64] {
            let mut v = line("shared", 1, window, 50_000.0 + window as f64, 30.0);
            v["payload_bytes"] = json!(payload);
            lines.push(v);
        }
    }
    let r = report_of(&lines);
    for (name, svg) in [
        ("throughput", charts::throughput_svg(&r).unwrap().unwrap()),
        ("p99", charts::p99_svg(&r).unwrap().unwrap()),
    ] {
        assert!(is_svg(&svg));
        assert!(svg.contains("by configuration"), "{name}");
        assert!(!svg.contains("by IO model"), "{name}");
        for text in [
            "payload 64 B",
            "payload 8192 B",
            ">\nwindow 1\n<",
            ">\nwindow 64\n<",
        ] {
            assert!(svg.contains(text), "{name} lacks {text:?}");
        }
        // The IO shape once, in the subtitle; not as a lone tick "1".
        assert!(svg.contains("shared: 1 context, 1 thread"), "{name}");
        assert!(!svg.contains(">\n1\n<"), "{name}");
        // One colour: no second palette colour anywhere.
        assert!(!svg.contains("#E69F00"), "{name}: a second colour");
        assert_legible_on_a_page(name, &svg);
    }
    let t = charts::throughput_svg(&r).unwrap().unwrap();
    let bars = elements(&t, "rect")
        .iter()
        .filter(|e| e.contains("fill=\"#0072B2\""))
        .count();
    assert_eq!(bars, 9, "a bar per configuration (one series: no legend)");
}
