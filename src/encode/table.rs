//! `meta.k8s.io/v1` Table bodies, as kube-apiserver writes them for
//! `kubectl get` (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`).
//!
//! The API server builds a Table from its printers
//! (k8s.io/kubernetes/pkg/printers/internalversion), always "wide" (every
//! column, priority 1 too), then `asTable` (k8s.io/apiserver
//! `endpoints/handlers/response.go`) replaces each row's object by what
//! `includeObject` asks: the object (`Object`), its PartialObjectMetadata
//! (`Metadata`, the default), or nothing (`None`, written `null`). The body
//! is encoding/json's: `kind`, `apiVersion`, `metadata` (the list's
//! resourceVersion, continue and remainingItemCount; a single object's
//! resourceVersion), `columnDefinitions`, `rows` of `{"cells":[...],"object":...}`.
//!
//! - The column definitions are not written here: they are generated from
//!   the pinned printers (`table/columns.txt`, `integration/cmd/tablecolumns`,
//!   checked for drift by `make test-unit`) as the exact bytes Go writes, and
//!   spliced.
//! - The cells are the Rust printers' ([`printers`]) for the kinds that have
//!   one; a kind without one is not served here (the read passes through,
//!   `reason="table"`).
//! - A row's object is spliced from the object's shared encodings (its JSON,
//!   or its memoized PartialObjectMetadata JSON), never re-encoded.
//! - Ages are computed at serve time, as the API server computes them at
//!   encode time ([`human_duration`]).

mod apps;
mod batch_and_service;
pub(crate) mod custom;
mod fields;
pub(crate) mod internal_metadata;
mod node;
mod pod;
pub(crate) mod printers;
pub(crate) mod reads;

use std::collections::HashMap;

use bytes::Bytes;

use super::list::ListMeta;
use super::minor;
use super::status::push_go_json_string;

/// `includeObject`: what each row carries besides its cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    /// `"object":null`.
    None,
    /// The object's PartialObjectMetadata (the API server's default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// The query value as `asTable` reads it; `None` for a value it refuses
    /// (a 400 the API server then gives).
    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "" | "Metadata" => Some(Self::Metadata),
            "None" => Some(Self::None),
            "Object" => Some(Self::Object),
            _ => None,
        }
    }
}

/// The generated column definitions, by (group, kind), group "core" for the
/// core group: the JSON array as Go writes it.
/// Each supported minor has its own (`columns.txt` marks the lines of some
/// minors only); the upstream's minor's are used.
type Columns = HashMap<(&'static str, &'static str), &'static str>;
static COLUMNS: minor::PerMinor<Columns> = minor::PerMinor::new();

fn columns_of(minor: u8) -> Columns {
    minor::lines_of(include_str!("table/columns.txt"), minor)
        .filter_map(|line| {
            let (group, rest) = line.split_once(' ')?;
            let (kind, columns) = rest.split_once(' ')?;
            Some(((group, kind), columns))
        })
        .collect()
}

/// The column definitions kube-apiserver prints for a built-in kind.
pub(crate) fn columns(group: &str, kind: &str) -> Option<&'static str> {
    let group = if group.is_empty() { "core" } else { group };
    COLUMNS.served(columns_of).get(&(group, kind)).copied()
}

/// One cell, as the printers put it in a row's `[]interface{}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    Str(String),
    Int(i64),
    /// A value already written as Go's JSON (`null`, `true`, `1.5`).
    Raw(String),
}

impl Cell {
    /// The cell as kubectl prints it (tests compare printed rows).
    #[cfg(test)]
    pub(crate) fn into_text(self) -> String {
        match self {
            Self::Str(s) | Self::Raw(s) => s,
            Self::Int(n) => n.to_string(),
        }
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Self::Str(s) => push_go_json_string(out, s),
            Self::Int(n) => {
                use std::fmt::Write;
                write!(out, "{n}").expect("writing to a String");
            }
            Self::Raw(json) => out.push_str(json),
        }
    }
}

/// What a printer makes of one object.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Printed {
    pub cells: Vec<Cell>,
    /// The row's `conditions`, as encoding/json writes them (a finished Pod's).
    pub conditions: Option<&'static str>,
}

impl From<Vec<Cell>> for Printed {
    fn from(cells: Vec<Cell>) -> Self {
        Self { cells, conditions: None }
    }
}

/// One row: its cells and conditions, and the object bytes to splice
/// (`None` for `null`).
pub(crate) struct Row {
    pub printed: Printed,
    pub object: Option<Bytes>,
}

/// One table variant of one watch event: the same bytes for every watcher
/// whose Table has these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableEventKey {
    pub event: crate::encode::watch::EventType,
    pub include: IncludeObject,
    /// `includeObject` left out (or empty) rather than spelled `Metadata`:
    /// the same rows, but another encoder identity in the API server, whose
    /// watchers share no encodings with the other's (which decides when
    /// each stops sending headers: see `cache::table_form`).
    pub include_unspelled: bool,
    pub version: TableVersion,
    /// The column definitions go with it.
    pub headers: bool,
    /// The Kubernetes minor whose columns and printers made it
    /// ([`crate::encode::minor::served`]): an upgraded upstream's watchers
    /// get its own rows, not a memo of the old minor's.
    pub minor: u8,
}

