//! The `resource` label of the pass-through metrics, kept bounded.
//!
//! A request's resource is whatever its URL says, so it cannot become a
//! label as it is: a client could mint a time series per request. A
//! resource becomes a label value once the upstream has answered a request
//! for it with success, which only a resource the API server serves can get,
//! and at most [`MAX_RESOURCES`] of them ever do. Until then, and past the
//! cap, requests count as [`OTHER`]; requests that name no resource
//! (discovery, `/version`, `/openapi`...) carry `""`, as in the API
//! server's own `apiserver_request_total`.

use std::collections::HashMap;
use std::sync::Arc;

use http::StatusCode;
use metrics::SharedString;
use parking_lot::RwLock;

use crate::request::RequestInfo;

/// How many distinct resources may become label values. A cluster serves a
/// few hundred at most, custom resources included; the common ones are seen
/// first.
pub(crate) const MAX_RESOURCES: usize = 256;
/// The label of a resource not (yet) proven to exist, or past the cap.
pub(crate) const OTHER: &str = "other";

/// The resources proven by an upstream answer, by their label.
#[derive(Debug, Default)]
pub(crate) struct ResourceLabels {
    known: RwLock<HashMap<String, Arc<str>>>,
}

impl ResourceLabels {
    /// The label for `info`, which the upstream answered with `status`
    /// (`None`: it could not be reached).
    pub(crate) fn label(&self, info: &RequestInfo, status: Option<StatusCode>) -> SharedString {
        if !info.is_resource_request {
            return SharedString::const_str("");
        }
        if info.resource.is_empty() {
            return SharedString::const_str(OTHER);
        }
        let name = if info.api_group.is_empty() {
            info.resource.clone()
        } else {
            format!("{}.{}", info.resource, info.api_group)
        };
        if let Some(known) = self.known.read().get(&name) {
            return SharedString::from(known.clone());
        }
        let proven = status.is_some_and(|s| s.is_success() || s == StatusCode::SWITCHING_PROTOCOLS);
        if !proven {
            return SharedString::const_str(OTHER);
        }
        let mut known = self.known.write();
        if known.len() >= MAX_RESOURCES && !known.contains_key(&name) {
            return SharedString::const_str(OTHER);
        }
        let label: Arc<str> = known.entry(name.clone()).or_insert_with(|| Arc::from(name.as_str())).clone();
        SharedString::from(label)
    }
}

#[cfg(test)]
mod tests {
    use http::{Method, Uri};

    use super::*;

    fn info(path: &str) -> RequestInfo {
        RequestInfo::classify(&Method::GET, &path.parse::<Uri>().unwrap())
    }

    #[test]
    fn a_resource_is_named_only_once_the_upstream_has_served_it() {
        let labels = ResourceLabels::default();
        let pods = info("/api/v1/namespaces/a/pods");
        assert_eq!(labels.label(&pods, Some(StatusCode::NOT_FOUND)).as_ref(), OTHER);
        assert_eq!(labels.label(&pods, None).as_ref(), OTHER);
        assert_eq!(labels.label(&pods, Some(StatusCode::OK)).as_ref(), "pods");
        // From then on, whatever the answer.
        assert_eq!(labels.label(&pods, Some(StatusCode::FORBIDDEN)).as_ref(), "pods");
        assert_eq!(labels.label(&pods, None).as_ref(), "pods");
        let deployments = info("/apis/apps/v1/deployments");
        assert_eq!(labels.label(&deployments, Some(StatusCode::OK)).as_ref(), "deployments.apps");
        let exec = info("/api/v1/namespaces/a/pods/p/exec");
        assert_eq!(labels.label(&exec, Some(StatusCode::SWITCHING_PROTOCOLS)).as_ref(), "pods");
    }

    #[test]
    fn non_resource_paths_and_empty_resources_have_fixed_labels() {
        let labels = ResourceLabels::default();
        assert_eq!(labels.label(&info("/version"), Some(StatusCode::OK)).as_ref(), "");
        assert_eq!(labels.label(&info("/apis/apps/v1"), Some(StatusCode::OK)).as_ref(), "");
        assert_eq!(labels.label(&info("/api/v1//pods"), Some(StatusCode::OK)).as_ref(), OTHER);
    }

    #[test]
    fn client_chosen_names_never_grow_the_label_set_past_the_cap() {
        let labels = ResourceLabels::default();
        for i in 0..MAX_RESOURCES + 50 {
            labels.label(&info(&format!("/apis/g{i}.example/v1/things")), Some(StatusCode::OK));
        }
        assert_eq!(labels.known.read().len(), MAX_RESOURCES);
        let late = info("/apis/late.example/v1/things");
        assert_eq!(labels.label(&late, Some(StatusCode::OK)).as_ref(), OTHER);
        let early = info("/apis/g0.example/v1/things");
        assert_eq!(labels.label(&early, Some(StatusCode::OK)).as_ref(), "things.g0.example");
    }
}
