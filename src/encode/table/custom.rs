//! Custom resources' Tables, as apiextensions-apiserver's `tableconvertor`
//! writes them: the Name column, then the CRD's `additionalPrinterColumns`
//! of the served version (or, when it has none, one Age column of type
//! `date` at `.metadata.creationTimestamp`), every one of them printed
//! whatever its priority.
//!
//! Each column's JSONPath is client-go's `jsonpath` with missing keys
//! allowed: anything missing, or a step on the wrong type, is a `null` cell.
//! [`JsonPath`] reads the subset CRDs use most (`.field`, `[n]`); a CRD with
//! any other path (quoted keys, filters, wildcards, recursion, slices,
//! negative indexes, escapes) is refused, and so is a
//! cell whose printing here might differ from Go's (a non-integer number
//! inside a nested value, a date Go might read differently): the read then
//! passes through. There is no approximate cell.
//!
//! Cells by column type (`cellForJSONValue`): `string` is what jsonpath
//! prints (`fmt.Sprint` of a scalar, `json.Marshal` of a map or list,
//! `<no value>` for null); `integer` an int64 (a float truncated); `number`
//! a float64; `boolean` a bool; `date` the age of an RFC 3339 time
//! (`<unknown>` for an empty one, `<invalid>` for one Go cannot read); any
//! value of another JSON type is `null`.

use serde::Deserialize;
use serde_json::Value;

use super::reads::{self, Reads};
use super::{Cell, Printed, human_duration};
use crate::encode::status::go_json_escape;
use crate::go_rules::fmt::go_float;

/// Why a custom resource's Table is left to the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsupported(pub &'static str);

/// The printer of one version of a custom resource: its column definitions
/// as Go writes them, and how to fill each column.
#[derive(Debug)]
pub(crate) struct CustomColumns {
    /// The `columnDefinitions` array, the exact bytes.
    pub definitions: String,
    columns: Vec<(ColumnType, JsonPath)>,
    /// What the cells read of an object: its name and each column's path.
    reads: Reads,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnType {
    Integer,
    Number,
    String,
    Boolean,
    Date,
}

#[derive(Deserialize)]
struct Crd {
    spec: CrdSpec,
}

#[derive(Deserialize)]
struct CrdSpec {
    #[serde(default)]
    versions: Vec<CrdVersion>,
}

#[derive(Deserialize)]
struct CrdVersion {
    name: String,
    #[serde(default, rename = "additionalPrinterColumns")]
    columns: Vec<ColumnDefinition>,
}

#[derive(Deserialize)]
struct ColumnDefinition {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    format: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    priority: i32,
    #[serde(rename = "jsonPath")]
    json_path: String,
}

/// `metav1.ObjectMeta`'s swagger text for `name` and `creationTimestamp`,
/// which the Name and default Age columns carry: the same text as every
/// built-in kind's Name and Age columns (taken from the generated ones).
fn meta_descriptions() -> (String, String) {
    let columns: Vec<Value> =
        serde_json::from_str(super::columns("", "ConfigMap").expect("generated")).expect("generated JSON");
    let text = |i: usize| columns[i]["description"].as_str().unwrap_or_default().to_owned();
    (text(0), text(columns.len() - 1))
}

/// The Table printer of `version` of the custom resource that the CRD
/// (its JSON as served) defines.
pub(crate) fn custom_columns(crd: &[u8], version: &str) -> Result<CustomColumns, Unsupported> {
    let crd: Crd = serde_json::from_slice(crd).map_err(|_| Unsupported("crd_unreadable"))?;
    let served = crd.spec.versions.into_iter().find(|v| v.name == version).ok_or(Unsupported("crd_version"))?;
    let (name_description, age_description) = meta_descriptions();
    let mut definitions = vec![("Name".to_owned(), "string".to_owned(), "name".to_owned(), name_description, 0)];
    let mut columns = Vec::new();
    let printer_columns = if served.columns.is_empty() {
        vec![ColumnDefinition {
            name: "Age".to_owned(),
            ty: "date".to_owned(),
            format: String::new(),
            description: age_description,
            priority: 0,
            json_path: ".metadata.creationTimestamp".to_owned(),
        }]
    } else {
        served.columns
    };
    for column in printer_columns {
        let ty = match column.ty.as_str() {
            "integer" => ColumnType::Integer,
            "number" => ColumnType::Number,
            "string" => ColumnType::String,
            "boolean" => ColumnType::Boolean,
            "date" => ColumnType::Date,
            _ => return Err(Unsupported("column_type")),
        };
        columns.push((ty, JsonPath::parse(&column.json_path)?));
        let description = if column.description.is_empty() {
            format!("Custom resource definition column (in JSONPath format): {}", column.json_path)
        } else {
            column.description
        };
        definitions.push((column.name, column.ty, column.format, description, column.priority));
    }
    let definitions = definitions
        .into_iter()
        .map(|(name, ty, format, description, priority)| {
            let s = |v: &str| serde_json::to_string(v).expect("a string");
            format!(
                "{{\"name\":{},\"type\":{},\"format\":{},\"description\":{},\"priority\":{priority}}}",
                s(&name),
                s(&ty),
                s(&format),
                s(&description)
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    let mut reads = Reads::Named(Vec::new());
    reads.add_path(["metadata", "name"].into_iter().map(Some));
    for (_, path) in &columns {
        reads.add_path(path.0.iter().map(|step| match step {
            Step::Field(key) => Some(key.as_str()),
            Step::Index(_) => None,
        }));
    }
    Ok(CustomColumns { definitions: go_json_escape(&format!("[{definitions}]")), columns, reads })
}

impl CustomColumns {
    /// The cells of an object's stored JSON, parsing only what the columns read.
    pub(crate) fn cells_of_json(&self, json: &[u8], now: i128) -> Result<Printed, Unsupported> {
        self.cells(&reads::parse(json, &self.reads), now)
    }

    /// The cells of one object's row at `now` (Unix nanoseconds).
    pub(crate) fn cells(&self, object: &Value, now: i128) -> Result<Printed, Unsupported> {
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let mut cells = vec![Cell::Str(name.to_owned())];
        for (ty, path) in &self.columns {
            cells.push(match path.find(object) {
                None => Cell::Raw("null".to_owned()),
                Some(value) => cell(*ty, value, now)?,
            });
        }
        Ok(cells.into())
    }
}

/// `cellForJSONValue`, and jsonpath's printing for `string` columns.
fn cell(ty: ColumnType, value: &Value, now: i128) -> Result<Cell, Unsupported> {
    let null = Cell::Raw("null".to_owned());
    Ok(match (ty, value) {
        (ColumnType::String, Value::Null) => Cell::Str("<no value>".to_owned()),
        (ColumnType::String, Value::String(s)) => Cell::Str(s.clone()),
        (ColumnType::String, Value::Bool(b)) => Cell::Str(b.to_string()),
        (ColumnType::String, Value::Number(n)) => Cell::Str(match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().ok_or(Unsupported("number"))?),
        }),
        (ColumnType::String, nested) => Cell::Str(go_marshal(nested).ok_or(Unsupported("nested_float"))?),
        (ColumnType::Integer, Value::Number(n)) => match n.as_i64() {
            Some(i) => Cell::Int(i),
            None => {
                let f = n.as_f64().ok_or(Unsupported("number"))?;
                // Go's int64(f) of a float outside int64 is not defined.
                if f.abs() >= 9.2e18 {
                    return Err(Unsupported("integer_range"));
                }
                Cell::Int(f.trunc() as i64)
            }
        },
        (ColumnType::Number, Value::Number(n)) => {
            let f = n.as_f64().ok_or(Unsupported("number"))?;
            Cell::Raw(go_json_float(f).ok_or(Unsupported("float_format"))?)
        }
        (ColumnType::Boolean, Value::Bool(b)) => Cell::Raw(b.to_string()),
        (ColumnType::Date, Value::String(s)) if s.is_empty() || s == "null" => Cell::Str("<unknown>".to_owned()),
        (ColumnType::Date, Value::String(s)) => match crate::go_rules::rfc3339::parse(s) {
            Some((secs, nanos)) => {
                Cell::Str(human_duration(now - (i128::from(secs) * 1_000_000_000 + i128::from(nanos))))
            }
            // Go's RFC 3339 reading differs from ours at the edges: not
            // guessed.
            None => return Err(Unsupported("date")),
        },
        _ => null,
    })
}

/// encoding/json's float64, where it is plain decimal (`'f'` format, which
/// Rust's shortest Display matches); `None` where Go writes an exponent.
fn go_json_float(f: f64) -> Option<String> {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        return None;
    }
    Some(format!("{f}"))
}

/// `json.Marshal` of a decoded value: map keys sorted, `<`, `>`, `&`
/// escaped; `None` for a non-integer number (Go's float formatting is not
/// reproduced here).
fn go_marshal(value: &Value) -> Option<String> {
    fn write(value: &Value, out: &mut String) -> Option<()> {
        match value {
            Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&value.to_string()),
            Value::Number(n) => out.push_str(&n.as_i64()?.to_string()),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out)?;
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(&map[key], out)?;
                }
                out.push('}');
            }
        }
        Some(())
    }
    let mut out = String::new();
    write(value, &mut out)?;
    Some(go_json_escape(&out))
}

