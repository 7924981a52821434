//! Real runs of the built binary and of its echo path on loopback: whole
//! runs ([`run`]), bulk transfers ([`bulk`]), the open loop
//! ([`open_loop`]), keel-rudp and KCP ([`rudp`]), `serve` against one-off
//! peers and floods ([`serve`]), kernel faults between namespaces
//! ([`faults`]), and datagrams that are not messages
//! ([`proptest_datagrams`]). One test binary (one link instead of seven).
//! `--impair` runs stay in `impair.rs`, alone, because they go one at a
//! time.

#[path = "../common/mod.rs"]
mod common;

mod bulk;
mod faults;
mod open_loop;
mod proptest_datagrams;
mod rudp;
mod run;
mod serve;
