//! The shared library's soname, set when it is built for a package (`scripts/package.sh`).
//!
//! A package installs `libperfclock_ffi.so` as `libperfclock.so.<version>` with the links
//! `libperfclock.so.0` (the soname, what programs linked against it load) and `libperfclock.so`
//! (what `-lperfclock` finds). The soname's number changes only when the ABI does
//! (`README.md`, Packages and versions). A build tree keeps a library without a soname: a
//! program linked there by path (`cc ... target/release/libperfclock_ffi.so`, the C tests)
//! then loads the file it was linked with, not a `libperfclock.so.0` the tree does not have.

/// The soname of ABI version 0.
const SONAME: &str = "libperfclock.so.0";

/// Set to `1` to give the shared library its soname.
const SONAME_SWITCH: &str = "PERFCLOCK_FFI_SONAME";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={SONAME_SWITCH}");
    let wanted = std::env::var_os(SONAME_SWITCH).is_some_and(|value| value == "1");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if wanted && linux {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    }
}
