//! The scripts and the report end to end: scripts/matrix.sh
//! ([`matrix_e2e`]), `keel-bench report` ([`report_cli`]),
//! scripts/udp-limits.sh ([`udp_limits`]), the rudp scripts
//! ([`rudp_scripts`]) and the conventions every script follows
//! ([`every_script`]). One test binary (one link
//! instead of three); each test's files are in its own
//! `common::scratch` directory.

#[path = "../common/mod.rs"]
mod common;

mod every_script;
mod matrix_e2e;
mod report_cli;
mod rudp_scripts;
mod udp_limits;
