//! What the cache writes as a `meta.k8s.io` Table (kubectl get), from the
//! same state its JSON answers come from; the bytes are `encode::table`'s.
//!
//! [`table_form`] decides whether the cache writes a Table at all (a kind
//! with a printer here, in front of a supported minor, `encode::minor`;
//! else `reason="table"`) and carries what each row needs. A LIST or GET prints its rows at serve time; a watch's events are
//! one-row Tables ([`TableForm::event_frame`]), printed once per event and
//! table variant and shared by every watcher of that variant, as the API
//! server's watch encoder caches each event's bytes per encoder identity
//! (`watchEmbeddedEncoder`, k8s.io/apiserver `endpoints/handlers/response.go`):
//! the ages in those cells are the ones of the first encoding. A watch's
//! initial events are printed for that watcher alone, as the API server
//! encodes the objects of its store for each new watcher.
//!
//! The first event of a Table watch carries the column definitions, later
//! ones `"columnDefinitions":null`: the API server's encoder sets NoHeaders
//! once it has encoded an object itself. An event whose bytes it found in
//! the event's encoding cache (another watcher of the same identity encoded
//! it first) is not its own encoding, so it keeps sending headers until it
//! makes one: of two `kubectl get -w` started together, the one the
//! dispatcher reaches second gets the column definitions on its second
//! event too. The memo here keeps that rule ([`TableForm::event_frame`]
//! says whether the watcher made the bytes), so which watcher gets which
//! bytes follows the order of delivery, as in the API server. A BOOKMARK is a Table too: the printer's
//! row of an empty object (name `""`, age `<unknown>`) whose object is the
//! bookmark's PartialObjectMetadata, `null` for `includeObject=None` except
//! at the initial-events end (whose annotation makes `asTable` write
//! metadata), and for `includeObject=Object` the kind's whole empty object,
//! Go's zero values, which the cache does not write: such watches with
//! bookmarks pass through.
//!
//! Custom resources' Tables (LIST, GET and WATCH) are printed from their CRD's
//! printer columns (`read::serve::crd`, `encode::table::custom`); a row the printer
//! refuses to guess passes the whole read through. In a watch, the initial
//! events are checked before the answer starts (a refusal passes the watch
//! through), and a live event the printer refuses ends the stream, as a
//! timeout would: the client watches again from the last version it got,
//! and that watch, whose events since its version hold the refused one,
//! passes through.

use std::sync::Arc;

use bytes::Bytes;

use crate::body::Chunk;
use crate::cache::reason::Reason;
use crate::cache::resource_info::ResourceInfo;
use crate::cache::state::object::CachedObject;
use crate::encode::minor;
use crate::encode::table::custom::{CustomColumns, Unsupported};
use crate::encode::table::internal_metadata::{internal_only_annotation, without_annotation};
use crate::encode::table::printers::{Printer, now_nanos, printer};
use crate::encode::table::{
    IncludeObject, ONE_ROW_TABLE_TAIL, Printed, Row, TableEventKey, TableVersion, columns, one_row_table,
};
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::encode::watch::{BOOKMARK_JSON_PREFIX, EventType};
use crate::metrics as m;
use crate::negotiate::PassthroughReason;

/// How a kind's rows are printed, and its column definitions.
#[derive(Clone)]
enum Rows {
    /// A built-in kind: the generated columns, the Rust printer.
    Builtin { columns: &'static str, printer: &'static Printer },
    /// A custom resource: its CRD's columns.
    Custom(Arc<CustomColumns>),
}

