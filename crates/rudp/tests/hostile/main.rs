//! keel-rudp against hostile peers, one test binary (one link instead of
//! five): tokens, sealing and spoofed hellos ([`security`]), admission
//! limits ([`admission`]), CPU per crafted packet ([`hostile_cpu`]), the
//! send budget ([`send_budget`]), and a handler's panic closing its lane
//! only ([`panic`]). What a peer makes us hold in memory is
//! `hostile_memory.rs`, alone in its binary because it reads the process's
//! resident memory.

#[path = "../common/mod.rs"]
mod common;

mod admission;
mod hostile_cpu;
mod panic;
mod security;
mod send_budget;
