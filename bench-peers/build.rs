//! Compiles KCP's C implementation (ikcp/ikcp.c, from the crates.io
//! package kcp-sys 0.1.0: ikcp/README.md) and our shim for the `ikcp`
//! peer.

fn main() {
    println!("cargo:rerun-if-changed=ikcp/ikcp.c");
    println!("cargo:rerun-if-changed=ikcp/ikcp.h");
    println!("cargo:rerun-if-changed=ikcp/shim.c");
    cc::Build::new()
        .include("ikcp")
        .file("ikcp/ikcp.c")
        .file("ikcp/shim.c")
        .opt_level(2)
        .warnings(false)
        .compile("ikcp");
}
