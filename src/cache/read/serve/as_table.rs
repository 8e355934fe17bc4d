//! LIST and GET answered as a `meta.k8s.io` Table (`kubectl get`), from
//! the same state a LIST or GET in JSON is answered from; the body is
//! `encode::table`'s. Which requests come here, and which pass through
//! (`reason="table"`): `cache::table_form::table_form`. A Table WATCH is the
//! watch stream's (`read::watch_stream`).

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
use crate::cache::state::object::ObjectKey;
use crate::cache::table_form::TableForm;
use crate::encode::list::ListMeta;
use crate::encode::table::custom::Unsupported;
use crate::encode::table::printers::now_nanos;
use crate::encode::table::{Row, TableVersion, table_body};
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::metrics as m;
use crate::negotiate::PassthroughReason;

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
        let paged = page::<Unsupported>(&cache, &snapshot, &filter, start.as_ref(), limit, scope, |obj| {
            rows.push(form.row(obj, now)?);
            Ok(())
        });
        // A custom resource's cell the printer does not guess: the API server's.
        let Ok(meta) = paged else { return Served::Passthrough(Reason::Negotiated(PassthroughReason::Table)) };
        metrics::counter!(m::CACHE_LIST_TOTAL, "resource" => cache.label().to_owned()).increment(1);
        metrics::counter!(m::CACHE_TABLE_TOTAL, "resource" => cache.label().to_owned()).increment(1);
        Served::Response(table_response(form.version, form.columns(), &meta, rows))
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
        let key = ObjectKey::new(filter.namespace.as_deref().unwrap_or(""), name.as_str());
        let label = cache.label().to_owned();
        let response = match cache.snapshot().objects.get(&key) {
            Some(obj) => {
                // A single object's Table carries the object's version.
                let meta = ListMeta { rv: obj.rv, continue_token: None, remaining: None };
                let Ok(row) = form.row(obj, now_nanos()) else {
                    return Served::Passthrough(Reason::Negotiated(PassthroughReason::Table));
                };
                metrics::counter!(m::CACHE_TABLE_TOTAL, "resource" => label.clone()).increment(1);
                table_response(form.version, form.columns(), &meta, vec![row])
            }
            None if scoped => return Served::Passthrough(Reason::OutsideScope),
            // The 404 is the same Status in JSON as for any other JSON read.
            None => not_found(&cache, &name).into_response_as(ContentVariant::Json),
        };
        metrics::counter!(m::CACHE_GET_TOTAL, "resource" => label).increment(1);
        Served::Response(response)
    }
}

fn table_response(version: TableVersion, columns: &str, meta: &ListMeta, rows: Vec<Row>) -> Response<body::ProxyBody> {
    let chunks = table_body(version, columns, meta, rows).into_iter().map(Chunk::from).collect();
    let mut resp = Response::new(body::boxed_chunks(ChunkList::new(chunks)));
    set_common_headers(resp.headers_mut(), ContentVariant::Json.content_type(Endpoint::List));
    resp
}
