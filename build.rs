//! Build-time facts for `watchmux_build_info` and `--version`: the source
//! revision, the compiler's version and the allocator feature.
//!
//! The revision comes only from `WATCHMUX_GIT_REVISION` (the Makefile sets it
//! from git), never from looking at a repository: a build outside git, or
//! from a source archive, works and says `unknown`, and the same inputs give
//! the same binary.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=WATCHMUX_GIT_REVISION");
    let revision = std::env::var("WATCHMUX_GIT_REVISION")
        .ok()
        .filter(|r| {
            !r.is_empty() && r.len() <= 64 && r.chars().all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=WATCHMUX_GIT_REVISION={revision}");

    // `rustc 1.91.0 (f8297e351 2025-10-28)`: the second word.
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=WATCHMUX_RUSTC_VERSION={rustc_version}");

    // The allocator feature (src/allocator.rs), as a literal for --version.
    let allocator = if std::env::var_os("CARGO_FEATURE_JEMALLOC").is_some() {
        "jemalloc"
    } else if std::env::var_os("CARGO_FEATURE_MIMALLOC").is_some() {
        "mimalloc"
    } else {
        "system"
    };
    println!("cargo:rustc-env=WATCHMUX_ALLOCATOR={allocator}");
}
