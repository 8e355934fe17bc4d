//! The memory allocator watchmux runs on, chosen when it is built.
//!
//! A tier's memory follows its storms: a few thousand kubelets starting at
//! once hold a watch-list's buffers each (about 0.28 MiB a kubelet in
//! flight), then let go. glibc's malloc keeps what was freed in its arenas
//! for reuse, so the resident set stayed at the storm's peak (2.1 GiB at
//! 5,000 kubelets against 0.6 GiB steady) and a memory limit had to be set
//! for the largest storm forever after. jemalloc (with its background
//! purging thread) and mimalloc give freed pages back to the kernel within
//! seconds. Which one a build uses is the cargo feature `jemalloc` (the
//! default) or `mimalloc` (`--no-default-features --features mimalloc`;
//! `--no-default-features` alone: the system's); [`NAME`] says which, in
//! `--version` and `watchmux_build_info{allocator}`. jemalloc was chosen by
//! side-by-side figures (docs/benchmarks.md, "Memory after a storm"): a
//! minute after a 2,000-kubelet storm its tier was back at the steady state
//! (0.96 of it), mimalloc's at 1.06 after holding its peak for 30 s, glibc's
//! at 1.47, with the storm's CPU no higher than glibc's.

#[cfg(all(feature = "jemalloc", feature = "mimalloc"))]
compile_error!("the features jemalloc and mimalloc each choose the allocator: enable one");

/// jemalloc, purging freed pages from a background thread: without it,
/// pages are purged only as a side effect of later allocations, and an idle
/// tier after a storm makes few.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator of this build: `jemalloc`, `mimalloc` or `system`
/// (build.rs names it from the features, for `--version` too).
pub const NAME: &str = env!("WATCHMUX_ALLOCATOR");

/// Starts what the allocator needs beside allocations: jemalloc's purging
/// thread (`background_thread`, set through its control interface). At
/// jemalloc's default decay, dirty pages go back to the kernel over 10 s.
/// Failing to start it is said and not fatal: jemalloc then purges as a
/// side effect of later allocations, slower on an idle tier.
pub fn start() {
    #[cfg(feature = "jemalloc")]
    if let Err(err) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!(error = %err, "jemalloc: no background purging thread; freed memory returns more slowly");
    }
}
