//! The standard `process_*` metrics, read from `/proc` at each scrape.
//!
//! Names, help texts and types are the Prometheus client libraries' own, so
//! dashboards and alerts written for any Prometheus-instrumented process
//! work unchanged. They are rendered here rather than through the `metrics`
//! facade because the facade's counters hold integers:
//! `process_cpu_seconds_total` would lose everything below a second.
//!
//! Reading `/proc/self` costs a few system calls per scrape and nothing
//! between scrapes. Where `/proc` is missing (not Linux) nothing is rendered.

use std::fmt::Write as _;

/// Total user and system CPU time, in seconds.
pub(crate) const CPU_SECONDS: &str = "process_cpu_seconds_total";
/// Open file descriptors.
pub(crate) const OPEN_FDS: &str = "process_open_fds";
/// The soft limit on open file descriptors.
pub(crate) const MAX_FDS: &str = "process_max_fds";
/// Virtual memory size, in bytes.
pub(crate) const VIRTUAL_MEMORY: &str = "process_virtual_memory_bytes";
/// Resident memory size, in bytes.
pub(crate) const RESIDENT_MEMORY: &str = "process_resident_memory_bytes";
/// Start time of the process, in seconds since the Unix epoch.
pub(crate) const START_TIME: &str = "process_start_time_seconds";
/// OS threads in the process.
pub(crate) const THREADS: &str = "process_threads";

/// The kernel reports CPU times and start times to user space in ticks of
/// `USER_HZ`, which is 100 on every architecture Linux supports for this
/// purpose (it is part of the ABI, unlike the kernel's own `HZ`). The
/// Prometheus Go client's procfs reader makes the same assumption.
const USER_HZ: f64 = 100.0;

/// One reading of the process's state; `None` where a value was unavailable.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub resident_memory_bytes: Option<u64>,
    pub start_time_seconds: Option<f64>,
    pub threads: Option<u64>,
}

impl ProcessStats {
    /// Reads this process's statistics from `/proc/self`.
    pub(crate) fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let mut stats = read("/proc/self/stat").and_then(|s| parse_stat(&s)).unwrap_or_default();
        if let Some(status) = read("/proc/self/status") {
            stats.resident_memory_bytes = parse_status_kb(&status, "VmRSS:").map(|kb| kb * 1024);
        }
        // `/proc/self/stat` gives the start in seconds since boot.
        let boot = read("/proc/stat").and_then(|s| parse_btime(&s));
        stats.start_time_seconds =
            stats.start_time_seconds.zip(boot).map(|(since_boot, boot)| boot as f64 + since_boot);
        stats.max_fds = read("/proc/self/limits").and_then(|s| parse_max_open_files(&s));
        stats.open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        stats
    }

    /// The Prometheus text exposition of every value that was read.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, value: Option<String>| {
            if let Some(v) = value {
                let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n");
            }
        };
        let int = |v: Option<u64>| v.map(|v| v.to_string());
        let float = |v: Option<f64>| v.map(|v| format!("{v:?}"));
        family(CPU_SECONDS, "counter", "Total user and system CPU time spent in seconds.", float(self.cpu_seconds));
        family(OPEN_FDS, "gauge", "Number of open file descriptors.", int(self.open_fds));
        family(MAX_FDS, "gauge", "Maximum number of open file descriptors.", int(self.max_fds));
        family(VIRTUAL_MEMORY, "gauge", "Virtual memory size in bytes.", int(self.virtual_memory_bytes));
        family(RESIDENT_MEMORY, "gauge", "Resident memory size in bytes.", int(self.resident_memory_bytes));
        family(
            START_TIME,
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            float(self.start_time_seconds),
        );
        family(THREADS, "gauge", "Number of OS threads in the process.", int(self.threads));
        out
    }
}

/// Renders the current process metrics (empty where `/proc` is missing).
pub(crate) fn render() -> String {
    ProcessStats::read().render()
}

/// CPU time, threads, virtual size and the start time in seconds since boot
/// (made absolute by the caller) from `/proc/self/stat`.
fn parse_stat(stat: &str) -> Option<ProcessStats> {
    // The command name is in parentheses and may hold spaces or parentheses
    // itself: the fields that follow start after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 of proc_pid_stat(5), the state.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let (utime, stime) = (field(14)?, field(15)?);
    Some(ProcessStats {
        cpu_seconds: Some((utime + stime) as f64 / USER_HZ),
        threads: field(20),
        start_time_seconds: field(22).map(|ticks| ticks as f64 / USER_HZ),
        virtual_memory_bytes: field(23),
        ..ProcessStats::default()
    })
}

/// A `kB` line of `/proc/self/status`, such as `VmRSS:   1234 kB`.
fn parse_status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// The boot time, in seconds since the epoch, from `/proc/stat`.
fn parse_btime(stat: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn parse_max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    fn now_seconds() -> f64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
    }

    #[test]
    fn stat_fields_are_read_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 75 0 0 20 0 9 0 \
                    123456 987654321 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_stat(stat).unwrap();
        assert_eq!(s.cpu_seconds, Some(3.25));
        assert_eq!(s.threads, Some(9));
        assert_eq!(s.start_time_seconds, Some(1234.56));
        assert_eq!(s.virtual_memory_bytes, Some(987_654_321));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn status_limits_and_btime_lines_are_found() {
        assert_eq!(parse_status_kb("Name:\tx\nVmRSS:\t   2048 kB\nThreads: 3\n", "VmRSS:"), Some(2048));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        let unlimited = "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_open_files(unlimited), None);
        assert_eq!(parse_btime("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
    }

    #[test]
    fn renders_the_client_libraries_names_and_types() {
        let s = ProcessStats { cpu_seconds: Some(0.5), threads: Some(4), ..ProcessStats::default() };
        assert_eq!(
            s.render(),
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
             # TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 0.5\n\
             # HELP process_threads Number of OS threads in the process.\n\
             # TYPE process_threads gauge\nprocess_threads 4\n"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_as_a_live_process() {
        let s = ProcessStats::read();
        assert!(s.resident_memory_bytes.unwrap() > 0);
        assert!(s.virtual_memory_bytes.unwrap() >= s.resident_memory_bytes.unwrap());
        assert!(s.threads.unwrap() >= 1);
        assert!(s.open_fds.unwrap() >= 3 && s.open_fds.unwrap() <= s.max_fds.unwrap());
        assert!(s.cpu_seconds.unwrap() >= 0.0);
        let started = s.start_time_seconds.unwrap();
        assert!(started <= now_seconds() + 1.0 && started > now_seconds() - 86_400.0, "{started}");
    }
}
