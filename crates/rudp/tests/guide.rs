//! The guide's Rust blocks run as doctests (`keel_rudp::Guide`); this makes
//! sure none of them is switched off with `ignore`, `no_run` or the like,
//! and that none is written in a fence rustdoc would not test.

#[test]
fn every_rust_block_of_the_guide_is_compiled_and_run() {
    let guide = include_str!("../../../docs/rudp-guide.md");
    let mut rust_blocks = 0;
    let mut in_block = false;
    for (n, line) in guide.lines().enumerate() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if in_block {
            in_block = false;
            continue;
        }
        in_block = true;
        let lang = info.trim();
        if lang.starts_with("rust") || lang.is_empty() {
            assert_eq!(
                lang,
                "rust",
                "docs/rudp-guide.md line {}: a Rust block must be a plain ```rust fence \
                 (compiled and run by the doctests), not {lang:?}",
                n + 1
            );
            rust_blocks += 1;
        }
    }
    assert!(!in_block, "docs/rudp-guide.md: an unclosed code fence");
    assert!(
        rust_blocks >= 4,
        "only {rust_blocks} Rust blocks in the guide"
    );
}