/// A Table the cache can write: the kind's columns and printer, and what
/// each row carries.
#[derive(Clone)]
pub(crate) struct TableForm {
    rows: Rows,
    include: IncludeObject,
    /// `includeObject` absent or empty (see `TableEventKey`).
    include_unspelled: bool,
    pub version: TableVersion,
    /// The annotation the kind's internal version moves into its spec
    /// (`internal_metadata`), absent from metadata rows.
    internal_only: Option<(&'static str, bool)>,
}

/// Whether the cache writes the Table kube-apiserver would answer, for a
/// kind with a printer here (`custom`: a custom resource's, from its CRD);
/// else why not. A watch allowing bookmarks with `includeObject=Object` is
/// left to the API server (see the module's doc).
pub(crate) fn table_form(
    info: &ResourceInfo,
    custom: Option<Arc<CustomColumns>>,
    endpoint: Endpoint,
    v1beta1: bool,
    include_object: Option<&str>,
    allow_bookmarks: bool,
) -> Result<TableForm, Reason> {
    const NOT_HERE: Reason = Reason::Negotiated(PassthroughReason::Table);
    let rows = match (columns(&info.group, &info.kind), printer(&info.group, &info.kind), custom) {
        (Some(_), Some(_), _) if !minor::tables_derivable() => {
            // An unsupported minor's printers: no generated table says what they write.
            metrics::counter!(m::VERSION_FORM_PASSTHROUGH, "form" => "table").increment(1);
            return Err(NOT_HERE);
        }
        (Some(columns), Some(printer), _) => Rows::Builtin { columns, printer },
        (_, _, Some(custom)) => Rows::Custom(custom),
        _ => return Err(NOT_HERE),
    };
    // An unknown value is the API server's 400.
    let include = IncludeObject::parse(include_object.unwrap_or_default()).ok_or(Reason::InvalidParameters)?;
    if endpoint == Endpoint::Watch && allow_bookmarks && include == IncludeObject::Object {
        return Err(NOT_HERE);
    }
    let internal_only = internal_only_annotation(&info.group, &info.kind);
    let version = if v1beta1 { TableVersion::V1beta1 } else { TableVersion::V1 };
    let include_unspelled = include_object.is_none_or(str::is_empty);
    Ok(TableForm { rows, include, include_unspelled, version, internal_only })
}

impl TableForm {
    /// The column definitions, as Go writes them.
    pub(crate) fn columns(&self) -> &str {
        match &self.rows {
            Rows::Builtin { columns, .. } => columns,
            Rows::Custom(custom) => &custom.definitions,
        }
    }

    /// The cells of an object's JSON, parsed only as far as its printer (a
    /// built-in kind's, or a custom resource's columns) reads.
    fn print(&self, json: &[u8], now: i128) -> Result<Printed, Unsupported> {
        match &self.rows {
            Rows::Builtin { printer, .. } => Ok(printer.print_json(json, now)),
            Rows::Custom(custom) => custom.cells_of_json(json, now),
        }
    }

    /// A bookmark's row, of an object with only metadata: no printer
    /// refuses that (every custom column finds nothing, `null`).
    fn print_empty(&self, object: &serde_json::Value, now: i128) -> Printed {
        let printed = match &self.rows {
            Rows::Builtin { printer, .. } => Ok((printer.print)(object, now)),
            Rows::Custom(custom) => custom.cells(object, now),
        };
        printed.unwrap_or_else(|_| Printed::from(Vec::new()))
    }

    /// The row of one object, its cells printed at `now`; refused when a
    /// custom resource's cell is one the printer does not guess.
    pub(crate) fn row(&self, obj: &CachedObject, now: i128) -> Result<Row, Unsupported> {
        let json = obj.encoded(ContentVariant::Json).expect("JSON variants always encode");
        let printed = self.print(&json, now)?;
        let object = match self.include {
            IncludeObject::None => None,
            IncludeObject::Metadata => {
                let metadata =
                    obj.encoded(ContentVariant::PartialObjectMetadataJson).expect("JSON variants always encode");
                let metadata = match self.internal_only {
                    Some((key, nonempty_only)) => without_annotation(&metadata, key, nonempty_only),
                    None => metadata,
                };
                Some(self.version.metadata_row(metadata))
            }
            IncludeObject::Object => Some(json),
        };
        Ok(Row { printed, object })
    }

