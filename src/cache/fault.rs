//! Test-only faults in what the writer applies to a store, to prove that the
//! consistency check (`consistency_check.rs`) finds them and a relist heals them.
//!
//! Compiled only into unit tests and builds with the `fault-injection`
//! cargo feature (the e2e suite's and the chaos driver's); never into the
//! release binary (`integration/scripts/release-has-no-faults.sh` checks
//! it). Armed from `WATCHMUX_FAULT_INJECT`, a comma-separated list of
//! `<fault>:<resource>:<name>`, each firing once, at the first event of an
//! object named `<name>` (any namespace) in the cache of `<resource>` (its
//! metric label: `configmaps`, `deployments.apps`):
//!
//! - `drop`: the event is not applied at all: neither the store, the
//!   history nor any watcher gets it (an event lost). It shows once the
//!   cache moves past its version (a later event or a bookmark);
//! - `duplicate`: the event is applied to the store again, past the replay
//!   guard, after the object's next event (a stale replay: the older
//!   version, or an object brought back after its deletion);
//! - `corrupt`: the stored object's resourceVersion is made one less than
//!   the upstream's.
//!
//! `duplicate` and `corrupt` touch only the store (the history needs
//! increasing versions): watchers got the true events. What the check
//! compares is the store.
//!
//! One fault is process-wide, with no resource or name: `no-backfill` turns
//! the backfill off (`resource/backfill.rs`), so that a benchmark can show
//! side by side what a restart cost before it: a watch older than the
//! cache's history gets the cache's own 410, as it did then.

use std::sync::Arc;

use parking_lot::Mutex;

use super::state::event::CacheEvent;
use super::state::object::{CachedObject, ObjectKey};
use super::state::store::Store;
use crate::encode::watch::EventType;

/// The variable that arms faults.
const ENV: &str = "WATCHMUX_FAULT_INJECT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Drop,
    Duplicate,
    Corrupt,
}

#[derive(Debug)]
enum Armed {
    /// Waiting for the first event of the object named.
    Waiting(Fault, String),
    /// `duplicate`: the object's first change, to apply again after its next.
    Held(ObjectKey, Arc<CachedObject>),
}

/// The process-wide fault that turns the backfill off.
const NO_BACKFILL: &str = "no-backfill";

/// Whether `WATCHMUX_FAULT_INJECT` names `no-backfill` (read once).
#[cfg(feature = "fault-injection")]
pub(crate) fn backfill_disabled() -> bool {
    static DISABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DISABLED.get_or_init(|| names_no_backfill(&std::env::var(ENV).unwrap_or_default()))
}

fn names_no_backfill(spec: &str) -> bool {
    spec.split(',').any(|one| one.trim() == NO_BACKFILL)
}

/// One cache's armed faults.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: Mutex<Vec<Armed>>,
}

impl Faults {
    /// The faults `WATCHMUX_FAULT_INJECT` arms for the cache of `resource`.
    pub(crate) fn from_env(resource: &str) -> Self {
        Self::parse(&std::env::var(ENV).unwrap_or_default(), resource)
    }

    /// The faults `spec` arms for the cache of `resource`.
    pub(crate) fn parse(spec: &str, resource: &str) -> Self {
        let armed = spec
            .split(',')
            .filter(|one| !one.trim().is_empty())
            .filter_map(|one| {
                let mut parts = one.trim().splitn(3, ':');
                let fault = match parts.next()? {
                    "drop" => Fault::Drop,
                    "duplicate" => Fault::Duplicate,
                    "corrupt" => Fault::Corrupt,
                    NO_BACKFILL => return None,
                    other => {
                        tracing::warn!(fault = other, "unknown fault in {ENV}");
                        return None;
                    }
                };
                (parts.next()? == resource).then(|| Armed::Waiting(fault, parts.next().unwrap_or_default().to_owned()))
            })
            .collect();
        Self { armed: Mutex::new(armed) }
    }

    /// Called by the writer before it applies an event of `object`: true
    /// when the event is to be lost.
    pub(crate) fn drops(&self, object: &CachedObject) -> bool {
        let mut armed = self.armed.lock();
        let found =
            armed.iter().position(|a| matches!(a, Armed::Waiting(Fault::Drop, name) if *name == object.key.name));
        if let Some(i) = found {
            tracing::warn!(fault = "Drop", object = %object.key.name, rv = object.rv, "fault injected");
            armed.remove(i);
        }
        found.is_some()
    }

