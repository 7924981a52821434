//! Command-line contract: defaults, ranges and rejections of every flag.

use std::net::SocketAddr;

use std::time::Duration;

use keel_bench::flags::{
    help_text, parse, AddressFamily, Command, FlagError, FullPolicyChoice, IoModel, Protocol,
    RunConfig, ServeConfig, Subcommand, FLAGS,
};

fn run(args: &[&str]) -> Result<RunConfig, FlagError> {
    match parse(args.iter().copied())? {
        Command::Run(cfg) => Ok(cfg),
        other => panic!("expected a run, got {other:?}"),
    }
}

/// Asserts that `args` are rejected with an error naming `flag`, both in
/// the `flag` field and in the displayed message.
#[track_caller]
fn rejects(args: &[&str], flag: &str) -> FlagError {
    let err = parse(args.iter().copied()).expect_err(&format!("{args:?} must be rejected"));
    assert!(
        err.flag.contains(flag),
        "{args:?}: error names {:?}, expected {flag:?}: {err}",
        err.flag
    );
    assert!(err.to_string().contains(flag), "{err}");
    err
}

#[test]
fn defaults_equal_the_reference_table() {
    let cfg = run(&[]).unwrap();
    assert_eq!(cfg.protocol, Protocol::Udp);
    assert_eq!(cfg.address_family, AddressFamily::Ipv4);
    assert_eq!(cfg.payload, 1024);
    assert_eq!(cfg.clients, 1);
    assert_eq!(cfg.window, 1);
    assert_eq!(cfg.seconds, 1.0);
    assert_eq!(cfg.warmup, 0.25);
    assert_eq!(cfg.io_model, IoModel::Shared);
    assert_eq!(cfg.io_threads, 1);
    assert_eq!(cfg.work, 0);
    // keel additions
    assert_eq!(cfg.udp_server_receive_buffer, None);
    assert_eq!(cfg.server_lanes, 1);
    assert_eq!(cfg.batch, 64);
    assert_eq!(cfg.loss_timeout_ms, None);
    assert_eq!(cfg.drain, 2.0);
    assert_eq!(cfg.connect, None);
    assert_eq!(cfg, RunConfig::default());
    assert_eq!(cfg.io_contexts(), 1);
    assert_eq!(
        cfg.server_addr(),
        "127.0.0.1:0".parse::<SocketAddr>().unwrap()
    );
}

#[test]
fn every_run_flag_accepts_its_bounds() {
    let cfg = run(&[
        "--protocol",
        "udp",
        "--address-family",
        "ipv6",
        "--payload",
        "65527",
        "--clients",
        "2",
        "--window",
        "3",
        "--seconds",
        "3600",
        "--warmup",
        "0",
        "--io-model",
        "sharded",
        "--io-threads",
        "64",
        "--work",
        "10000000",
        "--udp-server-receive-buffer",
        "1073741824",
        "--server-lanes",
        "64",
        "--batch",
        "1024",
        "--loss-timeout",
        "3600000",
        "--drain",
        "3600",
    ])
    .unwrap();
    assert_eq!(cfg.address_family, AddressFamily::Ipv6);
    assert_eq!(cfg.payload, 65527);
    assert_eq!((cfg.clients, cfg.window), (2, 3));
    assert_eq!((cfg.seconds, cfg.warmup), (3600.0, 0.0));
    assert_eq!(cfg.io_model, IoModel::Sharded);
    assert_eq!(cfg.io_threads, 64);
    assert_eq!(cfg.io_contexts(), 64);
    assert_eq!(cfg.work, 10_000_000);
    assert_eq!(cfg.udp_server_receive_buffer, Some(1 << 30));
    assert_eq!(cfg.server_lanes, 64);
    assert_eq!(cfg.batch, 1024);
    assert_eq!(cfg.loss_timeout_ms, Some(3_600_000));
    assert_eq!(cfg.drain, 3600.0);
    assert_eq!(cfg.server_addr(), "[::1]:0".parse::<SocketAddr>().unwrap());

    let low = run(&[
        "--payload=16",
        "--clients=1024",
        "--window=1",
        "--seconds=0.001",
        "--warmup=3600",
        "--work=0",
        "--udp-server-receive-buffer=1",
        "--server-lanes=1",
        "--batch=1",
        "--loss-timeout=1",
        "--drain=0.001",
        "--io-threads=1",
    ])
    .unwrap();
    assert_eq!(low.payload, 16);
    assert_eq!(low.clients, 1024);
    assert_eq!(low.seconds, 0.001);
    assert_eq!(low.warmup, 3600.0);
    assert_eq!(low.loss_timeout_ms, Some(1));
    assert_eq!(low.drain, 0.001);
    assert_eq!(low.udp_server_receive_buffer, Some(1));
    // Leading zeros are still whole digit tokens; a fraction may stand alone.
    assert_eq!(run(&["--clients", "007"]).unwrap().clients, 7);
    assert_eq!(run(&["--seconds", "25."]).unwrap().seconds, 25.0);
    assert_eq!(run(&["--seconds", ".5"]).unwrap().seconds, 0.5);
    assert_eq!(run(&["--payload", "65507"]).unwrap().payload, 65507);
}

