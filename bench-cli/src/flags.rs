//! Command line: parsed with lexopt into [`RawArgs`] (pure syntax, no side
//! effects), then validated into one [`Command`].
//!
//! ```text
//! keel-bench [RUN FLAGS]                      one loopback run, one JSON line
//! keel-bench --connect ADDR:PORT [RUN FLAGS]  clients only, against `serve`
//! keel-bench serve --bind ADDR:PORT [SERVE FLAGS]
//! keel-bench report FILES... --out DIR
//! keel-bench compare BASELINE.jsonl CANDIDATE.jsonl
//! keel-bench completions bash|zsh|fish
//! keel-bench relay --bind ADDR:PORT --upstream ADDR:PORT [RELAY FLAGS]
//! keel-bench -h | --help | -V | --version
//! ```
//!
//! The run flags, their defaults and ranges are those of arknet's loopback
//! benchmark (UDP part), plus keel's additions; [`FLAGS`] is the single table
//! that drives validation scope and `--help`. Rules:
//!
//! * every flag takes exactly one value (`--flag V` or `--flag=V`), except
//!   the switches `--sockperf`, `--encrypt`, `--bulk-channel`, `--version`/`-V` and
//!   `--help`/`-h`;
//! * numbers follow one grammar ([`number`]), the same as in keel-udp's
//!   link conditioner specs: integers are whole tokens of ASCII digits (no
//!   sign, not even `+`, no spaces, no trailing junk, no underscores or
//!   suffixes); durations are digits with an optional fraction (`1`,
//!   `0.25`, `.5`): no sign, exponent or unit, no `inf`/`nan`, nothing that
//!   overflows to infinity;
//! * a value that starts with `--` is taken as a forgotten value
//!   (`--clients --window 4` reports `--clients: missing value`);
//! * a flag given twice is an error (never "last wins"), so a script that
//!   appends an override cannot silently run something else than it reads;
//! * unknown flags, flags of another subcommand and stray arguments are
//!   errors, never ignored.
//!
//! Every error is a [`FlagError`] naming the flag and what it accepts.
//!
//! Where things live: [`config`] (what a command line asks for: the
//! configurations, choices, defaults and limits), [`table`] (the flag
//! table), [`raw`] (the syntax pass), [`validate`](mod@validate) (values and
//! cross-checks), [`values`] and [`number`] (one parser per kind of value),
//! [`help`] (the `--help` text), [`error`]. Submodules never use this
//! module's own items, only each other's; everything public is re-exported
//! here.

pub mod config;
pub mod error;
pub mod help;
pub mod number;
pub mod raw;
pub mod table;
pub mod validate;
pub mod values;

use std::ffi::OsString;

pub use config::*;
pub use error::FlagError;
pub use help::{help_for, help_text, usage, HELP_WIDTH};
pub use number::{is_plain_decimal, parse_seconds, parse_u32, parse_uint};
pub use raw::{parse_raw, HelpLength, RawArgs, RawFlag};
pub use table::{find_flag, FlagSpec, Subcommand, FLAGS, IDLE_TIMEOUT_ACCEPTED, IMPAIR_ACCEPTED};
pub use validate::validate;
pub use values::parse_impair;

/// Parses and validates the arguments (without the program name).
pub fn parse<I>(args: I) -> Result<Command, FlagError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    validate(parse_raw(args)?)
}

/// The subcommand the arguments name (`serve` or `report` first), read
/// without parsing the rest, so that a rejected command line is answered
/// with the right usage.
pub fn requested_subcommand<I>(args: I) -> Subcommand
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    match args.into_iter().next().map(Into::into) {
        Some(a) if a == "serve" => Subcommand::Serve,
        Some(a) if a == "report" => Subcommand::Report,
        Some(a) if a == "compare" => Subcommand::Compare,
        Some(a) if a == "completions" => Subcommand::Completions,
        Some(a) if a == "relay" => Subcommand::Relay,
        _ => Subcommand::Run,
    }
}

/// The `--format` the arguments ask for, read from their syntax alone, so
/// that a command line rejected for another flag is still reported in the
/// format it asked for; [`OutputFormat::Auto`] when there is none (or it is
/// itself the bad flag).
pub fn requested_format<I>(args: I) -> OutputFormat
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let Ok(raw) = parse_raw(args) else {
        return OutputFormat::Auto;
    };
    raw.flags
        .iter()
        .find(|f| f.name == "format")
        .and_then(|f| values::parse_format(f.value.as_deref()?).ok())
        .unwrap_or_default()
}
