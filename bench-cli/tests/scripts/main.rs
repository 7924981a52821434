//! The scripts and the report end to end: scripts/matrix.sh
//! ([`matrix_e2e`]), `keel-bench report` ([`report_cli`]) and
//! scripts/udp-limits.sh ([`udp_limits`]). One test binary (one link
//! instead of three); each test's files are in its own
//! `common::scratch` directory.

#[path = "../common/mod.rs"]
mod common;

mod matrix_e2e;
mod report_cli;
mod udp_limits;
