//! The API server's memory of which impersonation mode last worked for a
//! requestor (`impersonationModesTracker`): that mode is tried first next
//! time, and the identity granted depends on it. A service account allowed
//! both the legacy mode and `arbitrary-node` that impersonates
//! `system:node:n1` once through the legacy mode keeps getting the legacy
//! identity (no `system:nodes` group) from then on; trying the modes in
//! their fixed order instead would grant the node's groups where the API
//! server does not. Keyed by the requestor's name, as there, and bounded:
//! when full it starts afresh (an entry only orders the modes).

use std::collections::HashMap;

/// Entries kept at most.
const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct ModeTracker(parking_lot::Mutex<HashMap<String, &'static str>>);

impl ModeTracker {
    /// The mode that last worked for `requestor`, if any.
    pub(crate) fn last(&self, requestor: &str) -> Option<&'static str> {
        self.0.lock().get(requestor).copied()
    }

    /// Remembers that `mode` worked for `requestor`.
    pub(crate) fn worked(&self, requestor: &str, mode: &'static str) {
        let mut map = self.0.lock();
        if map.len() >= CAPACITY && !map.contains_key(requestor) {
            map.clear();
        }
        map.insert(requestor.to_owned(), mode);
    }
}

/// `attempts` reordered as the API server tries them: the one `last` names
/// first (when it applies), then the others in their order.
pub(crate) fn in_tried_order<T>(
    mut attempts: Vec<T>,
    last: Option<&'static str>,
    mode: impl Fn(&T) -> &'static str,
) -> Vec<T> {
    if let Some(i) = last.and_then(|last| attempts.iter().position(|a| mode(a) == last)) {
        let first = attempts.remove(i);
        attempts.insert(0, first);
    }
    attempts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_mode_that_worked_goes_first() {
        let modes = vec!["arbitrary-node", "legacy"];
        assert_eq!(in_tried_order(modes.clone(), None, |m| m), ["arbitrary-node", "legacy"]);
        assert_eq!(in_tried_order(modes.clone(), Some("legacy"), |m| m), ["legacy", "arbitrary-node"]);
        // A remembered mode that does not apply to this request changes nothing.
        assert_eq!(in_tried_order(modes, Some("serviceaccount"), |m| m), ["arbitrary-node", "legacy"]);
    }

    #[test]
    fn the_tracker_is_bounded() {
        let t = ModeTracker::default();
        for i in 0..CAPACITY {
            t.worked(&format!("u{i}"), "legacy");
        }
        assert_eq!(t.last("u0"), Some("legacy"));
        t.worked("u0", "user-info");
        assert_eq!(t.last("u0"), Some("user-info"), "an update does not clear");
        t.worked("new", "legacy");
        assert_eq!((t.last("u1"), t.last("new")), (None, Some("legacy")));
    }
}
