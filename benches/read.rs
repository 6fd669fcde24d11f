//! Read-cost benchmarks (issue 7); filled in by the next commit.
fn main() {}
