//! No percentile above its row's maximum in the docs' tables (issue 24: the
//! bulk tables of docs/performance/rudp.md had 29 such cells, a histogram
//! bucket's upper edge reported as a percentile).
//!
//! Every Markdown table under `docs/` is read: a column whose header has a
//! word `p50`, `p99`, `p99.9`... (and no `/`: "p50 / p99" is two values in
//! one cell) is a percentile column; one whose header has the word `max`
//! (not inside `[min, max]`, a spread) is a maximum column. In each row,
//! each percentile is compared with the maximum column after it (else the
//! last one before it), both read in µs from the unit their header ends in
//! (`s`, `ms`, `µs`/`us`, or none: the same unit). A cell that is not a
//! number (`–`) is skipped; a cell like `12.3 (9.1-15.0)` is its first
//! number.

mod common;

use std::path::{Path, PathBuf};

use common::repo_root;

/// One cell whose percentile is above its row's maximum.
#[derive(Debug, PartialEq)]
struct Violation {
    line: usize,
    percentile: String,
    value: f64,
    max: f64,
}

/// The header cell's unit factor to µs: `Some(None)` without a unit.
fn unit_us(header: &str) -> Option<f64> {
    match header.split_whitespace().last()? {
        "s" => Some(1e6),
        "ms" => Some(1e3),
        "µs" | "us" => Some(1.0),
        _ => None,
    }
}

fn words(header: &str) -> impl Iterator<Item = &str> {
    header
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
}

fn is_percentile(header: &str) -> bool {
    !header.contains('/')
        && words(header).any(|w| {
            w.len() > 1
                && w.starts_with('p')
                && w[1..].chars().all(|c| c.is_ascii_digit() || c == '.')
                && w[1..].starts_with(|c: char| c.is_ascii_digit())
        })
}

fn is_max(header: &str) -> bool {
    !header.contains('[') && !header.contains('/') && words(header).any(|w| w == "max")
}

/// The first number of a cell (`1,234.5` is 1234.5), if it starts with one.
fn number(cell: &str) -> Option<f64> {
    let t = cell.trim().trim_matches('*');
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(t.len());
    t[..end].replace(',', "").parse().ok()
}

fn cells(line: &str) -> Vec<&str> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').map(str::trim).collect()
}

fn is_separator(line: &str) -> bool {
    let c = cells(line);
    !c.is_empty()
        && c.iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')))
}

/// The percentiles above their row's maximum in Markdown `text`; lines
/// are numbered from 1.
fn violations(text: &str) -> Vec<Violation> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        if !(lines[i].trim_start().starts_with('|') && is_separator(lines[i + 1])) {
            i += 1;
            continue;
        }
        let header = cells(lines[i]);
        let maxes: Vec<usize> = (0..header.len()).filter(|&c| is_max(header[c])).collect();
        let pairs: Vec<(usize, usize)> = (0..header.len())
            .filter(|&c| is_percentile(header[c]))
            .filter_map(|p| {
                let m = maxes
                    .iter()
                    .find(|&&m| m > p)
                    .or_else(|| maxes.iter().rev().find(|&&m| m < p))?;
                Some((p, *m))
            })
            .collect();
        i += 2;
        while i < lines.len() && lines[i].trim_start().starts_with('|') {
            let row = cells(lines[i]);
            for &(p, m) in &pairs {
                let (Some(pv), Some(mv)) = (
                    row.get(p).and_then(|c| number(c)),
                    row.get(m).and_then(|c| number(c)),
                ) else {
                    continue;
                };
                let (pu, mu) = (unit_us(header[p]), unit_us(header[m]));
                let (pv, mv) = match (pu, mu) {
                    (Some(a), Some(b)) => (pv * a, mv * b),
                    _ => (pv, mv),
                };
                // Rounding to the same printed digits never counts.
                if pv > mv * (1.0 + 1e-9) {
                    out.push(Violation {
                        line: i + 1,
                        percentile: header[p].to_string(),
                        value: pv,
                        max: mv,
                    });
                }
            }
            i += 1;
        }
    }
    out
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn no_percentile_in_the_docs_is_above_its_rows_max() {
    let docs = repo_root().join("docs");
    let mut files = Vec::new();
    markdown_files(&docs, &mut files);
    files.sort();
    assert!(files.len() > 5, "{files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for v in violations(&text) {
            bad.push(format!(
                "{}:{}: {} {} above max {} (µs)",
                f.strip_prefix(repo_root()).unwrap_or(f).display(),
                v.line,
                v.percentile,
                v.value,
                v.max
            ));
        }
    }
    assert!(bad.is_empty(), "{} cells:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn the_checker_finds_a_percentile_above_the_max() {
    // Rows of the old docs/performance/rudp.md bulk table (a p99 of
    // 41909.5 above a max of 41900.5), with a good row, a `–` and a
    // table whose max is a spread's.
    let text = "\
text

| loss each way | protocol | runs ok | transfers | completion p50 ms | p99 ms | max ms | goodput MB/s |
| --- | --- | --- | --- | --- | --- | --- | --- |
| 0 % | keel-rudp | 3/3 | 792 | 56.9 | 62.2 | 63.9 | 18.41 |
| 20 % | keel-rudp bulk | 2/3 | 2 | 41909.5 | 41909.5 | 41900.5 | 0.02 |
| 20 % | KCP | 3/3 | 29 | – | 2010.1 | 2009.5 | 0.68 |

| model | round trips/s median [min, max] | p99 µs | max RTT s |
| --- | --- | --- | --- |
| shared | 100 [90, 110] | 900 | 0.001 |
| sharded | 100 [90, 110] | 1100 | 0.001 |
";
    let v = violations(text);
    let got: Vec<(usize, &str)> = v.iter().map(|v| (v.line, v.percentile.as_str())).collect();
    assert_eq!(
        got,
        [
            (6, "completion p50 ms"),
            (6, "p99 ms"),
            (7, "p99 ms"),
            (12, "p99 µs")
        ]
    );
    assert_eq!(v[3].value, 1100.0);
    assert_eq!(v[3].max, 1000.0);
    assert_eq!(number("12.3 (9.1-15.0)"), Some(12.3));
    assert_eq!(number("13,818 (13,156-14,976)"), Some(13818.0));
    assert_eq!(number("–"), None);
}
