//! The guide's Rust blocks run as doctests (`keel_udp::Guide`); this makes
//! sure none of them is switched off with `ignore`, `no_run` or the like,
//! and that none is written in a fence rustdoc would not test.

#[test]
fn every_rust_block_of_the_guide_is_compiled_and_run() {
    keel_testkit::check_rust_fences("docs/guide.md", include_str!("../../../docs/guide.md"), 4);
}