/// (flag, values that must be rejected) for every integer flag.
const INTEGER_FLAGS: &[(&str, &[&str])] = &[
    (
        "--payload",
        &["15", "0", "65528", "99999999999999999999999"],
    ),
    ("--clients", &["0", "1025"]),
    ("--window", &["0", "1025"]),
    ("--io-threads", &["0", "65"]),
    ("--work", &["10000001"]),
    ("--udp-server-receive-buffer", &["0", "1073741825"]),
    ("--server-lanes", &["0", "65"]),
    ("--batch", &["0", "1025"]),
    ("--loss-timeout", &["0", "3600001"]),
];

/// Malformed tokens every integer flag must reject.
const NOT_INTEGERS: &[&str] = &[
    "", "abc", "-1", "+1", " 1", "1 ", "1.0", "1e3", "0x10", "1_000", "12abc", "NaN", "inf",
    "-inf", "١",
];

#[test]
fn integer_flags_reject_out_of_range_and_malformed_tokens() {
    for (flag, out_of_range) in INTEGER_FLAGS {
        for value in out_of_range.iter().chain(NOT_INTEGERS) {
            let err = rejects(&[flag, value], flag);
            assert!(err.message.contains("expected an integer in"), "{err}");
            assert!(err.message.contains(&format!("{value:?}")), "{err}");
            // The same with the `--flag=value` form.
            let joined = format!("{flag}={value}");
            rejects(&[&joined], flag);
        }
    }
}

#[test]
fn the_error_message_names_the_range() {
    let err = rejects(&["--clients", "0"], "--clients");
    assert_eq!(
        err.to_string(),
        "--clients: expected an integer in 1..=1024, got \"0\""
    );
    let err = rejects(&["--payload", "10"], "--payload");
    assert!(err.message.contains("16..=65507"), "{err}");
    assert!(err.message.contains("65527"), "{err}");
}

#[test]
fn duration_flags_reject_non_finite_negative_and_out_of_range() {
    let common = [
        "nan",
        "NaN",
        "inf",
        "+inf",
        "-inf",
        "infinity",
        "-1",
        "-0.5",
        "+1",
        "abc",
        "",
        " 1",
        "1 ",
        "1s",
        "0x1p3",
        "1e999",
        "3600.0001",
        "1e4",
        // One number grammar for every flag: no exponents (keel-udp's
        // --impair numbers have none either).
        "2.5e1",
        "1e-3",
        "1E0",
    ];
    for value in common {
        for flag in ["--seconds", "--warmup", "--drain"] {
            let err = rejects(&[flag, value], flag);
            assert!(err.message.contains("finite number of seconds"), "{err}");
        }
    }
    // 0 is fine for the warm-up (skips it) but not for the measured phase.
    rejects(&["--seconds", "0"], "--seconds");
    rejects(&["--seconds", "0.0"], "--seconds");
    rejects(&["--seconds", "-0"], "--seconds");
    rejects(&["--drain", "0"], "--drain");
    assert_eq!(run(&["--warmup", "0"]).unwrap().warmup, 0.0);
    let err = rejects(&["--seconds", "NaN"], "--seconds");
    assert!(err.message.contains("0 < s <= 3600"), "{err}");
    let err = rejects(&["--warmup", "-1"], "--warmup");
    assert!(err.message.contains("0 <= s <= 3600"), "{err}");
}

