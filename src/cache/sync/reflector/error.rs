//! Every way a reflector's list or watch ends short of a normal end, as one
//! typed error ([`SyncError`]), in the shape of kube-runtime's
//! `watcher::Error`: each variant carries the error it came from, so a log
//! line shows the whole chain (`error::error_chain`) and the code that
//! decides what comes next (relist, back off, close the cache) matches on
//! variants, never on text.
//!
//! The `cause` label of `watchmux_upstream_relists_total` is read off a
//! variant by one function, [`SyncError::relist_cause`].

use std::time::Duration;

use http::StatusCode;

use crate::cache::sync::watch_list::WatchListError;
use crate::cache::upstream_wire::{LineEnd, ReflectorError, StreamEnd};

/// Why a reflector's full list or watch ended other than by the upstream
/// closing a watch at its timeout (which resumes from its version, no
/// error). A reflector stopped by watchmux's shutdown is not here: that
/// ends it from outside its steps (`Exit::Stopped`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    /// A paginated LIST failed: back off and list again.
    #[error("the paginated upstream list failed")]
    List(#[source] ReflectorError),
    /// A watch-list failed or ended before its initial events did: back
    /// off and list again.
    #[error("the upstream watch-list failed")]
    WatchList(#[source] WatchListError),
    /// The upstream answered 404 for the collection (a deleted CRD, a
    /// version no longer served): the cache closes.
    #[error("the upstream no longer serves the resource")]
    Gone,
    /// 410, on opening the watch or as an ERROR event in it: the upstream
    /// no longer has the version asked for. Relist.
    #[error("the upstream expired our version")]
    Expired,
    /// The API server's watch cache is not at the version asked for (504
    /// `ResourceVersionTooLarge`): list, which tells a lagging API server
    /// from another cluster.
    #[error("the upstream has not reached our version")]
    TooLarge(#[source] ReflectorError),
    /// No answer to the watch request, or a refusal: back off, then watch
    /// again from the same version.
    #[error("opening the upstream watch failed")]
    WatchStart(#[source] ReflectorError),
    /// The open watch broke (its connection, a line longer than any event,
    /// an ERROR event other than 410): back off and resume.
    #[error("the upstream watch failed")]
    Watch(#[source] StreamEnd),
    /// A watch line that cannot be read as a change: back off and resume.
    #[error("an upstream watch line could not be decoded")]
    Decode(#[source] LineEnd),
    /// No byte from the watch for this long: a connection that died
    /// without a FIN or RST. Back off and resume.
    #[error("no byte from the upstream watch for {0:?}")]
    Silent(Duration),
    /// Another cluster was found (by this cache or another, during the
    /// watch or by the check before it resumed): relist as a new start.
    #[error("the upstream is another cluster")]
    NewCluster,
    /// The consistency check asked for a relist because the upstream's
    /// version went below the cache's (another cluster).
    #[error("the upstream's version went below the cache's")]
    WentBack,
    /// The consistency check found the cache different from the upstream:
    /// relist.
    #[error("the consistency check found the cache different from the upstream")]
    Inconsistent,
}

impl SyncError {
    /// A full list's failure: 404 is [`Gone`](Self::Gone).
    pub(crate) fn listing(err: ReflectorError) -> Self {
        if is_not_found(&err) { Self::Gone } else { Self::List(err) }
    }

    /// A watch-list's failure: 404 is [`Gone`](Self::Gone), as for a LIST.
    pub(crate) fn watch_listing(err: WatchListError) -> Self {
        match err {
            WatchListError::Failed(err) if is_not_found(&err) => Self::Gone,
            err => Self::WatchList(err),
        }
    }

    /// How reading an open watch ended, when it did not close normally.
    pub(crate) fn watch_ended(end: StreamEnd) -> Self {
        match end {
            StreamEnd::Silent(silence) => Self::Silent(silence),
            StreamEnd::Line(LineEnd::Expired(_)) => Self::Expired,
            StreamEnd::Line(line @ LineEnd::ErrorEvent(_)) => Self::Watch(StreamEnd::Line(line)),
            StreamEnd::Line(line) => Self::Decode(line),
            end @ (StreamEnd::Closed | StreamEnd::Broken(_) | StreamEnd::Overlong) => Self::Watch(end),
        }
    }

    /// The `cause` label of `watchmux_upstream_relists_total` when this end
    /// is followed by a relist; `None` when it is not (a back-off, or the
    /// end of the cache). The one place the labels are written.
    pub(crate) fn relist_cause(&self) -> Option<&'static str> {
        match self {
            Self::Expired => Some("expired"),
            Self::TooLarge(_) => Some("too_large"),
            Self::NewCluster | Self::WentBack => Some("new_cluster"),
            Self::Inconsistent => Some("inconsistent"),
            Self::List(_)
            | Self::WatchList(_)
            | Self::Gone
            | Self::WatchStart(_)
            | Self::Watch(_)
            | Self::Decode(_)
            | Self::Silent(_) => None,
        }
    }
}

fn is_not_found(err: &ReflectorError) -> bool {
    matches!(err, ReflectorError::Status { status: StatusCode::NOT_FOUND, .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exported label values: dashboards and alerts name them.
    #[test]
    fn relist_causes_keep_their_metric_labels() {
        let refusal = || ReflectorError::Status { status: StatusCode::GATEWAY_TIMEOUT, body: String::new() };
        assert_eq!(SyncError::Expired.relist_cause(), Some("expired"));
        assert_eq!(SyncError::TooLarge(refusal()).relist_cause(), Some("too_large"));
        assert_eq!(SyncError::NewCluster.relist_cause(), Some("new_cluster"));
        assert_eq!(SyncError::WentBack.relist_cause(), Some("new_cluster"));
        assert_eq!(SyncError::Inconsistent.relist_cause(), Some("inconsistent"));
        assert_eq!(SyncError::WatchStart(refusal()).relist_cause(), None);
        assert_eq!(SyncError::Silent(Duration::from_secs(1)).relist_cause(), None);
    }

    #[test]
    fn a_410_in_the_watch_relists_and_other_lines_back_off() {
        assert!(matches!(SyncError::watch_ended(StreamEnd::Line(LineEnd::Expired(String::new()))), SyncError::Expired));
        let error_event = StreamEnd::Line(LineEnd::ErrorEvent("{}".into()));
        assert!(matches!(SyncError::watch_ended(error_event), SyncError::Watch(_)));
        let unknown = StreamEnd::Line(LineEnd::UnknownType("X".into()));
        assert!(matches!(SyncError::watch_ended(unknown), SyncError::Decode(LineEnd::UnknownType(_))));
        let silent = SyncError::watch_ended(StreamEnd::Silent(Duration::from_secs(12)));
        assert_eq!(silent.to_string(), "no byte from the upstream watch for 12s");
    }

    #[test]
    fn a_404_for_either_list_form_closes_the_cache() {
        let not_found = || ReflectorError::Status { status: StatusCode::NOT_FOUND, body: String::new() };
        assert!(matches!(SyncError::listing(not_found()), SyncError::Gone));
        assert!(matches!(SyncError::watch_listing(WatchListError::Failed(not_found())), SyncError::Gone));
        let unavailable = ReflectorError::Status { status: StatusCode::SERVICE_UNAVAILABLE, body: String::new() };
        assert!(matches!(SyncError::listing(unavailable), SyncError::List(_)));
        let ended = WatchListError::Ended(StreamEnd::Closed);
        assert!(matches!(SyncError::watch_listing(ended), SyncError::WatchList(_)));
    }
}
