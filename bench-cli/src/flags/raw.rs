//! The syntax pass: arguments to [`RawArgs`] (subcommand, flags in order,
//! positionals). It knows flag names and which take a value, nothing about
//! values: that is the job of `validate`, the next pass.

use std::ffi::OsString;

use super::error::FlagError;
use super::table::{find_flag, FlagSpec, Subcommand};

/// One flag occurrence as written, before validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFlag {
    /// Long name without `--` (always a [`FLAGS`](super::table::FLAGS) entry).
    pub name: &'static str,
    /// The value; `None` for a switch.
    pub value: Option<String>,
}

/// How much help: `-h` the short, `--help` the long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelpLength {
    /// `-h`: usage and one line per flag.
    Short,
    /// `--help`: every flag with its default and what it accepts.
    Long,
}

/// The command line split into subcommand, flags and positionals; only
/// syntax has been checked (known flag names, values present and UTF-8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawArgs {
    /// Subcommand (first argument `serve` or `report`; otherwise a run).
    pub subcommand: Subcommand,
    /// `--help` (long) or `-h` (short) was given.
    pub help: Option<HelpLength>,
    /// `--version` or `-V` was given.
    pub version: bool,
    /// Flags in command line order (switches have no value).
    pub flags: Vec<RawFlag>,
    /// Other arguments (input files of `report`).
    pub positionals: Vec<String>,
}

fn missing_value(flag: &str, spec: &FlagSpec) -> FlagError {
    FlagError::new(
        format!("--{flag}"),
        format!("missing value (expected {})", spec.accepted),
    )
}

fn utf8(flag: &str, value: OsString) -> Result<String, FlagError> {
    value.into_string().map_err(|v| {
        FlagError::new(
            flag,
            format!("value is not valid UTF-8: {:?}", v.to_string_lossy()),
        )
    })
}

/// Splits the arguments (without the program name) into [`RawArgs`].
/// Pure: reads nothing but `args`.
pub fn parse_raw<I>(args: I) -> Result<RawArgs, FlagError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    enum Tok {
        Long(String),
        Short(char),
        Value(OsString),
    }
    let mut parser = lexopt::Parser::from_args(args);
    let mut raw = RawArgs::default();
    let mut first = true;
    loop {
        let tok = match parser.next() {
            Ok(None) => break,
            Ok(Some(lexopt::Arg::Long(name))) => Tok::Long(name.to_owned()),
            Ok(Some(lexopt::Arg::Short(c))) => Tok::Short(c),
            Ok(Some(lexopt::Arg::Value(v))) => Tok::Value(v),
            Err(e) => return Err(FlagError::new("arguments", e.to_string())),
        };
        match tok {
            Tok::Short('h') => {
                raw.help.get_or_insert(HelpLength::Short);
            }
            Tok::Short('V') => raw.version = true,
            Tok::Short(c) => {
                return Err(FlagError::new(
                    format!("-{c}"),
                    "unknown flag (keel-bench has only long --flags, -h and -V; see --help)",
                ))
            }
            Tok::Long(name) => {
                let Some(spec) = find_flag(&name) else {
                    return Err(FlagError::new(
                        format!("--{name}"),
                        "unknown flag (see --help for the flags keel-bench accepts)",
                    ));
                };
                let flag = format!("--{}", spec.name);
                if spec.is_switch() {
                    if let Some(v) = parser.optional_value() {
                        return Err(FlagError::new(
                            flag,
                            format!("takes no value, got {:?}", v.to_string_lossy()),
                        ));
                    }
                    if spec.name == "help" {
                        raw.help = Some(HelpLength::Long);
                    } else if spec.name == "version" {
                        raw.version = true;
                    } else {
                        raw.flags.push(RawFlag {
                            name: spec.name,
                            value: None,
                        });
                    }
                } else {
                    let value = parser.value().map_err(|_| missing_value(spec.name, spec))?;
                    let value = utf8(&flag, value)?;
                    if value.starts_with("--") && value.len() > 2 {
                        return Err(missing_value(spec.name, spec));
                    }
                    raw.flags.push(RawFlag {
                        name: spec.name,
                        value: Some(value),
                    });
                }
            }
            Tok::Value(v) => {
                let v = utf8("argument", v)?;
                match v.as_str() {
                    "serve" if first => raw.subcommand = Subcommand::Serve,
                    "report" if first => raw.subcommand = Subcommand::Report,
                    "compare" if first => raw.subcommand = Subcommand::Compare,
                    "completions" if first => raw.subcommand = Subcommand::Completions,
                    "relay" if first => raw.subcommand = Subcommand::Relay,
                    _ => raw.positionals.push(v),
                }
            }
        }
        first = false;
    }
    Ok(raw)
}
