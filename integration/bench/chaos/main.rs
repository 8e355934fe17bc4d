//! Fault cases against the real kube-apiserver, through watchmux
//! (issue 16, item 6): each case starts a fresh watchmux (behind a TCP relay
//! the harness can break) and N reflector-shaped watchers in a namespace of
//! its own, makes its fault while a writer changes objects straight at the
//! API server, and reports whether every watcher ended with the API server's
//! state (converged), what they never got (lost), who never became current
//! before the deadline (stuck), and the time from the fault's end until each
//! was current again. `integration/scripts/chaos.sh` runs it; docs/chaos.md
//! describes the cases and holds the measured table.
//!
//! Environment: the `WATCHMUX_BENCH_*` variables of the other benches, the
//! ones `world::Setup` reads (`CHAOS_WATCHMUX_BIN`, `CHAOS_ETCD`,
//! `CHAOS_ETCD_PIDFILE`, `CHAOS_OUT_DIR`, `CHAOS_RESTART_CMD`), and the
//! knobs of `Config` below (`CHAOS_CASES`: a comma-separated list of case
//! names, `all` or `quick`).

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod fleet;
mod relay;
mod report;
mod score;
mod stage;
mod world;
mod writer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;

use common::api::Api;
use common::client::Shape;
use common::env::{env_list, env_or};
use stage::{Ctx, Outcome};

/// The knobs, from `CHAOS_*` variables (defaults in brackets in `from_env`).
pub struct Config {
    /// Watchers per case, and how many share an HTTP/2 connection.
    pub n: usize,
    pub per_conn: usize,
    pub shape: Shape,
    /// Objects in each case's pool, and their padding.
    pub objects: usize,
    pub object_bytes: usize,
    /// Steady writes per second, and the rate of the non-reader case.
    pub write_rate: f64,
    pub write_rate_max: f64,
    /// How long the watchers have, from a fault's end, to become current.
    pub deadline: Duration,
    pub freeze_secs: f64,
    pub etcd_freeze_secs: f64,
    pub half_open_secs: f64,
    /// During the half-open fault, new connections are accepted and frozen
    /// too (`CHAOS_HALF_OPEN_NEW=hold`) instead of refused (`refuse`).
    pub half_open_hold_new: bool,
    pub gap_clients: usize,
    pub non_readers: usize,
    pub client_fault_secs: f64,
    pub slowloris: usize,
    pub slowloris_secs: f64,
    /// The slow-watchers case: slow watchers (each through watchmux and as
    /// many straight at kube-apiserver), their share of the churn's bytes
    /// they read while it goes on, the churn's writes a second and object size.
    pub slow_watchers: usize,
    pub slow_read_share: f64,
    pub slow_write_rate: f64,
    pub slow_object_bytes: usize,
    pub rounds: usize,
    pub round_watchers: usize,
    pub large_count: usize,
    pub large_kib: usize,
    /// How long the no-false-alarm case churns at `write_rate_max`.
    pub check_churn_secs: f64,
    /// A case that runs longer is abandoned.
    pub case_timeout: Duration,
}

