//! Arbitrary command lines against the flag parser (in-process, no run):
//! it never panics, every rejection names what it rejects, and everything
//! it accepts is inside the documented ranges.

use keel_bench::flags::{
    parse, AddressFamily, Command, FLAGS, MAX_IN_FLIGHT_BYTES, MAX_PAYLOAD_IPV4, MAX_PAYLOAD_IPV6,
    MIN_PAYLOAD,
};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestRunner};

/// One argument: a known flag (alone or `--flag=value`), a value that is
/// sometimes valid, an arbitrary string, or a subcommand.
fn arg() -> impl Strategy<Value = String> {
    let names: Vec<&'static str> = FLAGS.iter().map(|f| f.name).collect();
    let values = select(vec![
        "0",
        "1",
        "2",
        "4",
        "16",
        "64",
        "1024",
        "1025",
        "65507",
        "65508",
        "65527",
        "65528",
        "0.25",
        "0.001",
        "3600",
        "3601",
        "86400",
        "1e3",
        ".5",
        "nan",
        "inf",
        "-1",
        "+1",
        "",
        "udp",
        "tcp",
        "ipv4",
        "ipv6",
        "shared",
        "sharded",
        "owned",
        "127.0.0.1:7000",
        "[::1]:7000",
        "127.0.0.1:0",
        "dir",
        "--",
        "-h",
    ]);
    prop_oneof![
        4 => select(names.clone()).prop_map(|n| format!("--{n}")),
        3 => values.clone().prop_map(str::to_string),
        2 => (select(names), values).prop_map(|(n, v)| format!("--{n}={v}")),
        1 => "\\PC{0,12}",
        1 => select(vec!["serve", "report", "-x", "--bogus"]).prop_map(str::to_string),
    ]
}

#[test]
fn the_parser_never_panics_names_what_it_rejects_and_accepts_only_valid_runs() {
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    let counts = std::cell::Cell::new((0u32, 0u32));
    runner
        .run(&proptest::collection::vec(arg(), 0..8), |args| {
            let (a, r) = counts.get();
            match parse(args.iter().map(String::as_str)) {
                Err(e) => {
                    counts.set((a, r + 1));
                    prop_assert!(!e.flag.is_empty() && !e.message.is_empty(), "{e:?}");
                    prop_assert_eq!(e.to_string(), format!("{}: {}", e.flag, e.message));
                    // The error names an argument of the command line (a
                    // flag, `--flag` of `--flag=value`, a stray value, a
                    // short flag of a cluster), a known flag (one that is
                    // required, or contradicted), or a cross-check.
                    let f = e.flag.as_str();
                    let named = args
                        .iter()
                        .any(|a| a == f || a.split('=').next() == Some(f))
                        || FLAGS.iter().any(|spec| f == format!("--{}", spec.name))
                        // A short flag is '-' and one character, which may
                        // take several bytes (e.g. `-🩠`).
                        || (f.chars().count() == 2
                            && f.starts_with('-')
                            && args
                                .iter()
                                .any(|a| a.starts_with('-') && a.contains(&f[1..])))
                        || f == "--clients x --window x --payload"
                        || f == "FILES"
                        || f == "SHELL"
                        || f == "arguments"
                        || (f.contains("empty argument") && args.iter().any(String::is_empty));
                    prop_assert!(named, "{args:?}: {e}");
                }
                Ok(Command::Run(cfg)) => {
                    counts.set((a + 1, r));
                    let max = match cfg.address_family {
                        AddressFamily::Ipv4 => MAX_PAYLOAD_IPV4,
                        AddressFamily::Ipv6 => MAX_PAYLOAD_IPV6,
                    };
                    prop_assert!((MIN_PAYLOAD..=max).contains(&cfg.payload), "{cfg:?}");
                    prop_assert!((1..=1024).contains(&cfg.clients), "{cfg:?}");
                    prop_assert!((1..=1024).contains(&cfg.window), "{cfg:?}");
                    prop_assert!((1..=64).contains(&cfg.io_threads), "{cfg:?}");
                    prop_assert!((1..=64).contains(&cfg.server_lanes), "{cfg:?}");
                    prop_assert!((1..=1024).contains(&cfg.batch), "{cfg:?}");
                    prop_assert!(cfg.work <= 10_000_000, "{cfg:?}");
                    prop_assert!(cfg.seconds.is_finite() && cfg.seconds > 0.0, "{cfg:?}");
                    prop_assert!(cfg.seconds <= 3600.0, "{cfg:?}");
                    prop_assert!(cfg.warmup.is_finite() && cfg.warmup >= 0.0, "{cfg:?}");
                    prop_assert!(cfg.warmup <= 3600.0, "{cfg:?}");
                    let in_flight = u64::from(cfg.clients) * u64::from(cfg.window) * cfg.payload;
                    prop_assert!(in_flight <= MAX_IN_FLIGHT_BYTES, "{cfg:?}");
                    if let Some(addr) = cfg.connect {
                        prop_assert_eq!(AddressFamily::of(&addr), cfg.address_family);
                        prop_assert!(addr.port() != 0);
                        prop_assert_eq!(cfg.work, 0);
                        prop_assert_eq!(cfg.server_lanes, 1);
                        prop_assert_eq!(cfg.udp_server_receive_buffer, None);
                    }
                    if let Some(t) = cfg.loss_timeout_ms {
                        prop_assert!((1..=3_600_000).contains(&t), "{cfg:?}");
                    }
                }
                Ok(Command::Relay(cfg)) => {
                    counts.set((a + 1, r));
                    prop_assert!(args.iter().any(|a| a == "relay"));
                    prop_assert!(cfg.upstream.port() != 0);
                    prop_assert!((1..=65_536).contains(&cfg.max_flows), "{cfg:?}");
                }
                Ok(Command::Serve(cfg)) => {
                    counts.set((a + 1, r));
                    prop_assert!(args.iter().any(|a| a == "serve"));
                    if let Some(s) = cfg.seconds {
                        prop_assert!(s.is_finite() && s > 0.0 && s <= 86_400.0, "{cfg:?}");
                    }
                    prop_assert!((1..=64).contains(&cfg.io_threads), "{cfg:?}");
                }
                Ok(Command::Report(cfg)) => {
                    counts.set((a + 1, r));
                    prop_assert!(!cfg.inputs.is_empty() && !cfg.out.as_os_str().is_empty());
                }
                Ok(Command::Help { .. }) => {
                    counts.set((a + 1, r));
                    // --help, or -h alone or in a cluster of short flags.
                    prop_assert!(args.iter().any(|a| a == "--help"
                        || (a.starts_with('-') && !a.starts_with("--") && a.contains('h'))));
                }
                Ok(Command::Version) => {
                    counts.set((a + 1, r));
                    // --version, or -V alone or in a cluster of short flags.
                    prop_assert!(args.iter().any(|a| a == "--version"
                        || (a.starts_with('-') && !a.starts_with("--") && a.contains('V'))));
                }
                Ok(other @ (Command::Compare(_) | Command::Completions(_))) => {
                    prop_assert!(
                        args.first()
                            .is_some_and(|a| a == "compare" || a == "completions"),
                        "{args:?}: {other:?}"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
    let (accepted, rejected) = counts.get();
    // The generator reaches both sides of the parser.
    assert!(
        accepted > 50 && rejected > 500,
        "{accepted} accepted, {rejected} rejected"
    );
}