#[test]
fn names_are_exact() {
    let err = rejects(&["--protocol", "tcp"], "--protocol");
    assert!(err.message.contains("udp"), "{err}");
    rejects(&["--protocol", "UDP"], "--protocol");
    rejects(&["--protocol", ""], "--protocol");
    let err = rejects(&["--address-family", "ipv5"], "--address-family");
    assert!(err.message.contains("ipv4 or ipv6"), "{err}");
    rejects(&["--address-family", "IPv4"], "--address-family");
    let err = rejects(&["--io-model", "owned"], "--io-model");
    assert!(
        err.message.contains("keel supports shared and sharded"),
        "{err}"
    );
    let err = rejects(&["--io-model", "pooled"], "--io-model");
    assert!(err.message.contains("shared or sharded"), "{err}");
}

#[test]
fn a_missing_value_names_the_flag() {
    for spec in FLAGS.iter().filter(|f| !f.is_switch()) {
        let flag = format!("--{}", spec.name);
        let args: Vec<&str> = match spec.name {
            "bind" | "sockperf" => vec!["serve", &flag],
            "out" => vec!["report", "a.json", &flag],
            _ => vec![&flag],
        };
        let err = rejects(&args, &flag);
        assert!(err.message.contains("missing value"), "{err}");
    }
    // A following flag is not taken as the value.
    let err = rejects(&["--clients", "--window", "4"], "--clients");
    assert!(err.message.contains("missing value"), "{err}");
}

#[test]
fn unknown_flags_and_stray_arguments_are_errors() {
    let err = rejects(&["--bogus", "1"], "--bogus");
    assert!(err.message.contains("unknown flag"), "{err}");
    rejects(&["--client", "1"], "--client");
    rejects(&["--Clients", "1"], "--Clients");
    rejects(&["-c", "1"], "-c");
    rejects(&["-5"], "-5");
    rejects(&["extra"], "extra");
    rejects(&["--clients", "2", "extra"], "extra");
    // Subcommands only come first.
    rejects(&["--clients", "2", "serve"], "serve");
    // Switches take no value.
    let err = rejects(
        &["serve", "--bind", "127.0.0.1:0", "--sockperf=yes"],
        "--sockperf",
    );
    assert!(err.message.contains("takes no value"), "{err}");
}

#[test]
fn repeating_a_flag_is_an_error() {
    let err = rejects(&["--clients", "2", "--clients", "3"], "--clients");
    assert!(err.message.contains("more than once"), "{err}");
    rejects(&["--seconds=1", "--seconds", "1"], "--seconds");
    rejects(
        &["serve", "--bind", "127.0.0.1:1", "--sockperf", "--sockperf"],
        "--sockperf",
    );
}

#[test]
fn payload_is_checked_against_the_family_after_both_are_known() {
    let err = rejects(&["--payload", "65520"], "--payload");
    assert!(
        err.message.contains("65507") && err.message.contains("ipv4"),
        "{err}"
    );
    // Same value is fine for IPv6, in either order.
    assert_eq!(
        run(&["--payload", "65520", "--address-family", "ipv6"])
            .unwrap()
            .payload,
        65520
    );
    assert_eq!(
        run(&["--address-family", "ipv6", "--payload", "65527"])
            .unwrap()
            .payload,
        65527
    );
    rejects(
        &["--address-family", "ipv6", "--payload", "65528"],
        "--payload",
    );
    rejects(
        &["--payload", "65508", "--address-family", "ipv4"],
        "--payload",
    );
}

#[test]
fn bytes_in_flight_are_capped_at_256_mib() {
    // 1024 x 256 x 1024 = 256 MiB exactly: allowed.
    let cfg = run(&["--clients", "1024", "--window", "256", "--payload", "1024"]).unwrap();
    assert_eq!(cfg.window, 256);
    for args in [
        ["--clients", "1024", "--window", "257", "--payload", "1024"],
        [
            "--clients",
            "1024",
            "--window",
            "1024",
            "--payload",
            "65507",
        ],
        ["--clients", "5", "--window", "820", "--payload", "65507"],
    ] {
        let err = parse(args).expect_err("over 256 MiB");
        for flag in ["--clients", "--window", "--payload"] {
            assert!(err.flag.contains(flag), "{err}");
        }
        assert!(err.message.contains("268435456"), "{err}");
    }
}

