//! States of a cache kept for a while after they were current, so that the
//! later pages of a paginated list (and exact-version reads of that version)
//! are served from the very state the first page came from, as the API
//! server serves them from its own snapshots.
//!
//! Beside them, what the pages already counted: a page cut short by a limit
//! tells how many items remain after it (`remainingItemCount`), and the
//! next page's count is that one less what it served, so a paginated list is
//! counted once, not once a page (which made a list of a million objects in
//! pages of 500 walk half a billion entries).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use compact_str::CompactString;

use super::object::ObjectKey;
use super::store::Snapshot;

/// Snapshots kept at most.
const MAX_KEPT: usize = 32;

/// Page counts kept at most: one a paginated list in progress.
const MAX_COUNTS: usize = 256;

/// Where a page ended: the snapshot's version, the namespace the list is
/// confined to (none across namespaces), and its last key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageEnd {
    pub rv: u64,
    pub namespace: Option<CompactString>,
    pub last: ObjectKey,
}

/// The kept states, by version; each is shared structure (`imbl`), not a copy.
#[derive(Debug)]
pub(crate) struct KeptSnapshots {
    kept: Mutex<BTreeMap<u64, (Snapshot, Instant)>>,
    /// How long a state is kept since it was last asked for: the events
    /// history window, which bounds how long a paginated list may take.
    window: Duration,
    /// How many items remained after each recent page (oldest first).
    counts: Mutex<VecDeque<(PageEnd, u64)>>,
}

impl KeptSnapshots {
    pub(crate) fn new(window: Duration) -> Self {
        Self { kept: Mutex::new(BTreeMap::new()), window, counts: Mutex::default() }
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

    /// Notes that `remaining` items follow the page that ended at `end`.
    pub(crate) fn note_remaining(&self, end: PageEnd, remaining: u64) {
        let mut counts = self.counts.lock();
        if counts.iter().any(|(known, _)| *known == end) {
            return;
        }
        if counts.len() == MAX_COUNTS {
            counts.pop_front();
        }
        counts.push_back((end, remaining));
    }

    /// How many items follow the page that ended at `end`, if a page said so.
    pub(crate) fn remaining_after(&self, end: &PageEnd) -> Option<u64> {
        self.counts.lock().iter().rev().find(|(known, _)| known == end).map(|(_, remaining)| *remaining)
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

    #[test]
    fn page_counts_are_found_by_version_scope_and_key_and_the_oldest_go_first() {
        let kept = KeptSnapshots::new(Duration::from_secs(75));
        let end = |rv, namespace: Option<&str>, name: &str| PageEnd {
            rv,
            namespace: namespace.map(CompactString::from),
            last: ObjectKey::new("ns", name),
        };
        kept.note_remaining(end(7, None, "a"), 40);
        kept.note_remaining(end(7, None, "a"), 99);
        assert_eq!(
            kept.remaining_after(&end(7, None, "a")),
            Some(40),
            "a page's count is its snapshot's: never replaced"
        );
        for (other, why) in [
            (end(8, None, "a"), "another version"),
            (end(7, Some("ns"), "a"), "one namespace"),
            (end(7, None, "b"), "another key"),
        ] {
            assert_eq!(kept.remaining_after(&other), None, "{why}");
        }
        for i in 0..MAX_COUNTS {
            kept.note_remaining(end(9, None, &i.to_string()), i as u64);
        }
        assert_eq!(kept.remaining_after(&end(7, None, "a")), None, "pushed out by newer pages");
        assert_eq!(kept.remaining_after(&end(9, None, "0")), Some(0));
    }
}
