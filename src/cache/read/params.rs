//! The query parameters of a LIST, GET or WATCH, parsed the way the API
//! server reads them, and only as far as the cache needs: once per read, by
//! the read plan (`read::plan::request`), which hands them down.
//!
//! What it mirrors (k8s.io/apiserver `endpoints/handlers/get.go`): the
//! handlers' `metainternalversionscheme.ParameterCodec.DecodeParameters` of
//! `req.URL.Query()` (Go's `url.ParseQuery`: `GoQuery`) into
//! `metainternalversion.ListOptions` for a LIST or WATCH (`ListResource`),
//! `metav1.GetOptions` for a GET, with apimachinery's query conversions
//! (`runtime.Convert_Slice_string_To_bool` and `_To_Pointer_bool`: false
//! only for `0` and `false`; `Convert_Slice_string_To_int64`:
//! `strconv.ParseInt`; the first value of a repeated key). A
//! `resourceVersion` is a number as storage's
//! `APIObjectVersioner.ParseResourceVersion` reads it, and `?timeout=` a Go
//! duration (`time.ParseDuration`, `go_rules::duration`). The options'
//! validation, `metainternalversionvalidation.ValidateListOptions`
//! (k8s.io/apimachinery `apis/meta/internalversion/validation`), is where
//! each rule is read: the plan (a GET's list-only parameters, the legacy
//! `/watch/` path), `serve::list` (`list_state`) and `serve`'s watch.
//!
//! Anything the cache does not understand, or that the API server would
//! reject, is reported as [`Unsupported`]: the request then passes through and
//! the API server gives its own answer, exact to the byte.

use crate::cache::reason::Reason;
use crate::go_rules::strconv::{parse_int, parse_uint};
use crate::request::GoQuery;

/// `resourceVersion` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rv {
    /// Absent or empty: the most recent (a consistent read, for LIST and GET).
    Unset,
    /// `"0"`: any version.
    Any,
    /// A specific version.
    At(u64),
}

/// `resourceVersionMatch` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RvMatch {
    Unset,
    NotOlderThan,
    Exact,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadParams {
    pub rv: Rv,
    pub rv_match: RvMatch,
    /// `limit`, when positive.
    pub limit: Option<u64>,
    pub continue_token: Option<String>,
    pub label_selector: String,
    pub field_selector: String,
    /// `Some(0)` for a negative `timeoutSeconds` (the watch ends at once); `None` for 0 or none.
    pub timeout_seconds: Option<u64>,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
    /// `includeObject`, as given: read only for a Table (`serve::as_table`).
    pub include_object: Option<String>,
    /// `watch`, as Go reads a flag. Whether the read is a watch is the
    /// request classifier's to say; this is read on the legacy `/watch/`
    /// path, where it changes how the options are validated (`plan`).
    pub watch: bool,
}

/// Why a request's parameters keep it out of the cache (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsupported(pub Reason);

impl ReadParams {
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, Unsupported> {
        let mut p = ReadParams {
            rv: Rv::Unset,
            rv_match: RvMatch::Unset,
            limit: None,
            continue_token: None,
            label_selector: String::new(),
            field_selector: String::new(),
            timeout_seconds: None,
            allow_bookmarks: false,
            send_initial_events: None,
            include_object: None,
            watch: false,
        };
        // Read as the API server reads it: pairs Go drops (a `;`, a malformed
        // escape) do not exist, and a value that was not UTF-8 cannot be
        // reproduced here, so the API server answers.
        let query = GoQuery::parse(query.unwrap_or(""));
        if query.is_lossy() {
            return Err(Unsupported(Reason::Parameters));
        }
        let mut seen: Vec<&str> = Vec::new();
        for (key, value) in query.pairs() {
            // Go's url.Values.Get takes the first value of a repeated key.
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            match key {
                "watch" => p.watch = flag(value),
                "resourceVersion" => {
                    p.rv = match value {
                        "" => Rv::Unset,
                        "0" => Rv::Any,
                        v => Rv::At(parse_uint(v).ok_or(Unsupported(Reason::InvalidResourceVersion))?),
                    }
                }
                "resourceVersionMatch" => {
                    p.rv_match = match value {
                        "" => RvMatch::Unset,
                        "NotOlderThan" => RvMatch::NotOlderThan,
                        "Exact" => RvMatch::Exact,
                        _ => return Err(Unsupported(Reason::InvalidParameters)),
                    }
                }
                "limit" => {
                    let n = parse_int(value).ok_or(Unsupported(Reason::InvalidParameters))?;
                    p.limit = (n > 0).then_some(n as u64);
                }
                "continue" => p.continue_token = Some(value.to_owned()).filter(|t| !t.is_empty()),
                "labelSelector" => p.label_selector = value.to_owned(),
                "fieldSelector" => p.field_selector = value.to_owned(),
                "timeoutSeconds" => {
                    let n = parse_int(value).ok_or(Unsupported(Reason::InvalidParameters))?;
                    // 0 means none (the server picks one); a negative one ends
                    // the watch at once, as in the API server.
                    p.timeout_seconds = (n != 0).then_some(n.max(0) as u64);
                }
                "allowWatchBookmarks" => p.allow_bookmarks = flag(value),
                "sendInitialEvents" => p.send_initial_events = Some(flag(value)),
                "includeObject" => p.include_object = Some(value.to_owned()),
                // client-go sends its request timeout on every call. It bounds
                // how long the API server works on a request; a cached answer is
                // immediate and a watch's length is `timeoutSeconds`, so it
                // changes nothing here, as long as the API server would accept it.
                "timeout" if is_go_duration(value) => {}
                "timeout" => return Err(Unsupported(Reason::InvalidParameters)),
                // Anything else may change the answer (pretty, as, ...): the API server decides.
                other => {
                    tracing::debug!(parameter = other, "query parameter left to the API server");
                    return Err(Unsupported(Reason::Parameters));
                }
            }
        }
        Ok(p)
    }
}

