//! Faults of the persisted store (`--persist-dir`), under steady writes,
//! each held to the API server's state like every case:
//!
//! - `persist-truncated`: watchmux killed, its store cut to a tenth, and
//!   again to one page (4,096 bytes), and started again each time: it must
//!   start (redb panicked on such files, every restart), move the file
//!   aside and count it.
//! - `persist-readonly`: the persist directory is a read-only file system
//!   (ext4's errors=remount-ro): watchmux must start and serve from memory,
//!   with the degraded gauge (`resource="*"`) at 1.
//! - `persist-full-disk`: the store on a small tmpfs that is then filled:
//!   commits fail (degraded 1), the space is freed, and the store must
//!   write again (reopened, degraded 0); stopped, the file must hold every
//!   object written while the disk was full.
//!
//! The mounts are tmpfs the case makes itself under the output directory
//! and unmounts at the end; they need root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::common::prom;
use crate::stage::{Ctx, Outcome, Plan, Stage};
use crate::world::metrics;

/// Writes before the fault, so that the store holds commits.
const LEAD_IN: Duration = Duration::from_secs(2);
/// How long a metric may take to say what the case waits for (a failed
/// commit is retried every 10 s).
const METRIC_LIMIT: Duration = Duration::from_secs(40);
/// The store's file, as watchmux names it.
const STORE: &str = "configmaps.v1.core.redb";

/// A persist directory, on a tmpfs of the case's own when `mount` says so.
struct PersistDir {
    path: PathBuf,
    mounted: bool,
}

impl PersistDir {
    fn plain(ctx: &Ctx, id: &str) -> anyhow::Result<Self> {
        let path = ctx.setup.out_dir.join(format!("persist-{id}"));
        if path.exists() {
            // A mount an interrupted run left behind.
            let _ = run("umount", &["-l", &path.display().to_string()]);
        }
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(Self { path, mounted: false })
    }

    /// A tmpfs with `options` (`size=...`, `ro`).
    fn tmpfs(ctx: &Ctx, id: &str, options: &str) -> anyhow::Result<Self> {
        let mut dir = Self::plain(ctx, id)?;
        run("mount", &["-t", "tmpfs", "-o", options, "tmpfs", &dir.path.display().to_string()])
            .context("mounting a tmpfs for the persist directory (the persist cases need root)")?;
        dir.mounted = true;
        Ok(dir)
    }

    fn flags(&self) -> Vec<String> {
        [
            "--cache-resources",
            "configmaps",
            "--cache-warm",
            "--persist-dir",
            &self.path.display().to_string(),
            "--persist-resources",
            "configmaps",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn store(&self) -> PathBuf {
        self.path.join(STORE)
    }

    /// Files moved aside (`<store>.bad-<time>`).
    fn moved_aside(&self) -> usize {
        std::fs::read_dir(&self.path)
            .map(|d| d.filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().contains(".bad-"))).count())
            .unwrap_or(0)
    }
}