#[test]
fn connect_runs_clients_only() {
    let cfg = run(&["--connect", "10.0.0.2:7000", "--clients", "4"]).unwrap();
    assert_eq!(cfg.connect, Some("10.0.0.2:7000".parse().unwrap()));
    assert_eq!(cfg.server_addr(), cfg.connect.unwrap());
    let v6 = run(&["--connect", "[fd00::2]:7000", "--payload", "65527"]).unwrap();
    assert_eq!(v6.address_family, AddressFamily::Ipv6);
    assert!(run(&["--connect", "[::1]:7000", "--address-family", "ipv6"]).is_ok());

    rejects(
        &["--connect", "[::1]:7000", "--address-family", "ipv4"],
        "--address-family",
    );
    for bad in [
        "localhost:7000",
        "10.0.0.2",
        "10.0.0.2:0",
        "10.0.0.2:70000",
        "",
        "::1:7000",
    ] {
        rejects(&["--connect", bad], "--connect");
    }
    for server_side in ["--work", "--server-lanes", "--udp-server-receive-buffer"] {
        let err = rejects(
            &["--connect", "10.0.0.2:7000", server_side, "1"],
            server_side,
        );
        assert!(err.message.contains("serve"), "{err}");
    }
}

#[test]
fn serve_structure() {
    let Command::Serve(cfg) = parse(["serve", "--bind", "0.0.0.0:7000"]).unwrap() else {
        panic!("serve");
    };
    assert_eq!(cfg.bind, "0.0.0.0:7000".parse().unwrap());
    assert_eq!(cfg.io_model, IoModel::Shared);
    assert_eq!((cfg.io_threads, cfg.server_lanes, cfg.batch), (1, 1, 64));
    assert_eq!(cfg.seconds, None);
    assert!(!cfg.sockperf);
    assert_eq!(cfg.work, 0);

    let Command::Serve(cfg) = parse([
        "serve",
        "--bind=[::]:0",
        "--io-model",
        "sharded",
        "--io-threads",
        "4",
        "--server-lanes",
        "4",
        "--seconds",
        "86400",
        "--sockperf",
        "--work",
        "100",
        "--batch",
        "32",
        "--udp-server-receive-buffer",
        "8388608",
    ])
    .unwrap() else {
        panic!("serve");
    };
    assert_eq!(cfg.bind, "[::]:0".parse().unwrap());
    assert_eq!(cfg.io_model, IoModel::Sharded);
    assert_eq!((cfg.io_threads, cfg.server_lanes, cfg.batch), (4, 4, 32));
    assert_eq!(cfg.seconds, Some(86400.0));
    assert!(cfg.sockperf);
    assert_eq!(cfg.work, 100);
    assert_eq!(cfg.udp_server_receive_buffer, Some(8 << 20));

    rejects(&["serve"], "--bind");
    rejects(&["serve", "--bind", "nowhere"], "--bind");
    rejects(
        &["serve", "--bind", "0.0.0.0:1", "--seconds", "86401"],
        "--seconds",
    );
    rejects(
        &["serve", "--bind", "0.0.0.0:1", "--seconds", "inf"],
        "--seconds",
    );
    rejects(
        &["serve", "--bind", "0.0.0.0:1", "--server-lanes", "0"],
        "--server-lanes",
    );
    rejects(
        &["serve", "--bind", "0.0.0.0:1", "--io-model", "owned"],
        "--io-model",
    );
    rejects(&["serve", "--bind", "0.0.0.0:1", "stray"], "stray");
    // --connect together with serve is an error, as are other run-only flags.
    let err = rejects(
        &["serve", "--bind", "0.0.0.0:1", "--connect", "10.0.0.2:7000"],
        "--connect",
    );
    assert!(err.message.contains("serve"), "{err}");
    rejects(&["serve", "--connect", "10.0.0.2:7000"], "--connect");
    for flag in [
        "--payload",
        "--clients",
        "--window",
        "--warmup",
        "--protocol",
        "--loss-timeout",
    ] {
        rejects(&["serve", "--bind", "0.0.0.0:1", flag, "1"], flag);
    }
    // Serve-only flags are not run flags.
    rejects(&["--bind", "0.0.0.0:1"], "--bind");
    rejects(&["--sockperf"], "--sockperf");
}

fn serve(args: &[&str]) -> Result<ServeConfig, FlagError> {
    let mut all = vec!["serve", "--bind", "127.0.0.1:0"];
    all.extend_from_slice(args);
    match parse(all)? {
        Command::Serve(cfg) => Ok(cfg),
        other => panic!("expected serve, got {other:?}"),
    }
}

