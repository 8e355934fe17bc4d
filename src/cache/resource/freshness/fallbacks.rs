//! How many unproven watch-lists a resource passes through: a few.
//!
//! A watch-list from `""` whose proof fails (the probe answered late, or the
//! catch-up's bookmark did) used to pass through, always. One client's
//! fallback is cheap insurance; thousands at once are not. bench-scale's
//! storm of 5,000 kubelets (25,000 watch-lists arriving while the two cores
//! did TLS handshakes) had its probes answer late, and 18,172 watch-lists
//! fell back to kube-apiserver: each a consistent read, its initial events
//! and a watch held, the load the cache exists to remove, which made the
//! probes later still.
//!
//! So each resource passes through at most [`BURST`] unproven watch-lists
//! at once and [`PER_SECOND`] after that (a token bucket: a quiet cluster's
//! occasional late proof still passes through, as before). The rest wait for
//! the next proof, and if that fails too, get what kube-apiserver answers a
//! watch-list its own watch cache cannot prove fresh within its three
//! seconds: a watch whose one event is the 504 "Too large resource version"
//! Status ([`too_large`]). client-go's reflector (v0.37 `watchList`) takes
//! that error as retriable and asks for the watch-list again at once; each
//! retry waits for its own proof here, so a storm's retries are paced by the
//! proofs and never reach the API server beyond the budget. (On other
//! watch-list errors client-go falls back to a LIST at version 0, which the
//! cache serves without a proof.)

use http::StatusCode;
use parking_lot::Mutex;
use serde_json::{Map, json};
use tokio::time::Instant;

use crate::encode::status::{Status, StatusReason};

/// Unproven watch-lists a resource may pass through at once.
pub(crate) const BURST: f64 = 4.0;

/// And how many a second after that.
pub(crate) const PER_SECOND: f64 = 1.0;

/// A resource's allowance of unproven watch-lists to pass through.
#[derive(Debug)]
pub(crate) struct FallbackBudget(Mutex<Bucket>);

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Option<Instant>,
}

impl Default for FallbackBudget {
    fn default() -> Self {
        Self(Mutex::new(Bucket { tokens: BURST, updated: None }))
    }
}

impl FallbackBudget {
    /// Whether one more unproven watch-list may pass through at `now`
    /// (taking its share of the allowance if so).
    pub(crate) fn try_take(&self, now: Instant) -> bool {
        let mut bucket = self.0.lock();
        if let Some(updated) = bucket.updated {
            let refill = now.saturating_duration_since(updated).as_secs_f64() * PER_SECOND;
            bucket.tokens = (bucket.tokens + refill).min(BURST);
        }
        bucket.updated = Some(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The Status kube-apiserver's watch cache ends a watch-list with when it
/// cannot reach the version it must serve from within its three seconds
/// (k8s.io/apiserver's storage `NewTooLargeResourceVersionError`, as the
/// ERROR event of an otherwise empty watch): `required` is the upstream's
/// version the proof was after (the cache's next one when the probe never
/// answered), `current` the cache's.
pub(crate) fn too_large(required: u64, current: u64) -> Status {
    let mut details = Map::new();
    details.insert(
        "causes".into(),
        json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
    );
    let mut status = Status::new(
        StatusCode::GATEWAY_TIMEOUT,
        StatusReason::Timeout,
        format!("Timeout: Too large resource version: {required}, current: {current}"),
    )
    .retry_after(1);
    status.details = Some(details);
    status
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_passes_then_one_a_second() {
        let budget = FallbackBudget::default();
        let start = Instant::now();
        let taken = (0..10).filter(|_| budget.try_take(start)).count();
        assert_eq!(taken, BURST as usize, "the burst, and no more at once");
        assert!(!budget.try_take(start + Duration::from_millis(900)), "not yet a second");
        assert!(budget.try_take(start + Duration::from_millis(1000)));
        assert!(!budget.try_take(start + Duration::from_millis(1100)));
        // A long quiet spell refills the burst, not more.
        let later = start + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| budget.try_take(later)).count(), BURST as usize);
    }

    #[test]
    fn the_status_is_the_api_server_s_too_large_resource_version() {
        // As kube-apiserver v1.37 writes it (seen on the wire, JSON field order included).
        let want = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 120, current: 100","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#;
        assert_eq!(too_large(120, 100).to_json().to_string(), want);
        // A protobuf watch gets it in protobuf: causes and all have a place there.
        assert!(too_large(120, 100).to_protobuf().is_ok());
    }
}