impl Config {
    fn from_env() -> anyhow::Result<Self> {
        let secs = |name: &str, default: u64| env_or(name, default).map(Duration::from_secs);
        Ok(Self {
            n: env_or("CHAOS_N", 200)?,
            per_conn: env_or("CHAOS_PER_CONN", 25)?,
            shape: env_or("CHAOS_SHAPE", Shape::H2)?,
            objects: env_or("CHAOS_OBJECTS", 50)?,
            object_bytes: env_or("CHAOS_OBJECT_BYTES", 512)?,
            write_rate: env_or("CHAOS_WRITE_RATE", 10.0)?,
            write_rate_max: env_or("CHAOS_WRITE_RATE_MAX", 200.0)?,
            deadline: secs("CHAOS_DEADLINE_S", 90)?,
            freeze_secs: env_or("CHAOS_FREEZE_S", 20.0)?,
            etcd_freeze_secs: env_or("CHAOS_ETCD_FREEZE_S", 10.0)?,
            half_open_secs: env_or("CHAOS_HALF_OPEN_S", 30.0)?,
            half_open_hold_new: match env_or("CHAOS_HALF_OPEN_NEW", "refuse".to_owned())?.as_str() {
                "refuse" => false,
                "hold" => true,
                other => bail!("CHAOS_HALF_OPEN_NEW={other:?}: refuse or hold"),
            },
            gap_clients: env_or("CHAOS_GAP_CLIENTS", 10)?,
            non_readers: env_or("CHAOS_NON_READERS", 200)?,
            client_fault_secs: env_or("CHAOS_CLIENT_FAULT_S", 30.0)?,
            slowloris: env_or("CHAOS_SLOWLORIS", 500)?,
            slowloris_secs: env_or("CHAOS_SLOWLORIS_S", 45.0)?,
            slow_watchers: env_or("CHAOS_SLOW_WATCHERS", 20)?,
            slow_read_share: env_or("CHAOS_SLOW_READ_SHARE", 0.1)?,
            slow_write_rate: env_or("CHAOS_SLOW_WRITE_RATE", 50.0)?,
            slow_object_bytes: env_or("CHAOS_SLOW_OBJECT_BYTES", 4096)?,
            rounds: env_or("CHAOS_ROUNDS", 10)?,
            round_watchers: env_or("CHAOS_ROUND_WATCHERS", 500)?,
            large_count: env_or("CHAOS_LARGE_COUNT", 200)?,
            large_kib: env_or("CHAOS_LARGE_KIB", 100)?,
            check_churn_secs: env_or("CHAOS_CHECK_CHURN_S", 120.0)?,
            case_timeout: secs("CHAOS_CASE_TIMEOUT_S", 360)?,
        })
    }
}

/// The cases `CHAOS_CASES` names, in the order of `cases::ALL`.
fn selected() -> anyhow::Result<Vec<&'static cases::Case>> {
    let names: Vec<String> = env_list("CHAOS_CASES", "all")?;
    let names: Vec<String> = match names.as_slice() {
        [one] if one == "all" => {
            cases::ALL.iter().filter(|c| !cases::BENCH_ONLY.contains(&c.id)).map(|c| c.id.to_owned()).collect()
        }
        [one] if one == "quick" => cases::QUICK.iter().map(|s| (*s).to_owned()).collect(),
        _ => names,
    };
    for n in &names {
        if !cases::ALL.iter().any(|c| c.id == n) {
            let known: Vec<&str> = cases::ALL.iter().map(|c| c.id).collect();
            bail!("CHAOS_CASES: no case {n:?} (cases: {}, or all, quick)", known.join(", "));
        }
    }
    Ok(cases::ALL.iter().filter(|c| names.iter().any(|n| n == c.id)).collect())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cases = selected()?;
    let ctx = Ctx { cfg: Config::from_env()?, api: Arc::new(Api::from_env()?), setup: world::Setup::from_env()? };
    std::fs::create_dir_all(&ctx.setup.out_dir)?;
    let started = Instant::now();
    let mut outcomes: Vec<Outcome> = Vec::new();
    for case in cases {
        eprintln!("chaos: {} ({})", case.id, case.what);
        let t = Instant::now();
        let outcome = match tokio::time::timeout(ctx.cfg.case_timeout, (case.run)(&ctx)).await {
            Ok(Ok(mut o)) => {
                o.secs = t.elapsed().as_secs_f64();
                o
            }
            Ok(Err(e)) => Outcome::failed(case.id, format!("{e:#}"), t.elapsed().as_secs_f64()),
            Err(_) => Outcome::failed(
                case.id,
                format!("timed out after {:?}", ctx.cfg.case_timeout),
                t.elapsed().as_secs_f64(),
            ),
        };
        eprintln!(
            "chaos: {} done in {:.1}s{}",
            case.id,
            outcome.secs,
            outcome.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
        );
        outcomes.push(outcome);
        // Let the API server settle (a restart, a compaction) before the next case.
        ctx.api.wait_apiserver(Duration::from_secs(60)).await;
    }
    let total = started.elapsed().as_secs_f64();
    let md = report::markdown(&ctx.cfg, &outcomes, total);
    println!("{md}");
    std::fs::write(ctx.setup.out_dir.join("chaos.md"), &md)?;
    let json = report::json(&ctx.cfg, &outcomes, total);
    std::fs::write(ctx.setup.out_dir.join("chaos.json"), serde_json::to_vec_pretty(&json)?)?;
    eprintln!("chaos: results in {}/chaos.{{md,json}}", ctx.setup.out_dir.display());
    if outcomes.iter().any(|o| !o.passed()) {
        std::process::exit(1);
    }
    Ok(())
}
