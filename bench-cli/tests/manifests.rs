//! The workspace's manifests, as crates.io and `cargo doc --open` read
//! them (`cargo metadata`): every library crate carries what a published
//! crate needs, nothing carries the placeholder repository URL, the two
//! crates not meant for crates.io say so, and the default members (what
//! `cargo doc --open` picks its first crate from, by name) are libraries,
//! the first of them by name keel-rudp, the user's entry point.

mod common;

use std::process::Command;

use serde_json::Value;

use common::repo_root;

const LIBRARIES: [&str; 6] = [
    "keel-reactor",
    "keel-impair",
    "keel-udp",
    "keel-rudp-proto",
    "keel-rudp",
    "keel-rudp-ffi",
];
const UNPUBLISHED: [&str; 2] = ["keel-bench", "keel-testkit"];

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo_root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text<'a>(p: &'a Value, k: &str) -> &'a str {
    p[k].as_str()
        .unwrap_or_else(|| panic!("{}: no {k}", p["name"]))
}

#[test]
fn library_crates_are_ready_for_crates_io() {
    let m = metadata();
    let packages = m["packages"].as_array().unwrap();
    let by_name = |n: &str| {
        packages
            .iter()
            .find(|p| p["name"] == n)
            .unwrap_or_else(|| panic!("no package {n}"))
    };
    for name in LIBRARIES {
        let p = by_name(name);
        assert!(p["publish"].is_null(), "{name} is publishable");
        assert!(text(p, "description").len() > 20);
        assert_eq!(text(p, "license"), "MIT");
        assert!(!text(p, "rust_version").is_empty());
        assert_eq!(text(p, "documentation"), format!("https://docs.rs/{name}"));
        let readme = std::path::Path::new(text(p, "manifest_path"))
            .parent()
            .unwrap()
            .join(text(p, "readme"));
        let readme_text = std::fs::read_to_string(&readme)
            .unwrap_or_else(|e| panic!("{name}: {}: {e}", readme.display()));
        assert!(readme_text.starts_with(&format!("# {name}\n")), "{name}");
        let keywords = p["keywords"].as_array().unwrap();
        assert!((1..=5).contains(&keywords.len()), "{name}: {keywords:?}");
        for k in keywords {
            let k = k.as_str().unwrap();
            assert!(
                k.len() <= 20
                    && k.starts_with(|c: char| c.is_ascii_alphabetic())
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "{name}: keyword {k:?} is not one crates.io takes"
            );
        }
        let categories = p["categories"].as_array().unwrap();
        assert!((1..=5).contains(&categories.len()), "{name}");
    }
    for name in UNPUBLISHED {
        assert_eq!(by_name(name)["publish"], serde_json::json!([]), "{name}");
    }
    for p in packages {
        let repo = p["repository"].as_str().unwrap_or("");
        assert!(!repo.contains("example.invalid"), "{}: {repo}", p["name"]);
    }
}

#[test]
fn cargo_doc_open_lands_on_keel_rudp() {
    let m = metadata();
    let name_of = |id: &Value| -> String {
        let p = m["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| &p["id"] == id)
            .unwrap();
        p["name"].as_str().unwrap().to_string()
    };
    let mut defaults: Vec<_> = m["workspace_default_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(name_of)
        .collect();
    defaults.sort();
    // cargo doc --open opens the first root crate by name (cargo sorts its
    // root units, whatever the order of default-members): keel-rudp's page
    // (`BROWSER=echo cargo doc --open` prints .../keel_rudp/index.html). It
    // opened keel-impair with every library a default member.
    assert_eq!(defaults[0], "keel-rudp", "{defaults:?}");
    assert!(
        !defaults.contains(&"keel-bench".to_string()),
        "{defaults:?}"
    );
    for lib in ["keel-rudp", "keel-rudp-proto", "keel-rudp-ffi", "keel-udp"] {
        assert!(
            defaults.contains(&lib.to_string()),
            "{lib} not in {defaults:?}"
        );
    }
    // Every member is still in the workspace (cargo test --workspace).
    assert_eq!(m["workspace_members"].as_array().unwrap().len(), 8);
}