#[test]
fn serve_sessions_time_out_by_default_and_the_table_is_configurable() {
    // Eviction is on by default: a full table cannot lock a new peer out.
    let cfg = serve(&[]).unwrap();
    assert_eq!(cfg.idle_timeout, Some(Duration::from_secs(30)));
    assert_eq!(cfg.max_sessions, 65_536);
    assert_eq!(cfg.full_policy, FullPolicyChoice::EvictIdlest);
    assert_eq!(cfg.full_policy.as_str(), "evict-idlest");

    let cfg = serve(&[
        "--idle-timeout",
        "0.3",
        "--max-sessions",
        "4",
        "--full-policy",
        "refuse",
    ])
    .unwrap();
    assert_eq!(cfg.idle_timeout, Some(Duration::from_millis(300)));
    assert_eq!(cfg.max_sessions, 4);
    assert_eq!(cfg.full_policy, FullPolicyChoice::Refuse);
    assert_eq!(cfg.full_policy.as_str(), "refuse");

    assert_eq!(
        serve(&["--idle-timeout", "off"]).unwrap().idle_timeout,
        None
    );
    assert_eq!(
        serve(&["--idle-timeout=3600"]).unwrap().idle_timeout,
        Some(Duration::from_secs(3600))
    );
    assert_eq!(
        serve(&["--idle-timeout", "0.001"]).unwrap().idle_timeout,
        Some(Duration::from_millis(1))
    );
    assert_eq!(
        serve(&["--max-sessions", "16777216"]).unwrap().max_sessions,
        1 << 24
    );
    assert_eq!(
        serve(&["--full-policy", "evict-idlest"])
            .unwrap()
            .full_policy,
        FullPolicyChoice::EvictIdlest
    );
}

#[test]
fn serve_session_flags_reject_bad_values_naming_the_flag_and_what_is_accepted() {
    for bad in [
        "", "0", "0.0", "-0", "-1", "nan", "inf", "3600.5", "1e4", "OFF", "Off", "none", "30s",
        " 1", "1e999",
    ] {
        let err = serve(&["--idle-timeout", bad]).expect_err(bad);
        assert_eq!(err.flag, "--idle-timeout", "{err}");
        assert!(
            err.message.contains("off") && err.message.contains("0 < s <= 3600"),
            "{err}"
        );
        assert!(err.message.contains(&format!("{bad:?}")), "{err}");
    }
    // 0 is not a spelling of off: the error says what to write instead.
    let err = serve(&["--idle-timeout", "0"]).unwrap_err();
    assert!(err.message.contains("write off"), "{err}");

    for bad in ["0", "16777217", "-1", "+4", "4.0", "1e3", "", "many"] {
        let err = serve(&["--max-sessions", bad]).expect_err(bad);
        assert_eq!(
            err.to_string(),
            format!("--max-sessions: expected an integer in 1..=16777216, got {bad:?}")
        );
    }
    for bad in [
        "",
        "evict",
        "Refuse",
        "evict_idlest",
        "drop",
        "evict-oldest",
    ] {
        let err = serve(&["--full-policy", bad]).expect_err(bad);
        assert_eq!(
            err.to_string(),
            format!("--full-policy: expected refuse or evict-idlest, got {bad:?}")
        );
    }
    // They configure serve's table: a run (or its --connect clients) has none.
    for (flag, value) in [
        ("--idle-timeout", "1"),
        ("--max-sessions", "4"),
        ("--full-policy", "refuse"),
    ] {
        let err = rejects(&[flag, value], flag);
        assert!(err.message.contains("serve"), "{err}");
        rejects(&["--connect", "127.0.0.1:7000", flag, value], flag);
    }
}

#[test]
fn report_structure() {
    let Command::Report(cfg) = parse(["report", "a.json", "b.json", "--out", "outdir"]).unwrap()
    else {
        panic!("report");
    };
    assert_eq!(
        cfg.inputs,
        vec!["a.json".into(), "b.json".into()] as Vec<std::path::PathBuf>
    );
    assert_eq!(cfg.out, std::path::PathBuf::from("outdir"));
    // Files after `--` may look like flags.
    let Command::Report(cfg) = parse(["report", "--out", "o", "--", "--weird.json"]).unwrap()
    else {
        panic!("report");
    };
    assert_eq!(cfg.inputs, vec![std::path::PathBuf::from("--weird.json")]);

    rejects(&["report", "--out", "o"], "FILES");
    rejects(&["report", "a.json"], "--out");
    rejects(&["report", "a.json", "--out", ""], "--out");
    rejects(
        &["report", "a.json", "--out", "o", "--clients", "2"],
        "--clients",
    );
    rejects(&["--out", "o"], "--out");
}

