//! LIST and GET answered as a `meta.k8s.io/v1` Table (`kubectl get`), from
//! the same state a LIST or GET in JSON is answered from; the body is
//! `encode::table`'s. Which requests come here, and which pass through
//! (`reason="table"`): [`table_form`].

use std::sync::Arc;

use http::Response;
use tokio::time::Instant;

use super::list::{key_scope, page};
use super::{CacheService, Served, gettable, not_found, set_common_headers};
use crate::body::{self, Chunk, ChunkList};
use crate::cache::delivery::filter::Filter;
use crate::cache::read::params::ReadParams;
use crate::cache::reason::Reason;
use crate::cache::resource::ResourceCache;
use crate::cache::resource_info::ResourceInfo;
use crate::cache::state::object::{CachedObject, ObjectKey};
use crate::encode::list::ListMeta;
use crate::encode::table::internal_metadata::{internal_only_annotation, without_annotation};
use crate::encode::table::printers::{Printer, now_nanos, printer};
use crate::encode::table::{IncludeObject, Row, columns, table_body};
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::metrics as m;
use crate::negotiate::PassthroughReason;

/// A Table the cache can write: the kind's generated columns, its printer,
/// and what each row carries.
#[derive(Clone, Copy)]
pub(super) struct TableForm {
    columns: &'static str,
    printer: Printer,
    include: IncludeObject,
    /// The annotation the kind's internal version moves into its spec
    /// (`internal_metadata`), absent from metadata rows.
    internal_only: Option<(&'static str, bool)>,
}

/// Whether the cache writes the Table kube-apiserver would answer: a v1
/// Table of a LIST or GET, for a kind with a printer here; else why not.
pub(super) fn table_form(
    info: &ResourceInfo,
    endpoint: Endpoint,
    v1beta1: bool,
    include_object: Option<&str>,
) -> Result<TableForm, Reason> {
    const NOT_HERE: Reason = Reason::Negotiated(PassthroughReason::Table);
    // A watch's Tables (headers on the first event only) and v1beta1 rows
    // are left to the API server for now.
    if v1beta1 || endpoint == Endpoint::Watch {
        return Err(NOT_HERE);
    }
    let (Some(columns), Some(printer)) = (columns(&info.group, &info.kind), printer(&info.group, &info.kind)) else {
        return Err(NOT_HERE);
    };
    // An unknown value is the API server's 400.
    let include = IncludeObject::parse(include_object.unwrap_or_default()).ok_or(Reason::InvalidParameters)?;
    let internal_only = internal_only_annotation(&info.group, &info.kind);
    Ok(TableForm { columns, printer, include, internal_only })
}

impl TableForm {
    /// The row of one object, its cells printed now.
    fn row(&self, obj: &CachedObject, now: i128) -> Row {
        let json = obj.encoded(ContentVariant::Json).expect("JSON variants always encode");
        let parsed: serde_json::Value = serde_json::from_slice(&json).unwrap_or_default();
        let object = match self.include {
            IncludeObject::None => None,
            IncludeObject::Metadata => {
                Some(obj.encoded(ContentVariant::PartialObjectMetadataJson).map(|metadata| match self.internal_only {
                    Some((key, nonempty_only)) => without_annotation(&metadata, key, nonempty_only),
                    None => metadata,
                }))
            }
            IncludeObject::Object => Some(Ok(json)),
        };
        Row { printed: (self.printer)(&parsed, now), object: object.map(|o| o.expect("JSON variants always encode")) }
    }
}

impl CacheService {
    pub(super) async fn table_list(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        form: TableForm,
        arrival: Instant,
    ) -> Served {
        let (snapshot, start, limit) = match self.list_state(&cache, &filter, &p, arrival).await {
            Ok(state) => state,
            Err(reason) => return Served::Passthrough(reason),
        };
        let now = now_nanos();
        let mut rows = Vec::new();
        let scope = key_scope(&cache, &filter);
        let Ok(meta) =
            page::<std::convert::Infallible>(&cache, &snapshot, &filter, start.as_ref(), limit, scope, |obj| {
                rows.push(form.row(obj, now));
                Ok(())
            });
        metrics::counter!(m::CACHE_LIST_TOTAL, "resource" => cache.label().to_owned()).increment(1);
        metrics::counter!(m::CACHE_TABLE_TOTAL, "resource" => cache.label().to_owned()).increment(1);
        Served::Response(table_response(form.columns, &meta, rows))
    }

    pub(super) async fn table_get(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        form: TableForm,
        scoped: bool,
    ) -> Served {
        if let Err(reason) = gettable(&cache, &p).await {
            return Served::Passthrough(reason);
        }
        let name = filter.name.clone().unwrap_or_default();
        let key = ObjectKey { namespace: filter.namespace.clone().unwrap_or_default(), name: name.clone() };
        let label = cache.label().to_owned();
        let response = match cache.snapshot().objects.get(&key) {
            Some(obj) => {
                // A single object's Table carries the object's version.
                let meta = ListMeta { rv: obj.rv, continue_token: None, remaining: None };
                metrics::counter!(m::CACHE_TABLE_TOTAL, "resource" => label.clone()).increment(1);
                table_response(form.columns, &meta, vec![form.row(obj, now_nanos())])
            }
            None if scoped => return Served::Passthrough(Reason::OutsideScope),
            // The 404 is the same Status in JSON as for any other JSON read.
            None => not_found(&cache, &name).into_response_as(ContentVariant::Json),
        };
        metrics::counter!(m::CACHE_GET_TOTAL, "resource" => label).increment(1);
        Served::Response(response)
    }
}

fn table_response(columns: &str, meta: &ListMeta, rows: Vec<Row>) -> Response<body::ProxyBody> {
    let chunks = table_body(columns, meta, rows).into_iter().map(Chunk::from).collect();
    let mut resp = Response::new(body::boxed_chunks(ChunkList::new(chunks)));
    set_common_headers(resp.headers_mut(), ContentVariant::Json.content_type(Endpoint::List));
    resp
}
