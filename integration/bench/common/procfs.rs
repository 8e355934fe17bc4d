//! Readings of a process from `/proc`: CPU ticks, resident memory, writes.

use anyhow::{Context as _, anyhow};

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
    cpu_ticks_of(&stat).ok_or_else(|| anyhow!("odd /proc/{pid}/stat"))
}

/// Time `pid`'s threads have run on a CPU, in nanoseconds (the first field
/// of each thread's `schedstat`): exact where clock ticks are 10 ms.
pub fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("listing /proc/{pid}/task"))? {
        // A thread that ended meanwhile is skipped.
        let Ok(schedstat) = std::fs::read_to_string(task?.path().join("schedstat")) else { continue };
        total += schedstat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(total)
}

/// utime + stime from a process's or a thread's `stat` line.
fn cpu_ticks_of(stat: &str) -> Option<u64> {
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // After ')': state is field 3 of the whole line, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// One thread's CPU (utime + stime, clock ticks) and time spent runnable on
/// a run queue waiting for a CPU (`schedstat`'s second field, ns).
#[derive(Clone, Debug)]
pub struct ThreadCpu {
    pub tid: u32,
    pub name: String,
    pub ticks: u64,
    pub waited_ns: u64,
}

/// Every thread of `pid` (`/proc/<pid>/task/*`); empty once it is gone.
pub fn thread_cpu(pid: u32) -> Vec<ThreadCpu> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid: u32 = task.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let name = stat[stat.find('(')? + 1..stat.rfind(')')?].to_owned();
            let schedstat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            Some(ThreadCpu {
                tid,
                name,
                ticks: cpu_ticks_of(&stat)?,
                waited_ns: schedstat.split_whitespace().nth(1)?.parse().ok()?,
            })
        })
        .collect()
}

/// One thread's share of a core and of the time waiting for one, over a span.
#[derive(Clone, Debug)]
pub struct ThreadShare {
    pub tid: u32,
    pub name: String,
    pub core_share: f64,
    pub waited_share: f64,
}

/// What each thread of `after` used since `before`, over `secs` of wall
/// time (a thread born since counts from zero), busiest first; idle threads
/// are left out.
pub fn thread_shares(before: &[ThreadCpu], after: &[ThreadCpu], secs: f64, clk_tck: f64) -> Vec<ThreadShare> {
    let mut shares: Vec<ThreadShare> = after
        .iter()
        .map(|t| {
            let earlier = before.iter().find(|b| b.tid == t.tid);
            let ticks = t.ticks.saturating_sub(earlier.map_or(0, |b| b.ticks));
            let waited = t.waited_ns.saturating_sub(earlier.map_or(0, |b| b.waited_ns));
            ThreadShare {
                tid: t.tid,
                name: t.name.clone(),
                core_share: ticks as f64 / clk_tck / secs,
                waited_share: waited as f64 / 1e9 / secs,
            }
        })
        .filter(|s| s.core_share > 0.0 || s.waited_share > 0.0)
        .collect();
    shares.sort_by(|a, b| b.core_share.total_cmp(&a.core_share));
    shares
}

pub fn self_cpu_ticks() -> u64 {
    cpu_ticks(std::process::id()).unwrap_or(0)
}

/// VmRSS of a process, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).ok_or_else(|| anyhow!("no VmRSS for {pid}"))?;
    let kb: u64 = line.split_whitespace().nth(1).ok_or_else(|| anyhow!("odd VmRSS"))?.parse()?;
    Ok(kb * 1024)
}

/// Write system calls a process has made and the bytes they carried:
/// `syscw` and `wchar` in /proc/<pid>/io (0 if unreadable). The kernel
/// counts `write(2)` and `writev(2)` there, not `send(2)` or `sendmsg(2)`:
/// Rust's `TcpStream::write` is a `send`, so only vectored writes are seen.
pub fn write_io(pid: u32) -> (u64, u64) {
    let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) else { return (0, 0) };
    let field =
        |name: &str| io.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or(0);
    (field("syscw:"), field("wchar:"))
}

/// `pid` read from a pid file (re-read each time: the API server may be restarted).
pub fn pid_from_file(path: &str) -> anyhow::Result<u32> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    Ok(text.trim().parse()?)
}

/// CPU and write counters of the measured processes at one instant.
#[derive(Clone, Copy, Default, Debug)]
pub struct Sample {
    /// The server process measured on this side (kube-apiserver or watchmux).
    pub server: u64,
    pub apiserver: u64,
    pub bench: u64,
    pub server_syscw: u64,
    pub server_wchar: u64,
}

impl Sample {
    pub fn take(server_pid: u32, api_pid: u32) -> anyhow::Result<Self> {
        let (syscw, wchar) = write_io(server_pid);
        Ok(Self {
            server: cpu_ticks(server_pid)?,
            apiserver: cpu_ticks(api_pid).context("kube-apiserver gone (restarted?)")?,
            bench: self_cpu_ticks(),
            server_syscw: syscw,
            server_wchar: wchar,
        })
    }

    /// `later - self`, field by field.
    pub fn delta(&self, later: &Sample) -> Sample {
        Sample {
            server: later.server.saturating_sub(self.server),
            apiserver: later.apiserver.saturating_sub(self.apiserver),
            bench: later.bench.saturating_sub(self.bench),
            server_syscw: later.server_syscw.saturating_sub(self.server_syscw),
            server_wchar: later.server_wchar.saturating_sub(self.server_wchar),
        }
    }
}

/// Clock ticks per second (`CLK_TCK`, from `getconf CLK_TCK` in the scripts).
pub fn clk_tck() -> f64 {
    std::env::var("CLK_TCK").ok().and_then(|v| v.parse().ok()).unwrap_or(100.0)
}

pub fn ticks_ms(ticks: u64) -> f64 {
    ticks as f64 * 1000.0 / clk_tck()
}