/// One step of a column's path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
}

/// A JSONPath of the subset read here: `.a.b`, `[0]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonPath(Vec<Step>);

impl JsonPath {
    /// Parses a column's `jsonPath`; anything outside the subset is refused.
    pub(crate) fn parse(path: &str) -> Result<Self, Unsupported> {
        const REFUSED: Unsupported = Unsupported("json_path");
        let mut steps = Vec::new();
        let mut rest = path;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                let field = &after[..end];
                // Go's jsonpath reads more in a field name (escapes, `*`,
                // `..`); the plain names CRDs use only.
                if field.is_empty() || !field.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-/".contains(&b)) {
                    return Err(REFUSED);
                }
                steps.push(Step::Field(field.to_owned()));
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let end = after.find(']').ok_or(REFUSED)?;
                let inner = &after[..end];
                // A quoted key (`['k']`) is refused too: kube-apiserver's
                // printer answered `null` for a label read that way, where
                // a plain map lookup finds it.
                if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(REFUSED);
                }
                steps.push(Step::Index(inner.parse().map_err(|_| REFUSED)?));
                rest = &after[end + 1..];
            } else {
                return Err(REFUSED);
            }
        }
        if steps.is_empty() {
            return Err(REFUSED);
        }
        Ok(Self(steps))
    }

    /// The value at the path, `None` when anything on the way is missing or
    /// of the wrong type (jsonpath with missing keys allowed: no result).
    pub(crate) fn find<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(object, |value, step| match (step, value) {
            (Step::Field(key), Value::Object(map)) => map.get(key),
            (Step::Index(i), Value::Array(items)) => items.get(*i),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests;