/// The `meta.k8s.io` version a Table is asked in: the same body either way
/// but for the `apiVersion` of the Table and of its metadata rows (`asTable`
/// gives each PartialObjectMetadata the group version asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum TableVersion {
    V1,
    V1beta1,
}

impl TableVersion {
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Self::V1 => "meta.k8s.io/v1",
            Self::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }

    /// A row's PartialObjectMetadata in this version, from the object's
    /// shared `meta.k8s.io/v1` bytes (the same bytes for v1).
    pub(crate) fn metadata_row(self, metadata: Bytes) -> Bytes {
        const V1: &[u8] = b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",";
        match self {
            Self::V1 => metadata,
            Self::V1beta1 => match metadata.strip_prefix(V1) {
                Some(rest) => {
                    let mut out =
                        b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1beta1\",".to_vec();
                    out.extend_from_slice(rest);
                    Bytes::from(out)
                }
                // Unreachable: the memo writes that prefix.
                None => metadata,
            },
        }
    }
}

/// The start of a Table: kind, apiVersion, metadata and the column
/// definitions (`null` without headers, as a watch's later events have
/// them), up to the rows' opening bracket.
fn table_head(version: TableVersion, meta: &ListMeta, columns: Option<&str>) -> String {
    format!(
        "{{\"kind\":\"Table\",\"apiVersion\":\"{}\",\"metadata\":{},\"columnDefinitions\":{},\"rows\":[",
        version.api_version(),
        meta.to_json(),
        columns.unwrap_or("null")
    )
}

/// A row up to its object: `{"cells":[...]` (and `conditions`) then `,"object":`.
fn push_row_head(out: &mut String, printed: &Printed) {
    out.push_str("{\"cells\":[");
    for (j, cell) in printed.cells.iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        cell.write_json(out);
    }
    out.push(']');
    if let Some(conditions) = printed.conditions {
        out.push_str(",\"conditions\":");
        out.push_str(conditions);
    }
    out.push_str(",\"object\":");
}

/// A Table body's chunks: the head, one per row (its cells, then the shared
/// object bytes), and the close, with the JSON encoder's newline.
pub(crate) fn table_body(version: TableVersion, columns: &str, meta: &ListMeta, rows: Vec<Row>) -> Vec<Bytes> {
    let mut chunks = Vec::with_capacity(2 * rows.len() + 2);
    chunks.push(Bytes::from(table_head(version, meta, Some(columns))));
    for (i, row) in rows.into_iter().enumerate() {
        let mut head = String::from(if i == 0 { "" } else { "," });
        push_row_head(&mut head, &row.printed);
        match row.object {
            Some(object) => {
                chunks.push(Bytes::from(head));
                chunks.push(object);
                chunks.push(Bytes::from_static(b"}"));
            }
            None => {
                head.push_str("null}");
                chunks.push(Bytes::from(head));
            }
        }
    }
    chunks.push(Bytes::from_static(b"]}\n"));
    chunks
}

/// A one-row Table, the object of a Table watch event, as a head (the event
/// frame's `prefix`, the Table up to the row's object) and the row's object
/// (`null` for none); [`ONE_ROW_TABLE_TAIL`] closes the row, the Table and
/// the event. Its metadata is the object's resourceVersion (`GenerateTable`
/// reads it from a single object); `columns` is `None` once a watch's first
/// event is out (`watchEmbeddedEncoder` sets NoHeaders after it).
pub(crate) fn one_row_table(
    prefix: &str,
    version: TableVersion,
    rv: u64,
    columns: Option<&str>,
    row: Row,
) -> [Bytes; 2] {
    let meta = ListMeta { rv, continue_token: None, remaining: None };
    let mut head = String::from(prefix);
    head.push_str(&table_head(version, &meta, columns));
    push_row_head(&mut head, &row.printed);
    [Bytes::from(head), row.object.unwrap_or_else(|| Bytes::from_static(b"null"))]
}

/// What follows a one-row Table's object in a watch event: the row, the
/// rows, the Table and the event close, and the line ends.
pub(crate) const ONE_ROW_TABLE_TAIL: &[u8] = b"}]}}\n";

/// apimachinery's `duration.HumanDuration` of `nanos` nanoseconds (what
/// `translateTimestampSince` prints for an age).
pub(crate) fn human_duration(nanos: i128) -> String {
    const SECOND: i128 = 1_000_000_000;
    // Go's int(d.Seconds()) truncates towards zero.
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_owned();
    } else if seconds < 0 {
        return "0s".to_owned();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{dy}d", hours / 24 / 365) }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

#[cfg(test)]
mod tests;
