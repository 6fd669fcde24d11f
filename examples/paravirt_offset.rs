//! Measures paravirt mode's offset `C` once and prints where it came from and how long each step
//! took: `cargo run --release --example paravirt_offset [BRACKETS_PER_KIND]`.

use std::time::Instant;

fn main() {
    let per_kind = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(perfclock::paravirt::OPEN_BRACKETS_PER_KIND);
    let start = Instant::now();
    let (page, reader) = match perfclock::paravirt::find_page() {
        Ok(found) => found,
        Err(refusal) => return report(&refusal),
    };
    let found = start.elapsed();
    println!(
        "page: {} ({} vCPUs' entries equal), {:?}",
        page.layout(),
        page.vcpus_checked(),
        page.params()
    );
    println!("find_page: {found:?}");
    let start = Instant::now();
    match perfclock::paravirt::measure_offset(per_kind) {
        Ok(measured) => println!(
            "kernel log: C = {} ns, checked against {:?} in {:?}",
            measured.offset_ns,
            measured.intersection.map(|i| i.to_string()),
            start.elapsed()
        ),
        Err(refusal) => report(&refusal),
    }
    let start = Instant::now();
    match perfclock::paravirt::measure_from_brackets(&reader, per_kind) {
        Ok(measured) => println!(
            "brackets alone: C = {} +- {} ns ({:?}) in {:?}",
            measured.offset_ns,
            measured.bound_ns,
            measured.intersection.map(|i| i.to_string()),
            start.elapsed()
        ),
        Err(refusal) => report(&refusal),
    }
}

fn report(error: &dyn std::error::Error) {
    println!("refused: {}", perfclock::error_chain(error));
}