    /// A watch event about `obj` as a one-row Table, with the column
    /// definitions when `headers`. `shared`: a live event, printed once for
    /// every watcher of this variant; else printed now for this watcher (an
    /// initial event). Also whether this watcher made the bytes, after which
    /// it sends no more headers (see the module's doc). `None`: a custom
    /// resource's row the printer refuses; the stream must end there.
    pub(crate) fn event_frame(
        &self,
        event: EventType,
        obj: &CachedObject,
        headers: bool,
        shared: bool,
    ) -> Option<(Chunk, bool)> {
        let encode = || {
            let columns = headers.then_some(self.columns());
            let row = self.row(obj, now_nanos()).ok()?;
            Some(one_row_table(event.json_prefix(), self.version, obj.rv, columns, row))
        };
        let ([head, object], made_here) = if shared {
            let key = TableEventKey {
                event,
                include: self.include,
                include_unspelled: self.include_unspelled,
                version: self.version,
                headers,
                minor: crate::encode::minor::served(),
            };
            obj.table_event(key, encode)?
        } else {
            (encode()?, true)
        };
        Some((Chunk::parts(head, object, Bytes::from_static(ONE_ROW_TABLE_TAIL)), made_here))
    }

    /// Whether every object's row prints (always, but for a custom resource
    /// whose printer refuses a cell): checked on a watch's initial events
    /// before its answer starts.
    pub(crate) fn prints(&self, obj: &CachedObject) -> bool {
        matches!(self.rows, Rows::Builtin { .. }) || self.row(obj, 0).is_ok()
    }