    /// Called by the writer after `event` was applied to `store`.
    pub(crate) fn after_apply(&self, store: &mut Store, event: &CacheEvent) {
        let mut armed = self.armed.lock();
        if armed.is_empty() {
            return;
        }
        let key = &event.object.key;
        let mut fired = None;
        for (i, a) in armed.iter_mut().enumerate() {
            match a {
                Armed::Waiting(fault, name) if *name == key.name && *fault != Fault::Drop => {
                    tracing::warn!(fault = ?fault, object = %key.name, rv = event.rv, "fault injected");
                    match fault {
                        // Before the event, in `drops`.
                        Fault::Drop => {}
                        Fault::Corrupt if event.kind != EventType::Deleted => {
                            let wrong = Arc::new(event.object.with_resource_version(event.object.rv.saturating_sub(1)));
                            store.put_behind_events(wrong);
                            fired = Some(i);
                        }
                        Fault::Corrupt => {}
                        Fault::Duplicate => *a = Armed::Held(key.clone(), event.object.clone()),
                    }
                    break;
                }
                Armed::Held(held, object) if held == key && object.rv != event.rv => {
                    tracing::warn!(fault = "Duplicate", object = %key.name, rv = object.rv, "fault injected: replayed");
                    store.put_behind_events(object.clone());
                    fired = Some(i);
                    break;
                }
                _ => {}
            }
        }
        if let Some(i) = fired {
            armed.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::cm;

    /// As the writer applies an event.
    fn apply(store: &mut Store, faults: &Faults, kind: EventType, name: &str, rv: u64) {
        let object = cm(name, rv, "");
        if faults.drops(&object) {
            return;
        }
        let event = store.apply(kind, Arc::new(object));
        faults.after_apply(store, &event);
    }

    fn held(store: &Store) -> Vec<(String, u64)> {
        store.snapshot().objects.iter().map(|(k, o)| (k.name.to_string(), o.rv)).collect()
    }

    #[test]
    fn faults_fire_once_for_the_named_object_of_their_resource() {
        let faults = Faults::parse("drop:configmaps:a, corrupt:configmaps:b,drop:secrets:c", "configmaps");
        let mut store = Store::default();
        apply(&mut store, &faults, EventType::Added, "c", 1);
        apply(&mut store, &faults, EventType::Added, "a", 2);
        apply(&mut store, &faults, EventType::Added, "b", 3);
        assert_eq!(held(&store), [("b".to_owned(), 2), ("c".to_owned(), 1)], "a dropped, b one version short");
        assert_eq!(store.rv(), 3, "the corruption leaves the store's version alone");
        apply(&mut store, &faults, EventType::Added, "a", 4);
        apply(&mut store, &faults, EventType::Modified, "b", 5);
        assert_eq!(held(&store), [("a".to_owned(), 4), ("b".to_owned(), 5), ("c".to_owned(), 1)], "once each");
    }

    #[test]
    fn a_duplicate_is_replayed_after_the_objects_next_event() {
        let faults = Faults::parse("duplicate:configmaps:a", "configmaps");
        let mut store = Store::default();
        apply(&mut store, &faults, EventType::Added, "a", 2);
        apply(&mut store, &faults, EventType::Added, "b", 3);
        assert_eq!(held(&store), [("a".to_owned(), 2), ("b".to_owned(), 3)]);
        apply(&mut store, &faults, EventType::Deleted, "a", 4);
        assert_eq!(held(&store), [("a".to_owned(), 2), ("b".to_owned(), 3)], "brought back by the replay");
        apply(&mut store, &faults, EventType::Deleted, "a", 5);
        assert_eq!(held(&store), [("b".to_owned(), 3)], "once");
    }

    #[test]
    fn no_backfill_is_process_wide_and_arms_no_cache_fault() {
        assert!(names_no_backfill("drop:configmaps:a, no-backfill"));
        assert!(!names_no_backfill("drop:configmaps:no-backfill"));
        let faults = Faults::parse("no-backfill", "configmaps");
        assert!(faults.armed.lock().is_empty());
    }

    #[test]
    fn nothing_armed_for_another_resource_or_an_unknown_fault() {
        assert!(Faults::parse("drop:secrets:a,explode:configmaps:a,", "configmaps").armed.lock().is_empty());
    }
}
