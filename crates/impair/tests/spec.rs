//! The textual form and validation of [`Impairment`]: the documented
//! shape parses and round-trips through `Display`, and every rejected
//! value gives an error that names its key and what the key accepts.
//! (Moved from keel-udp's conditioner tests with the type.)

use std::time::Duration;

use keel_impair::Impairment;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn parses_the_documented_shape_and_round_trips() {
    let imp: Impairment = "loss=0.05,delay=20ms,jitter=5ms,dup=0.01,reorder=0.1,seed=7"
        .parse()
        .unwrap();
    assert_eq!(
        imp,
        Impairment {
            loss: 0.05,
            delay: ms(20),
            jitter: ms(5),
            duplicate: 0.01,
            reorder: 0.1,
            seed: 7,
            ..Impairment::default()
        }
    );
    assert_eq!(imp.to_string().parse::<Impairment>().unwrap(), imp);
    let odd: Impairment =
        "delay=1.5ms,jitter=1500ns,reorder=50%,reorder-delay=2s,limit=3,limit-bytes=9"
            .parse()
            .unwrap();
    assert_eq!(odd.delay, Duration::from_micros(1500));
    assert_eq!(odd.jitter, Duration::from_nanos(1500));
    assert_eq!(odd.reorder, 0.5);
    assert_eq!(odd.to_string().parse::<Impairment>().unwrap(), odd);
    assert_eq!("off".parse::<Impairment>().unwrap(), Impairment::default());
    assert!(Impairment::default().is_off());
    assert_eq!(Impairment::default().to_string(), "off");
    assert!("delay=0".parse::<Impairment>().unwrap().is_off());
    assert_eq!(
        "delay=.5us".parse::<Impairment>().unwrap().delay,
        Duration::from_nanos(500)
    );
}

#[test]
fn errors_name_the_key_and_what_it_accepts() {
    let cases = [
        ("", "impairment", "KEY=VALUE"),
        ("loss", "impairment", "KEY=VALUE"),
        ("loss=0.1,", "impairment", "KEY=VALUE"),
        ("lost=0.1", "impairment", "unknown key \"lost\""),
        ("loss=1.5", "loss", "probability"),
        ("loss=101%", "loss", "percentage"),
        ("loss=-0.1", "loss", "probability"),
        ("loss=nan", "loss", "probability"),
        ("loss=1e-3", "loss", "probability"),
        ("dup=", "dup", "probability"),
        ("delay=20", "delay", "20ms"),
        ("delay=20 ms", "delay", "unit"),
        ("delay=-1ms", "delay", "unit"),
        ("delay=3601s", "delay", "3600s"),
        ("delay=1e999ms", "delay", "unit"),
        ("delay=5ms,jitter=6ms", "jitter", "at most delay (5ms)"),
        ("reorder=0.1,reorder-delay=0", "reorder-delay", "positive"),
        ("seed=-1", "seed", "unsigned integer"),
        ("seed=18446744073709551616", "seed", "unsigned integer"),
        ("limit=0", "limit", "1 to 1000000"),
        ("limit-bytes=x", "limit-bytes", "bytes"),
        ("loss=0.1,loss=0.2", "loss", "more than once"),
    ];
    for (text, key, needle) in cases {
        let e = text.parse::<Impairment>().unwrap_err();
        assert_eq!(e.key, key, "{text:?}: {e}");
        assert!(e.to_string().contains(needle), "{text:?}: {e}");
        assert!(e.to_string().starts_with(&format!("{key}: ")), "{e}");
    }
    let bad = Impairment {
        duplicate: f64::NAN,
        ..Impairment::default()
    };
    assert_eq!(bad.validate().unwrap_err().key, "dup");
}

/// The example of the brief and of keel-bench's help: the keys not named
/// keep their defaults.
#[test]
fn a_short_spec_keeps_the_defaults_of_the_keys_it_does_not_name() {
    let imp: Impairment = "loss=5%,delay=25ms".parse().unwrap();
    assert_eq!(
        imp,
        Impairment {
            loss: 0.05,
            delay: ms(25),
            ..Impairment::default()
        }
    );
    assert_eq!(imp.reorder_delay, keel_impair::DEFAULT_REORDER_DELAY);
    assert_eq!(imp.limit, keel_impair::DEFAULT_IMPAIRMENT_LIMIT);
    assert_eq!(imp.seed, 0);
    assert_eq!(
        imp.to_string(),
        "loss=0.05,delay=25ms,jitter=0,dup=0,reorder=0,reorder-delay=10ms,seed=0,limit=4096,limit-bytes=16777216"
    );
}

/// The numbers of the textual form are plain decimals: digits with an
/// optional fraction, nothing else (keel-bench holds its flags to the same
/// grammar, in its own tests).
#[test]
fn numbers_are_plain_decimals() {
    for ok in ["0", "1", "0.25", "1.", ".5", "007", "3.000"] {
        assert!(
            format!("delay={ok}ms").parse::<Impairment>().is_ok(),
            "{ok}"
        );
        assert!(format!("loss={ok}%").parse::<Impairment>().is_ok(), "{ok}");
    }
    for bad in [
        "", ".", "+1", "-1", "1..2", "1.2.3", "e5", "1e", "2.5e1", "1E-3", "inf", "nan", " 1",
        "1 ", "0x10", "1_0", "1,5",
    ] {
        assert!(
            format!("delay={bad}ms").parse::<Impairment>().is_err(),
            "{bad}"
        );
        assert!(
            format!("loss={bad}%").parse::<Impairment>().is_err(),
            "{bad}"
        );
    }
}