    /// A BOOKMARK at `rv` as a one-row Table (see the module's doc).
    pub(crate) fn bookmark_frame(&self, rv: u64, initial_end: bool, headers: bool) -> Chunk {
        let annotations = if initial_end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
        let metadata = format!(r#"{{"resourceVersion":"{rv}"{annotations}}}"#);
        let object = (self.include != IncludeObject::None || initial_end).then(|| {
            Bytes::from(format!(
                r#"{{"kind":"PartialObjectMetadata","apiVersion":"{}","metadata":{metadata}}}"#,
                self.version.api_version()
            ))
        });
        let empty: serde_json::Value = serde_json::from_str(&format!(r#"{{"metadata":{metadata}}}"#)).expect("JSON");
        let printed = self.print_empty(&empty, now_nanos());
        let columns = headers.then_some(self.columns());
        let [head, object] = one_row_table(BOOKMARK_JSON_PREFIX, self.version, rv, columns, Row { printed, object });
        Chunk::parts(head, object, Bytes::from_static(ONE_ROW_TABLE_TAIL))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;
    use crate::cache::resource_info::test_info;
    use crate::cache::state::object::ObjectShape;

    fn text(mut chunk: Chunk) -> String {
        String::from_utf8(chunk.copy_to_bytes(chunk.remaining()).to_vec()).unwrap()
    }

    fn configmaps() -> ResourceInfo {
        test_info("", "configmaps", "ConfigMap", true)
    }

    fn form(include: Option<&str>, v1beta1: bool) -> TableForm {
        table_form(&configmaps(), None, Endpoint::Watch, v1beta1, include, false).ok().unwrap()
    }

    fn object() -> CachedObject {
        let json = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"7","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"k":"<v>"}}"#;
        CachedObject::decode(Bytes::from(json), &ObjectShape::new(configmaps(), None)).unwrap()
    }

    #[test]
    fn an_event_is_a_one_row_table_with_headers_only_when_asked() {
        let form = form(Some("None"), false);
        let (first, _) = form.event_frame(EventType::Added, &object(), true, false).unwrap();
        let first = text(first);
        let v: serde_json::Value = serde_json::from_str(first.trim_end()).unwrap();
        assert!(first.ends_with("}]}}\n"), "{first}");
        assert_eq!(v["type"], "ADDED");
        assert_eq!(v["object"]["metadata"], serde_json::json!({"resourceVersion": "7"}));
        assert_eq!(v["object"]["columnDefinitions"][0]["name"], "Name");
        assert_eq!(
            (&v["object"]["rows"][0]["cells"][0], &v["object"]["rows"][0]["cells"][1]),
            (&"a".into(), &1.into())
        );
        assert!(v["object"]["rows"][0]["object"].is_null());
        let (later, _) = form.event_frame(EventType::Modified, &object(), false, false).unwrap();
        assert!(text(later).contains(r#""columnDefinitions":null,"rows":[{"cells":["a",1,"#));
    }

    #[test]
    fn a_live_event_is_encoded_once_per_variant_and_only_its_maker_stops_headers() {
        let obj = object();
        let form = form(None, false);
        let (a, made_a) = form.event_frame(EventType::Added, &obj, true, true).unwrap();
        let (b, made_b) = form.event_frame(EventType::Added, &obj, true, true).unwrap();
        assert!(made_a && !made_b, "the second watcher reads the first one's bytes");
        assert_eq!(text(a), text(b));
        // Spelled `Metadata`: the same rows, another identity, its own encoding.
        let (c, made_c) = self::form(Some("Metadata"), false).event_frame(EventType::Added, &obj, true, true).unwrap();
        assert!(made_c);
        assert_eq!(text(c), text(form.event_frame(EventType::Added, &obj, true, true).unwrap().0));
        // Initial events are printed for their watcher alone.
        assert!(form.event_frame(EventType::Added, &obj, true, false).unwrap().1);
    }

    #[test]
    fn v1beta1_tables_name_their_version_in_the_table_and_the_metadata_rows() {
        let (event, _) = form(None, true).event_frame(EventType::Deleted, &object(), false, false).unwrap();
        let v: serde_json::Value = serde_json::from_str(text(event).trim_end()).unwrap();
        assert_eq!(v["object"]["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(v["object"]["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(v["object"]["rows"][0]["object"]["metadata"]["name"], "a");
    }

    #[test]
    fn bookmarks_are_the_printers_empty_row() {
        let bookmark = text(form(Some("None"), false).bookmark_frame(9, false, false));
        assert_eq!(
            bookmark,
            "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"9\"},\"columnDefinitions\":null,\"rows\":[{\"cells\":[\"\",0,\"\\u003cunknown\\u003e\"],\"object\":null}]}}\n"
        );
        // The initial-events end writes its metadata even for None.
        let end = text(form(Some("None"), false).bookmark_frame(9, true, false));
        assert!(end.contains(r#""object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}]}}"#), "{end}");
    }

    #[test]
    fn whole_objects_with_bookmarks_and_unknown_include_values_are_left_to_the_api_server() {
        let info = configmaps();
        let table = Reason::Negotiated(PassthroughReason::Table);
        assert!(matches!(table_form(&info, None, Endpoint::Watch, false, Some("Object"), true), Err(r) if r == table));
        assert!(table_form(&info, None, Endpoint::Watch, false, Some("Object"), false).is_ok());
        assert!(table_form(&info, None, Endpoint::List, false, Some("Object"), true).is_ok());
        assert!(matches!(
            table_form(&info, None, Endpoint::Watch, false, Some("none"), false),
            Err(Reason::InvalidParameters)
        ));
        let crd = test_info("example.com", "widgets", "Widget", true);
        // A custom resource without its CRD's printer.
        assert!(matches!(table_form(&crd, None, Endpoint::List, false, None, false), Err(r) if r == table));
    }

    #[test]
    fn a_custom_row_the_printer_refuses_ends_a_watch_instead_of_guessing() {
        use crate::encode::table::custom::custom_columns;
        let crd = br#"{"spec":{"versions":[{"name":"v1","additionalPrinterColumns":[{"name":"R","type":"number","jsonPath":".spec.r"}]}]}}"#;
        let info = test_info("example.com", "widgets", "Widget", true);
        let custom = Some(Arc::new(custom_columns(crd, "v1").unwrap()));
        let form = table_form(&info, custom, Endpoint::Watch, false, None, true).ok().unwrap();
        let shape = ObjectShape::new(info, None);
        let widget = |r: &str| {
            let json = format!(
                r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"w","namespace":"n","uid":"u","resourceVersion":"3"}},"spec":{{"r":{r}}}}}"#
            );
            CachedObject::decode(Bytes::from(json), &shape).unwrap()
        };
        let (fine, refused) = (widget("0.5"), widget("1e-7"));
        assert!(form.prints(&fine) && !form.prints(&refused));
        let (frame, _) = form.event_frame(EventType::Added, &fine, true, true).unwrap();
        assert!(text(frame).contains(r#""rows":[{"cells":["w",0.5],"object":{"kind":"PartialObjectMetadata""#));
        assert!(form.event_frame(EventType::Modified, &refused, false, true).is_none());
        assert!(form.event_frame(EventType::Modified, &refused, false, false).is_none());
    }
}
