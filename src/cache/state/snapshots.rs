//! States of a cache kept for a while after they were current, so that the
//! later pages of a paginated list (and exact-version reads of that version)
//! are served from the very state the first page came from, as the API
//! server serves them from its own snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::store::Snapshot;

/// Snapshots kept at most.
const MAX_KEPT: usize = 32;

/// The kept states, by version; each is shared structure (`imbl`), not a copy.
#[derive(Debug)]
pub(crate) struct KeptSnapshots {
    kept: Mutex<BTreeMap<u64, (Snapshot, Instant)>>,
    /// How long a state is kept since it was last asked for: the events
    /// history window, which bounds how long a paginated list may take.
    window: Duration,
}

impl KeptSnapshots {
    pub(crate) fn new(window: Duration) -> Self {
        Self { kept: Mutex::new(BTreeMap::new()), window }
    }

    /// Keeps `snap` (again) for later pages that name its version.
    pub(crate) fn keep(&self, snap: &Snapshot) {
        let now = Instant::now();
        let mut kept = self.kept.lock();
        kept.entry(snap.rv).or_insert_with(|| (snap.clone(), now)).1 = now;
        // Pages are read within seconds; keep what the history window keeps,
        // and never more than a few dozen states.
        let window = self.window;
        kept.retain(|_, (_, at)| now.duration_since(*at) <= window);
        while kept.len() > MAX_KEPT {
            let oldest = *kept.keys().next().expect("non-empty");
            kept.remove(&oldest);
        }
    }

    /// The state kept at exactly `rv`.
    pub(crate) fn get(&self, rv: u64) -> Option<Snapshot> {
        self.kept.lock().get(&rv).map(|(snap, _)| snap.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn states_are_kept_for_the_window_and_at_most_a_few_dozen() {
        let kept = KeptSnapshots::new(Duration::from_secs(75));
        for rv in 1..=40 {
            kept.keep(&Snapshot { rv, ..Snapshot::default() });
        }
        assert!(kept.get(8).is_none(), "the oldest beyond {MAX_KEPT} go first");
        assert!(kept.get(9).is_some() && kept.get(40).is_some());
        tokio::time::advance(Duration::from_secs(76)).await;
        kept.keep(&Snapshot { rv: 41, ..Snapshot::default() });
        assert!(kept.get(40).is_none(), "past the window");
        assert_eq!(kept.get(41).map(|s| s.rv), Some(41));
    }
}
