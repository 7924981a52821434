//! keel-bench binary (placeholder until the command line lands).

fn main() {}
