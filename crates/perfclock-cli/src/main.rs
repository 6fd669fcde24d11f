//! The `perfclock` command.

fn main() {}
