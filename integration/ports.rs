//! Ports for the watchmux processes the end-to-end suite and the auth
//! fuzzer start (each includes this file with `#[path]`).

/// Ports the suites' watchmux instances listen on: below the kernel's
/// ephemeral range (32768-60999), where a port the kernel handed out as free
/// (`bind` to port 0) could be taken by any outgoing connection, or by
/// another test's, before watchmux bound it (an e2e run failed so, on
/// "Address already in use"); and clear of the test cluster's (16443,
/// 23379-23380) and the control plane's (31000 up).
const PORTS: std::ops::Range<u16> = 28_000..30_000;

/// A port of [`PORTS`] no listener holds, never handed out before in this
/// run (until the range wraps), starting where the process id says so that
/// two runs on one machine start apart.
pub(crate) fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    let _ = NEXT.compare_exchange(u32::MAX, std::process::id() % span, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let port = PORTS.start + u16::try_from(NEXT.fetch_add(1, Ordering::Relaxed) % span).unwrap();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {PORTS:?}");
}