impl Drop for PersistDir {
    fn drop(&mut self) {
        if self.mounted {
            let _ = run("umount", &["-l", &self.path.display().to_string()]);
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn run(cmd: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn plan(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

/// watchmux's metric `name` (summed over `labels`) now.
async fn metric(st: &Stage, name: &str, labels: &[(&str, &str)]) -> f64 {
    prom::sum(&metrics(st.wm.admin).await, name, labels)
}

/// Waits until `ok` holds of metric `name`, at most [`METRIC_LIMIT`].
async fn wait_metric(st: &Stage, name: &str, labels: &[(&str, &str)], ok: impl Fn(f64) -> bool) -> anyhow::Result<f64> {
    let until = Instant::now() + METRIC_LIMIT;
    loop {
        let v = metric(st, name, labels).await;
        if ok(v) {
            return Ok(v);
        }
        if Instant::now() > until {
            bail!("{name}{labels:?} is {v} after {METRIC_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn truncated(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let id = "persist-truncated";
    let dir = PersistDir::plain(ctx, id)?;
    let flags = dir.flags();
    let flags = plan(&flags);
    let mut st = Stage::new(ctx, id, Plan { flags: &flags, ..Plan::default() }).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    let start = Instant::now();
    let mut notes = Vec::new();
    let mut problems = Vec::new();
    for (what, cut) in [("a tenth", None), ("4,096 bytes", Some(4096u64))] {
        st.wm.kill();
        let len = std::fs::metadata(dir.store())
            .with_context(|| format!("{}: no store written", dir.store().display()))?
            .len();
        let to = cut.unwrap_or(len / 10);
        std::fs::OpenOptions::new().write(true).open(dir.store())?.set_len(to)?;
        let aside = dir.moved_aside();
        let started = Instant::now();
        // Fails the case if watchmux exits at start (the crash loop).
        st.wm.respawn().await.with_context(|| format!("watchmux did not start with its store cut to {what}"))?;
        let took = started.elapsed().as_secs_f64();
        let counted = metric(&st, "watchmux_persist_stores_moved_aside_total", &[]).await;
        notes.push(format!(
            "store of {len} bytes cut to {what} ({to}): ready again in {took:.1} s, moved aside (counted {counted})"
        ));
        if dir.moved_aside() != aside + 1 {
            problems.push(format!("cut to {what}: not moved aside ({} files aside)", dir.moved_aside()));
        }
        if counted < 1.0 {
            problems.push(format!("cut to {what}: watchmux_persist_stores_moved_aside_total is {counted}"));
        }
    }
    let end = Instant::now();
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let (groups, notes, details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    let what = "watchmux killed, its store cut to a tenth and started again; then to 4,096 bytes; writes throughout"
        .to_owned();
    let mut outcome = Outcome::new(id, what, groups, notes, details);
    outcome.problems.extend(problems);
    Ok(outcome)
}

pub async fn readonly(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let id = "persist-readonly";
    let dir = PersistDir::tmpfs(ctx, id, "ro,size=1m")?;
    let flags = dir.flags();
    let flags = plan(&flags);
    let start = Instant::now();
    // Fails the case if watchmux does not start on it.
    let mut st = Stage::new(ctx, id, Plan { flags: &flags, ..Plan::default() }).await?;
    let ready = start.elapsed().as_secs_f64();
    let degraded = metric(&st, "watchmux_persist_degraded", &[("resource", "*")]).await;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    let end = Instant::now();
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let notes = vec![format!("watchmux_persist_degraded{{resource=\"*\"}} {degraded}")];
    let (groups, notes, details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    let what = format!(
        "the persist directory a read-only file system: watchmux ready in {ready:.1} s, serving from memory; writes"
    );
    Ok(Outcome::new(id, what, groups, notes, details)
        .check(degraded == 1.0, || format!("watchmux_persist_degraded{{resource=\"*\"}} is {degraded}, not 1")))
}

pub async fn full_disk(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let id = "persist-full-disk";
    let dir = PersistDir::tmpfs(ctx, id, "size=4m")?;
    let flags = dir.flags();
    let flags = plan(&flags);
    let mut st = Stage::new(ctx, id, Plan { flags: &flags, object_bytes: Some(8192), ..Plan::default() }).await?;
    st.start_churn(ctx.cfg.write_rate);
    tokio::time::sleep(LEAD_IN).await;
    let start = Instant::now();
    let filler = dir.path.join("filler");
    let filled = fill(&filler)?;
    // Objects the store must grow for, written while the disk is full.
    let extra: Vec<String> = (0..100).map(|i| format!("fill-{i:04}")).collect();
    for name in &extra {
        st.writer.create(name).await?;
    }
    let degraded = wait_metric(&st, "watchmux_persist_degraded", &[], |v| v >= 1.0).await;
    let errors = metric(&st, "watchmux_persist_write_errors_total", &[]).await + 0.0;
    std::fs::remove_file(&filler)?;
    let freed = Instant::now();
    let healed = match &degraded {
        Ok(_) => wait_metric(&st, "watchmux_persist_degraded", &[], |v| v == 0.0).await.map(|_| freed.elapsed()),
        Err(e) => Err(anyhow::anyhow!("{e}")),
    };
    let reopens = metric(&st, "watchmux_persist_reopens_total", &[]).await + 0.0; // not -0
    let end = Instant::now();
    let target = st.marker_and_wait(end, ctx.cfg.deadline).await?;
    let mut notes = vec![format!("filled with {filled} bytes: {errors} write errors, {reopens} reopens")];
    let mut problems = Vec::new();
    match (&degraded, &healed) {
        (Err(e), _) => problems.push(format!("the full disk was never noticed: {e}")),
        (Ok(_), Err(e)) => problems.push(format!("the store never wrote again once there was room: {e}")),
        (Ok(_), Ok(after)) => {
            notes.push(format!("persisting again {:.1} s after the space was freed", after.as_secs_f64()))
        }
    }
    if reopens < 1.0 {
        problems.push(format!("watchmux_persist_reopens_total is {reopens}"));
    }
    let (groups, notes, details) = st.finish(ctx, (start, Instant::now()), &[target], Vec::new(), notes).await?;
    // watchmux is stopped: the file holds what it last committed.
    match stored_names(&dir.store()) {
        Ok(names) => {
            let missing: Vec<_> = extra.iter().filter(|n| !names.contains(*n)).collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "{} objects written while the disk was full are not in the store, e.g. {}",
                    missing.len(),
                    missing[0]
                ));
            }
        }
        Err(e) => problems.push(format!("reading the store: {e:#}")),
    }
    let what =
        "the store's tmpfs (4 MiB) filled, 100 objects of 8 KiB written, the space freed; writes throughout".to_owned();
    let mut outcome = Outcome::new(id, what, groups, notes, details);
    outcome.problems.extend(problems);
    Ok(outcome)
}

/// Writes `path` until the file system is full; returns the bytes written.
fn fill(path: &Path) -> anyhow::Result<u64> {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path)?;
    let chunk = vec![0x5au8; 64 << 10];
    let mut written = 0u64;
    // Bounded: the tmpfs is a few MiB.
    for _ in 0..1024 {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => return Err(e.into()),
        }
    }
    let _ = file.sync_all();
    Ok(written)
}

/// The names of the objects the store at `path` holds (redb's own format,
/// read with the same crate).
fn stored_names(path: &Path) -> anyhow::Result<Vec<String>> {
    use redb::{ReadableTable as _, TableDefinition};
    const OBJECTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("objects");
    let db = redb::Database::open(path)?;
    let txn = db.begin_read()?;
    let table = txn.open_table(OBJECTS)?;
    let mut names = Vec::new();
    for entry in table.iter()? {
        let (key, _) = entry?;
        names.push(key.value().1.to_owned());
    }
    Ok(names)
}
