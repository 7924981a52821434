//! [`FlagError`]: what every flag check returns when it rejects a value.

use std::fmt;

/// A rejected command line: which flag, and what was wrong with it.
///
/// Displays as `FLAG: MESSAGE`, e.g.
/// `--clients: expected an integer in 1..=1024, got "0"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagError {
    /// The flag as written on the command line (`--clients`), or the
    /// offending argument for stray positionals, or the combination
    /// (`--clients x --window x --payload`) for cross-checks.
    pub flag: String,
    /// What is accepted, and what was given.
    pub message: String,
}

impl FlagError {
    /// An error about `flag` (as written, e.g. `--clients`).
    pub(crate) fn new(flag: impl Into<String>, message: impl Into<String>) -> Self {
        FlagError {
            flag: flag.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}

impl std::error::Error for FlagError {}
