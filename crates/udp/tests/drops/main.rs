//! Where datagrams wait and where they are dropped, each drop counted, one
//! test binary (one link instead of four): the inbox bound
//! ([`backpressure`]), the send queue ([`send_queue`]), the kernel's
//! receive buffer ([`kernel_drops`]), and what a stop discards
//! ([`shutdown`]). The tests that need a network namespace run again in
//! their own (`common::in_netns`), one test per child process.

#[path = "../common/mod.rs"]
mod common;

mod backpressure;
mod kernel_drops;
mod send_queue;
mod shutdown;
