//! Numbers on the command line: one grammar for every numeric flag.
//!
//! * An integer is a whole token of ASCII digits: no sign (not even `+`),
//!   no spaces, no trailing junk, no underscores, exponents or suffixes.
//! * A decimal (seconds) is digits with an optional fraction: `D+[.D*]` or
//!   `.D+` (`1`, `0.25`, `1.`, `.5`): no sign, exponent, unit, `inf` or
//!   `nan`.
//!
//! It is the grammar of the impairment specs too (keel-impair's textual
//! form, the numbers in `--impair loss=5%,delay=1.5ms`), so every number
//! keel-bench reads, in any flag, is written the same way; a test
//! (`tests/flags.rs`) holds the two together.
//! A value that is not in the grammar, or out of the flag's range, is a
//! [`FlagError`] that names the flag and its range.

use super::error::FlagError;

/// A whole-token unsigned integer in `min..=max`.
pub fn parse_uint(flag: &str, value: &str, min: u64, max: u64) -> Result<u64, FlagError> {
    let err = || {
        FlagError::new(
            format!("--{flag}"),
            format!("expected an integer in {min}..={max}, got {value:?}"),
        )
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    let n: u64 = value.parse().map_err(|_| err())?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(err())
    }
}

/// [`parse_uint`] for a `u32` flag.
pub fn parse_u32(flag: &str, value: &str, min: u32, max: u32) -> Result<u32, FlagError> {
    let n = parse_uint(flag, value, min.into(), max.into())?;
    Ok(u32::try_from(n).expect("range fits u32"))
}

/// True for a decimal in the grammar above: `D+[.D*]` or `.D+`. The
/// impairment specs' parser (keel-impair) keeps its own copy private;
/// `tests/flags.rs` holds the two to one grammar.
pub fn is_plain_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    digits(int) && digits(frac) && !(int.is_empty() && frac.is_empty())
}

/// A finite, unsigned decimal number of seconds `s` with `0 < s <= max`,
/// or `0 <= s <= max` when `zero_ok`.
pub fn parse_seconds(flag: &str, value: &str, zero_ok: bool, max: f64) -> Result<f64, FlagError> {
    let op = if zero_ok { "<=" } else { "<" };
    let err = || {
        FlagError::new(
            format!("--{flag}"),
            format!(
                "expected a finite number of seconds in 0 {op} s <= {max} \
                 (digits with an optional fraction, such as 1 or 0.25), got {value:?}"
            ),
        )
    };
    if !is_plain_decimal(value) {
        return Err(err());
    }
    let s: f64 = value.parse().map_err(|_| err())?;
    let low_ok = if zero_ok { s >= 0.0 } else { s > 0.0 };
    if s.is_finite() && low_ok && s <= max {
        Ok(s)
    } else {
        Err(err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_decimals() {
        for ok in ["0", "1", "0.25", "1.", ".5", "007", "3600.000"] {
            assert!(is_plain_decimal(ok), "{ok}");
        }
        for bad in [
            "", ".", "+1", "-1", "1..2", "1.2.3", "e5", "1e", "1e+", "2.5e1", "1E-3", "inf", "nan",
            " 1", "1 ", "0x10", "1_0", "1s", "1,5",
        ] {
            assert!(!is_plain_decimal(bad), "{bad}");
        }
    }
}