#[test]
fn help_wins_and_lists_every_flag_with_default_range_and_exit_codes() {
    let help = |sub, long| Command::Help { sub, long };
    assert_eq!(parse(["--help"]).unwrap(), help(Subcommand::Run, true));
    assert_eq!(parse(["-h"]).unwrap(), help(Subcommand::Run, false));
    assert_eq!(
        parse(["--clients", "0", "--help"]).unwrap(),
        help(Subcommand::Run, true)
    );
    assert_eq!(
        parse(["serve", "--help"]).unwrap(),
        help(Subcommand::Serve, true)
    );
    assert_eq!(
        parse(["report", "-h"]).unwrap(),
        help(Subcommand::Report, false)
    );
    assert_eq!(
        parse(["compare", "--help"]).unwrap(),
        help(Subcommand::Compare, true)
    );
    assert_eq!(
        parse(["-h", "--help"]).unwrap(),
        help(Subcommand::Run, true)
    );
    assert_eq!(parse(["--version"]).unwrap(), Command::Version);
    assert_eq!(parse(["-V"]).unwrap(), Command::Version);
    assert_eq!(parse(["serve", "-V"]).unwrap(), Command::Version);
    rejects(&["--help=yes"], "--help");
    rejects(&["--version=1"], "--version");

    // Lines are wrapped at 100 columns: compare the words.
    let help = help_text().split_whitespace().collect::<Vec<_>>().join(" ");
    for line in help_text().lines() {
        assert!(line.chars().count() <= 100, "{line}");
    }
    for spec in FLAGS {
        assert!(help.contains(&format!("--{}", spec.name)), "{}", spec.name);
        let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains(&words(spec.accepted)), "{}", spec.name);
        assert!(
            help.contains(&words(&format!("default: {}", spec.default))) || spec.default.is_empty()
        );
    }
    for range in [
        "1..=1024",
        "16..=65507",
        "65527",
        "0 < s <= 3600",
        "0 <= s <= 3600",
        "0..=10000000",
        "1..=64",
    ] {
        assert!(help.contains(range), "{range}");
    }
    for code in ["0  ok", "1  the run failed", "2  bad arguments"] {
        assert!(help_text().contains(code), "{code}");
    }
}

/// Every number keel-bench reads is in one grammar: a value is a decimal
/// for `--seconds` exactly when the impairment parser (keel-impair) takes
/// it in an `--impair` spec (as a percentage and as a duration), so a user
/// who learns one knows both.
#[test]
fn seconds_and_impair_specs_share_one_number_grammar() {
    for value in [
        "1", "0.25", "1.", ".5", "007", "50", "2.5e1", "1e-3", "1E0", "+1", "-1", ".", "", "1..2",
        "inf", "nan", " 1", "1 ", "0x10", "1_0", "1,5", "1s",
    ] {
        let seconds = run(&["--seconds", value]).is_ok();
        let impair = run(&["--impair", &format!("loss={value}%")]).is_ok();
        assert_eq!(
            seconds, impair,
            "{value:?}: --seconds {seconds}, --impair loss={value}% {impair}"
        );
        let delay = run(&["--impair", &format!("delay={value}ms")]).is_ok();
        assert_eq!(
            seconds, delay,
            "{value:?}: --seconds {seconds}, --impair delay={value}ms {delay}"
        );
        assert_eq!(
            keel_bench::flags::is_plain_decimal(value),
            seconds,
            "{value:?}"
        );
    }
}

/// `--connect` to an IPv4-mapped IPv6 address is IPv4 on the wire: keel-udp
/// refuses more than the IPv4 limit there, so the flag check does too.
#[test]
fn payload_limit_follows_keel_udp_for_ipv4_mapped_peers() {
    let err = rejects(
        &["--connect", "[::ffff:10.0.0.2]:7000", "--payload", "65520"],
        "--payload",
    );
    assert!(err.message.contains("65507"), "{err}");
    assert_eq!(
        run(&["--connect", "[fd00::2]:7000", "--payload", "65520"])
            .unwrap()
            .payload,
        65520
    );
}
