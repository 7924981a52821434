//! The command line in and out, no measurement: flag defaults, ranges and
//! rejections ([`flags`], arbitrary command lines in [`proptest_flags`]),
//! bad input to the built binary ([`bad_input`]), exit codes and the JSON
//! line ([`exit_codes`]), `--format` ([`format`]) and the contract's fields in
//! order ([`json_fields`]). One test binary (one link instead of six).

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod exit_codes;
mod flags;
mod format;
mod json_fields;
mod proptest_flags;
