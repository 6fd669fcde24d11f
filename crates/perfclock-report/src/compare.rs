//! Two recordings made comparable: the same JIT code of two processes carries names that differ
//! only where perf or the runtime put a process's numbers in them, and [`comparable`] takes
//! those out, so a differential flame graph and `go tool pprof -diff_base` match a function of
//! BASE with the same function of NEW.
//!
//! - perf names a JIT frame's image after the process and the code load: `jitted-PID-N.so`
//!   (`perf inject --jit`) or `/tmp/perf-PID.map`. Every JIT frame's image becomes [`JIT_DSO`],
//!   which also renames a JIT frame perf could not name (`[jitted-PID-N.so]` in the flame graph).
//! - A runtime may put an address in a name: the JVM's hidden classes
//!   (`Foo$$Lambda$14/0x0000000800c03000.run()`). In a JIT frame's function, `0x` and the hex
//!   digits after it (six at least) become `0x…`.
//!
//! Native code and the kernel keep their names: their images and symbols are the same files'.

use crate::samples::{FrameKind, Sample};

/// The image every JIT frame is given.
pub const JIT_DSO: &str = "[jit]";

/// The fewest hex digits after `0x` that make an address.
const MIN_ADDRESS_DIGITS: usize = 6;

/// `samples` with the process-specific parts of their JIT frames' names taken out (see the
/// [module docs](self)).
pub fn comparable(mut samples: Vec<Sample>) -> Vec<Sample> {
    for frame in samples.iter_mut().flat_map(|sample| &mut sample.frames) {
        if frame.kind == FrameKind::Jit {
            JIT_DSO.clone_into(&mut frame.dso);
            if let Some(name) = without_addresses(&frame.function) {
                frame.function = name;
            }
        }
    }
    samples
}

/// `name` with each `0x` followed by at least [`MIN_ADDRESS_DIGITS`] hex digits written `0x…`;
/// `None` if it has none.
fn without_addresses(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    let mut changed = false;
    while let Some(at) = rest.find("0x") {
        let digits = rest[at + 2..]
            .bytes()
            .take_while(u8::is_ascii_hexdigit)
            .count();
        let end = at + 2 + digits;
        out.push_str(&rest[..at]);
        if digits >= MIN_ADDRESS_DIGITS {
            out.push_str("0x…");
            changed = true;
        } else {
            out.push_str(&rest[at..end]);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::Frame;

    #[test]
    fn addresses_in_jit_names_are_taken_out() {
        for (name, expected) in [
            (
                "com.x.Foo$$Lambda$14/0x0000000800c03000.run()",
                Some("com.x.Foo$$Lambda$14/0x….run()"),
            ),
            (
                "java.lang.invoke.LambdaForm$MH/0x00007f3c0c0a4400.invoke(java.lang.Object)",
                Some("java.lang.invoke.LambdaForm$MH/0x….invoke(java.lang.Object)"),
            ),
            ("a 0xabcdef and 0x12345678 end", Some("a 0x… and 0x… end")),
            // Too short for an address, or not hex.
            ("mask(0xff)", None),
            ("0x", None),
            ("JS:*parseExpr /app/hot.js:3:19", None),
            ("0xgg1234567", None),
        ] {
            assert_eq!(without_addresses(name).as_deref(), expected, "{name}");
        }
    }

    #[test]
    fn only_jit_frames_change() {
        let sample = |pid: u32, load: u32| Sample {
            comm: "java".into(),
            pid,
            tid: pid,
            time_ns: 1,
            period: 1,
            event: "cpu-clock".into(),
            frames: vec![
                Frame::new(
                    0x7f00 + u64::from(pid),
                    "Foo$$Lambda$3/0x0000000800c03000.run()",
                    &format!("/tmp/x.jit-1/jitted-{pid}-{load}.so"),
                    FrameKind::Jit,
                ),
                Frame::new(
                    0x10,
                    "[unknown]",
                    &format!("/tmp/perf-{pid}.map"),
                    FrameKind::Jit,
                ),
                Frame::new(
                    0x20,
                    "f_0x12345678",
                    "/usr/lib/libc.so.6",
                    FrameKind::Native,
                ),
                Frame::new(
                    0x30,
                    "do_syscall_64",
                    "[kernel.kallsyms]",
                    FrameKind::Kernel,
                ),
            ],
            marker: None,
        };
        let (base, new) = (
            comparable(vec![sample(100, 7)]),
            comparable(vec![sample(200, 9)]),
        );
        let names = |samples: &[Sample]| -> Vec<(String, String)> {
            samples[0]
                .frames
                .iter()
                .map(|f| (f.function.clone(), f.dso.clone()))
                .collect()
        };
        assert_eq!(names(&base), names(&new));
        assert_eq!(
            names(&new),
            [
                ("Foo$$Lambda$3/0x….run()".into(), JIT_DSO.into()),
                ("[unknown]".into(), JIT_DSO.into()),
                ("f_0x12345678".into(), "/usr/lib/libc.so.6".into()),
                ("do_syscall_64".into(), "[kernel.kallsyms]".into()),
            ]
        );
    }
}