/// A `?timeout=` kube-apiserver takes: a Go duration (`9m43s`, `1.5h`,
/// `300ms`) that `time.ParseDuration` reads, without a sign (a negative
/// timeout is refused anyway: the request passes through for the API server's
/// own answer).
fn is_go_duration(s: &str) -> bool {
    !s.starts_with(['-', '+']) && crate::go_rules::duration::parse(s).is_some()
}

use crate::request::query_bool as flag;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_go_watch() {
        let p = ReadParams::parse(Some(
            "allowWatchBookmarks=true&resourceVersion=1234&timeoutSeconds=417&watch=true&labelSelector=app%3Dx",
        ))
        .unwrap();
        assert!(p.allow_bookmarks);
        assert_eq!(p.rv, Rv::At(1234));
        assert_eq!(p.timeout_seconds, Some(417));
        assert_eq!(p.label_selector, "app=x");
    }

    #[test]
    fn a_negative_timeout_ends_the_watch_at_once_and_zero_means_none() {
        let timeout = |q: &str| ReadParams::parse(Some(q)).unwrap().timeout_seconds;
        assert_eq!(timeout("watch=1&timeoutSeconds=-5"), Some(0));
        assert_eq!(timeout("watch=1&timeoutSeconds=0"), None);
        assert_eq!(timeout("watch=1&timeoutSeconds=30"), Some(30));
        assert!(ReadParams::parse(Some("watch=1&timeoutSeconds=x")).is_err());
    }

    #[test]
    fn a_watch_list() {
        let p = ReadParams::parse(Some(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=",
        ))
        .unwrap();
        assert_eq!(p.send_initial_events, Some(true));
        assert_eq!(p.rv_match, RvMatch::NotOlderThan);
        assert_eq!(p.rv, Rv::Unset);
    }

    #[test]
    fn list_parameters() {
        let p = ReadParams::parse(Some("resourceVersion=0&limit=500")).unwrap();
        assert_eq!((p.rv, p.limit), (Rv::Any, Some(500)));
        let p = ReadParams::parse(Some("limit=0&continue=")).unwrap();
        assert_eq!((p.limit, p.continue_token), (None, None));
    }

    #[test]
    fn what_the_cache_leaves_to_the_api_server() {
        assert_eq!(ReadParams::parse(Some("resourceVersion=abc")), Err(Unsupported(Reason::InvalidResourceVersion)));
        // Go's ParseUint takes no sign; Rust's u64 parse would read 5.
        assert_eq!(ReadParams::parse(Some("resourceVersion=%2B5")), Err(Unsupported(Reason::InvalidResourceVersion)));
        assert_eq!(ReadParams::parse(Some("pretty=true")), Err(Unsupported(Reason::Parameters)));
        assert_eq!(ReadParams::parse(Some("limit=x")), Err(Unsupported(Reason::InvalidParameters)));
        assert_eq!(ReadParams::parse(Some("resourceVersionMatch=Newest")), Err(Unsupported(Reason::InvalidParameters)));
    }

    #[test]
    fn client_go_request_timeouts_are_accepted_when_well_formed() {
        for ok in ["9m43s", "32s", "1h2m3.5s", "300ms", "0"] {
            assert!(ReadParams::parse(Some(&format!("timeout={ok}&watch=1"))).is_ok(), "{ok}");
        }
        for bad in ["", "5", "1x", "-1s", "s", "1..2s"] {
            assert_eq!(
                ReadParams::parse(Some(&format!("timeout={bad}"))),
                Err(Unsupported(Reason::InvalidParameters)),
                "{bad}"
            );
        }
    }

    #[test]
    fn watch_is_a_go_flag_read_from_its_first_value() {
        let watch = |q: &str| ReadParams::parse(Some(q)).unwrap().watch;
        assert!(!watch("limit=1"));
        assert!(watch("watch=") && watch("watch=yes") && watch("watch=1"));
        assert!(!watch("watch=FALSE") && !watch("watch=0"));
        assert!(!watch("watch=false&watch=true"));
    }

    #[test]
    fn repeated_keys_take_the_first_value() {
        let p = ReadParams::parse(Some("resourceVersion=5&resourceVersion=7")).unwrap();
        assert_eq!(p.rv, Rv::At(5));
    }

    #[test]
    fn pairs_go_drops_do_not_exist_here_either() {
        // The API server sees no selector and no version in these.
        let p = ReadParams::parse(Some("labelSelector=a%zz&fieldSelector=x=y;&resourceVersion=5;")).unwrap();
        assert_eq!((p.label_selector.as_str(), p.field_selector.as_str(), p.rv), ("", "", Rv::Unset));
        assert_eq!(ReadParams::parse(Some("labelSelector=%ff")), Err(Unsupported(Reason::Parameters)));
    }
}
