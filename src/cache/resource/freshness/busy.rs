//! When a consistent LIST should not even probe: in a busy cluster.
//!
//! A LIST's proof is the probe, and it pays off only when the probe finds
//! the cache current; when it finds it behind, the LIST passes through after
//! it, and has cost two round trips to the API server instead of one. A
//! cache found behind again by the first probe after a catch-up proved it
//! current (twice in a row, [`BEHIND_IN_A_ROW`]) is in a cluster whose
//! revision moves faster than a catch-up (a second or two): its LISTs pass
//! through without a probe for [`COOL_OFF`], then it is probed again. In a
//! quiet cluster this never happens (the revision moves with lease renewals,
//! every few seconds), and nearly every LIST is served from the cache.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Probes in a row that found the cache behind before LISTs stop probing.
const BEHIND_IN_A_ROW: u32 = 2;

/// How long LISTs then pass through without a probe.
pub(crate) const COOL_OFF: Duration = Duration::from_secs(10);

/// What the last probes found.
#[derive(Debug, Default)]
pub(crate) struct BusyCluster(Mutex<State>);

#[derive(Debug, Default)]
struct State {
    behind_in_a_row: u32,
    skip_until: Option<Instant>,
}

impl BusyCluster {
    /// Whether a LIST arriving at `now` should pass through without probing.
    pub(crate) fn skip_probe(&self, now: Instant) -> bool {
        self.0.lock().skip_until.is_some_and(|until| now < until)
    }

    /// What a probe at `now` found.
    pub(crate) fn probed(&self, current: bool, now: Instant) {
        let mut state = self.0.lock();
        if current {
            state.behind_in_a_row = 0;
            return;
        }
        state.behind_in_a_row += 1;
        if state.behind_in_a_row >= BEHIND_IN_A_ROW {
            state.behind_in_a_row = 0;
            state.skip_until = Some(now + COOL_OFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_twice_in_a_row_stops_probing_for_the_cool_off_then_probes_again() {
        let busy = BusyCluster::default();
        let t0 = Instant::now();
        busy.probed(false, t0);
        assert!(!busy.skip_probe(t0), "once behind: a write elsewhere, probe again after the catch-up");
        busy.probed(true, t0);
        busy.probed(false, t0);
        assert!(!busy.skip_probe(t0), "a current probe in between starts the count again");
        busy.probed(false, t0);
        assert!(busy.skip_probe(t0 + COOL_OFF - Duration::from_millis(1)));
        assert!(!busy.skip_probe(t0 + COOL_OFF), "then one probe more");
        busy.probed(false, t0 + COOL_OFF);
        assert!(!busy.skip_probe(t0 + COOL_OFF), "the count starts again after a cool-off");
    }
}
