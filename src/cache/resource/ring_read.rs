//! Ring reads: how a watcher that fell behind live
//! delivery (see `watcher`) reads what it missed, and when it rejoins.
//!
//! The watcher's body keeps its position: the newest version it sent
//! (events and bookmarks) or passed over in the ring (events its filter
//! does not match). Everything at or below the position is done with, so a
//! read takes the ring's events after it, filters them as the dispatcher
//! would, and queues what matches. A read that reaches the ring's newest
//! event puts the watcher back on live delivery; it holds the state's read
//! lock throughout, and the writer holds the write lock from an event's push
//! into the ring to the end of its dispatch, so each event is in that read or
//! offered live after it: no gap, no duplicate (`cache/slow_watcher_model.rs`
//! checks this over random interleavings).
//!
//! A read examines at most [`RING_READ`] entries, under the read lock for
//! that long only: the writer waits for at most one such read (parking_lot's
//! lock lets no new reader in ahead of a waiting writer), and a slow watcher
//! holds at most one read's deliveries, Arcs of the ring's own events.
//!
//! When the events after the position are gone from the ring (evicted, or
//! a relist started it over), the watcher cannot be brought up to date: it
//! ends with 410 Expired, "too old resource version", in the stream, which
//! is what kube-apiserver's cacher answers a watch from that version. The
//! cacher closes an unresponsive watcher instead, without an error; but its
//! client's next step is to watch again from the last version it got, which
//! would get this very 410 here, one connection later.

use super::ResourceCache;
use crate::cache::delivery::watcher::{Delivery, WatcherHandle};
use crate::cache::state::history::TooOld;

/// The most ring entries one read examines; a few in tests, so that the
/// models see reads that stop short of the ring's newest event.
pub(crate) const RING_READ: usize = if cfg!(test) { 3 } else { 256 };

impl ResourceCache {
    /// Reads the ring after `position` for a watcher that is behind and
    /// queues what it sees; returns the position reached. Once the ring no
    /// longer reaches back to `position`, the watcher is expired with 410
    /// naming `sent`, the last version its client got, and `Err` is returned.
    pub(crate) fn read_ring(&self, handle: &WatcherHandle, position: u64, sent: u64) -> Result<u64, TooOld> {
        let st = self.state.read();
        let read = st.history.after_position(position).map(|ring| {
            let mut reached = position;
            let mut deliveries = Vec::new();
            for (rv, event) in ring.take(RING_READ) {
                reached = rv;
                deliveries.extend(Delivery::for_filter(event, &handle.filter));
            }
            (reached, deliveries)
        });
        let (reached, deliveries) = match read {
            Ok(read) => read,
            Err(TooOld { oldest, .. }) => {
                drop(st);
                let too_old = TooOld { requested: sent, oldest };
                handle.expire(too_old.clone());
                self.fanout.expired_behind_ring(handle);
                return Err(too_old);
            }
        };
        let reached_newest = reached >= st.history.newest_rv();
        handle.refill(deliveries, reached_newest);
        drop(st);
        if reached_newest {
            self.fanout.rejoined_live();
        }
        Ok(reached)
    }
}
