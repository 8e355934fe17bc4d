//! The fault cases, by what they break: the upstream and watchmux itself,
//! the relist gap, the clients, what is watched, the cache itself (the
//! consistency check), and the persisted store.

pub mod black_hole;
pub mod clients;
pub mod compaction;
pub mod consistency;
pub mod objects;
pub mod persist;
pub mod rebalance;
pub mod slow;
pub mod upstream;

use std::future::Future;
use std::pin::Pin;

use super::stage::{Ctx, Outcome};

type Run = for<'a> fn(&'a Ctx) -> Pin<Box<dyn Future<Output = anyhow::Result<Outcome>> + 'a>>;

/// A case: its name in `CHAOS_CASES`, what it does, and its run.
pub struct Case {
    pub id: &'static str,
    pub what: &'static str,
    pub run: Run,
}

macro_rules! case {
    ($id:literal, $what:literal, $f:path) => {
        Case { id: $id, what: $what, run: |ctx| Box::pin($f(ctx)) }
    };
}

/// Every case, in the order they run.
pub const ALL: &[Case] = &[
    case!("freeze", "kube-apiserver frozen (SIGSTOP) ~20 s; writes after SIGCONT", upstream::apiserver_freeze),
    case!("restart", "kube-apiserver killed (SIGKILL) and restarted", upstream::restart),
    case!("half-open", "watchmux→API server connections frozen without a close ~30 s", upstream::half_open),
    case!(
        "half-open-existing",
        "watchmux's open connections to the API server frozen, new ones fine: moved within seconds, no relist",
        upstream::half_open_existing
    ),
    case!(
        "black-hole-h1",
        "HTTP/1.1 upstream black-holed ~60 s under consistent reads: silence found",
        black_hole::black_hole_h1
    ),
    case!("compaction", "cut, changes, etcd compaction, API server restart; gap clients", compaction::compaction),
    case!("etcd-freeze", "etcd frozen (SIGSTOP) ~10 s", upstream::etcd_freeze),
    case!("non-readers", "watchers that never read beside normal ones", clients::non_readers),
    case!("slow-watchers", "churn of 4 KiB objects; some watchers read at a tenth of its rate", slow::slow_watchers),
    case!("slowloris", "connections sending nothing or a request one byte a second", clients::slowloris),
    case!("watchmux-kill", "watchmux killed (SIGKILL) and restarted", upstream::watchmux_kill),
    case!(
        "watchmux-rollout",
        "watchmux stopped (SIGTERM) and restarted three times: no 410, no relist",
        upstream::watchmux_rollout
    ),
    case!(
        "tier-rollout",
        "a tier of three replicas behind a TCP balancer, each restarted in turn: no 410, no relist",
        upstream::tier_rollout
    ),
    case!(
        "tier-rebalance",
        "two tiers rolled out side by side, with the tier's goaway chance and maximum age and without: connections per replica for 10 minutes",
        rebalance::tier_rebalance
    ),
    case!("churn", "rounds of watchers connecting and leaving: no leak", clients::connect_rounds),
    case!("crd", "a watched CRD deleted and created again", objects::crd_lifecycle),
    case!("large", "ConfigMaps of 100 KiB", objects::large),
    case!("check-drop", "one event lost by the cache: found by the check, healed", consistency::drop_event),
    case!("check-duplicate", "one event replayed past the guard: found, healed", consistency::duplicate_event),
    case!("check-corrupt", "one stored resourceVersion corrupted: found, healed", consistency::corrupt_event),
    case!(
        "check-churn",
        "the check every second at the highest write rate: no false alarm",
        consistency::no_false_alarm
    ),
    case!(
        "persist-truncated",
        "the persisted store cut to a tenth, then to 4,096 bytes, at restarts",
        persist::truncated
    ),
    case!("persist-readonly", "the persist directory a read-only file system", persist::readonly),
    case!("persist-full-disk", "the persisted store's file system filled, then freed", persist::full_disk),
];

/// Cases `all` leaves out: measurements that run for many minutes, each with
/// a make target of its own (`make bench-rebalance`).
pub const BENCH_ONLY: &[&str] = &["tier-rebalance"];

/// The quick set (`make chaos-quick`).
pub const QUICK: &[&str] = &[
    "restart",
    "half-open-existing",
    "compaction",
    "crd",
    "watchmux-rollout",
    "persist-truncated",
    "persist-readonly",
];
