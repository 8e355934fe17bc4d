//! A custom resource's Table printer, from its CRD as watchmux's own cache
//! of `customresourcedefinitions.apiextensions.k8s.io` holds it.
//!
//! That cache is what keeps the columns current: its watch sees every
//! change to the CRD, and each CRD version read here is parsed once (the
//! printers of all its served versions memoized on the cached object, so a
//! changed CRD is simply a new object with its own memo). Without CRDs
//! among the cached resources (`--cache-resources`), or before that cache
//! is ready, a custom resource's Table passes through (`reason="table"`):
//! the columns would otherwise be a copy nobody keeps current.
//!
//! The API server, too, applies a CRD change to its Table printer when its
//! CRD informer sees it, not at the change's own version; a Table read made
//! in the moment between the change and both watches seeing it may get the
//! old columns from either.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::cache::reason::Reason;
use crate::cache::registry::Registry;
use crate::cache::resource_info::ResourceInfo;
use crate::cache::state::object::ObjectKey;
use crate::encode::table::custom::{CustomColumns, Unsupported, custom_columns};
use crate::negotiate::PassthroughReason;

/// How long a first Table read of a custom resource waits for the CRD
/// cache to list, before passing through.
const CRD_CACHE_WAIT: Duration = Duration::from_secs(3);

/// The printers of one CRD version, by served version, each read on first use.
#[derive(Default)]
struct Printers(Mutex<HashMap<String, Result<Arc<CustomColumns>, Unsupported>>>);

/// The Table printer of the custom resource `info` names, or why the cache
/// does not write its Tables.
pub(crate) async fn printer_for(registry: &Registry, info: &ResourceInfo) -> Result<Arc<CustomColumns>, Reason> {
    const NOT_HERE: Reason = Reason::Negotiated(PassthroughReason::Table);
    let crds =
        registry.cache_for("apiextensions.k8s.io", "v1", "customresourcedefinitions").await.map_err(|_| NOT_HERE)?;
    if !crds.wait_ready(CRD_CACHE_WAIT).await {
        return Err(NOT_HERE);
    }
    let key = ObjectKey::new("", format!("{}.{}", info.resource, info.group));
    // An aggregated API's resource has no CRD: its Tables are its server's.
    let crd = crds.snapshot().objects.get(&key).cloned().ok_or(NOT_HERE)?;
    let printers = crd.reading(Printers::default).ok_or(NOT_HERE)?;
    let mut printers = printers.0.lock();
    let printer = printers
        .entry(info.version.clone())
        .or_insert_with(|| {
            let json = crd.encoded(crate::encode::variant::ContentVariant::Json).expect("JSON always encodes");
            custom_columns(&json, &info.version).map(Arc::new)
        })
        .clone();
    printer.map_err(|Unsupported(why)| {
        tracing::debug!(crd = %key.name, why, "custom resource Tables pass through");
        NOT_HERE
    })
}
