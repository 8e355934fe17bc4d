use serde_json::json;

use super::*;

const NOW: i128 = 1_800_000_000 * 1_000_000_000;

fn crd(columns: Value) -> Vec<u8> {
    json!({"spec": {"versions": [
        {"name": "v1alpha1"},
        {"name": "v1", "additionalPrinterColumns": columns}]}})
    .to_string()
    .into_bytes()
}

/// The row's cells, from the whole object and from what the columns read
/// of its JSON (as the cache prints): the two must agree.
fn cells(columns: Value, object: Value) -> Result<Vec<Cell>, Unsupported> {
    let printer = custom_columns(&crd(columns), "v1")?;
    let full = printer.cells(&object, NOW);
    assert_eq!(printer.cells_of_json(&serde_json::to_vec(&object).unwrap(), NOW), full, "{object}");
    Ok(full?.cells)
}

#[test]
fn json_paths_of_the_subset_parse_and_the_rest_is_refused() {
    let field = |s: &str| Step::Field(s.to_owned());
    assert_eq!(JsonPath::parse(".spec.replicas").unwrap().0, vec![field("spec"), field("replicas")]);
    assert_eq!(
        JsonPath::parse(".spec.ports[1].node-port").unwrap().0,
        vec![field("spec"), field("ports"), Step::Index(1), field("node-port")]
    );
    for refused in [
        "",
        "spec.replicas",
        ".spec..x",
        "..x",
        ".items[*].name",
        ".status.conditions[?(@.type==\"Ready\")].status",
        ".a[-1]",
        ".a[0:2]",
        ".a['b','c']",
        ".metadata.labels['app.kubernetes.io/name']",
        r#".a["b"]"#,
        ".a['b",
        ".a[ 0 ]",
        r".a\.b",
        ".a.b c",
        ".a.{b}",
        "$.a",
    ] {
        assert_eq!(JsonPath::parse(refused), Err(Unsupported("json_path")), "{refused:?}");
    }
}

#[test]
fn anything_missing_on_the_way_is_no_result() {
    let o = json!({"spec": {"list": [{"a": 1}], "s": "x", "n": null}});
    let find = |p: &str| JsonPath::parse(p).unwrap().find(&o).cloned();
    assert_eq!(find(".spec.list[0].a"), Some(json!(1)));
    assert_eq!(find(".spec.list[1].a"), None);
    assert_eq!(find(".spec.s.t"), None);
    assert_eq!(find(".spec.s[0]"), None);
    assert_eq!(find(".spec.list.a"), None);
    assert_eq!(find(".spec.n.x"), None);
    assert_eq!(find(".spec.n"), Some(Value::Null));
}

#[test]
fn cells_follow_cell_for_json_value_type_by_type() {
    let columns = json!([
        {"name": "I", "type": "integer", "jsonPath": ".i"},
        {"name": "N", "type": "number", "jsonPath": ".n"},
        {"name": "B", "type": "boolean", "jsonPath": ".b"},
        {"name": "S", "type": "string", "jsonPath": ".s"},
        {"name": "D", "type": "date", "jsonPath": ".d"},
    ]);
    let row = |o: Value| cells(columns.clone(), o).unwrap();
    let raw = |s: &str| Cell::Raw(s.to_owned());
    let str = |s: &str| Cell::Str(s.to_owned());
    assert_eq!(
        row(json!({"metadata": {"name": "w"}, "i": 7, "n": 1.5, "b": true, "s": "x<y", "d": "2027-01-14T23:00:00Z"})),
        vec![str("w"), Cell::Int(7), raw("1.5"), raw("true"), str("x<y"), str("9h")]
    );
    // Go truncates a float into an integer column and writes an integral
    // float64 without a fraction; other JSON types are null.
    assert_eq!(
        row(json!({"i": 2.9, "n": 3, "b": "true", "s": 12, "d": 5})),
        vec![str(""), Cell::Int(2), raw("3"), raw("null"), str("12"), raw("null")]
    );
    // Missing: null everywhere; a null string is jsonpath's "<no value>".
    assert_eq!(
        row(json!({"s": null, "d": ""})),
        vec![str(""), raw("null"), raw("null"), raw("null"), str("<no value>"), str("<unknown>")]
    );
    // Strings print scalars as fmt.Sprint, nested values as json.Marshal.
    assert_eq!(row(json!({"s": 0.000_01}))[4], str("1e-05"));
    assert_eq!(row(json!({"s": false}))[4], str("false"));
    assert_eq!(row(json!({"s": {"z": [1, "<"], "a": null}}))[4], str(r#"{"a":null,"z":[1,"\u003c"]}"#));
}

#[test]
fn cells_go_might_print_otherwise_are_refused() {
    let one = |ty: &str, value: Value| cells(json!([{"name": "X", "type": ty, "jsonPath": ".x"}]), json!({"x": value}));
    assert_eq!(one("string", json!({"f": 1.5})), Err(Unsupported("nested_float")));
    assert_eq!(one("number", json!(1e-7)), Err(Unsupported("float_format")));
    assert_eq!(one("number", json!(1e21)), Err(Unsupported("float_format")));
    assert_eq!(one("integer", json!(1e19)), Err(Unsupported("integer_range")));
    assert_eq!(one("date", json!("yesterday")), Err(Unsupported("date")));
    assert!(one("number", json!(0)).is_ok());
}

#[test]
fn definitions_are_name_then_the_columns_with_go_s_defaults() {
    let columns = json!([
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1, "format": "int32"},
        {"name": "Note", "type": "string", "jsonPath": ".spec.note", "description": "a <b> & c"},
    ]);
    let printer = custom_columns(&crd(columns), "v1").unwrap();
    let defs: Vec<Value> = serde_json::from_str(&printer.definitions).unwrap();
    assert_eq!(defs[0]["name"], "Name");
    assert_eq!(defs[0]["format"], "name");
    assert_eq!(
        printer.definitions.split("},{").nth(1).unwrap(),
        "\"name\":\"Replicas\",\"type\":\"integer\",\"format\":\"int32\",\"description\":\"Custom resource definition column (in JSONPath format): .spec.replicas\",\"priority\":1"
    );
    assert!(printer.definitions.ends_with(
        "{\"name\":\"Note\",\"type\":\"string\",\"format\":\"\",\"description\":\"a \\u003cb\\u003e \\u0026 c\",\"priority\":0}]"
    ));
    // No columns: the default Age, a date at the creation timestamp.
    let default = custom_columns(&crd(json!([])), "v1").unwrap();
    let defs: Vec<Value> = serde_json::from_str(&default.definitions).unwrap();
    assert_eq!(defs.len(), 2);
    assert_eq!((defs[1]["name"].as_str(), defs[1]["type"].as_str()), (Some("Age"), Some("date")));
    assert!(defs[1]["description"].as_str().unwrap().starts_with("CreationTimestamp is a timestamp"));
    let age = default.cells(&json!({"metadata": {"creationTimestamp": "2027-01-15T07:59:00Z"}}), NOW).unwrap();
    assert_eq!(age.cells[1], Cell::Str("60s".to_owned()));
    // A version the CRD does not have, a type it cannot have.
    assert_eq!(custom_columns(&crd(json!([])), "v2").err(), Some(Unsupported("crd_version")));
    let odd = json!([{"name": "X", "type": "object", "jsonPath": ".x"}]);
    assert_eq!(custom_columns(&crd(odd), "v1").err(), Some(Unsupported("column_type")));
}

/// A JSON value of a few levels, its keys from the columns' own names.
fn value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..3).prop_map(Value::from),
        Just(json!(1.5)),
        Just(json!("2027-01-14T23:00:00Z")),
        "[a-c]{0,2}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("(a|b|spec|status|metadata|name)", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// Whatever the columns' paths and the object, the cells printed from
    /// what the columns read of its JSON are those of the whole object.
    #[test]
    fn cells_are_the_same_from_what_the_columns_read(
        paths in proptest::collection::vec(
            proptest::collection::vec("(\\.(a|b|spec|status|metadata|name)|\\[[0-1]\\])", 1..4), 1..4),
        types in proptest::collection::vec("(integer|number|string|boolean|date)", 4),
        object in value(),
    ) {
        let columns: Vec<Value> = paths
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (p, _))| p[0].starts_with('.'))
            .map(|(i, (p, ty))| json!({"name": format!("c{i}"), "type": ty, "jsonPath": p.concat()}))
            .collect();
        let _ = cells(Value::Array(columns), object);
    }
}
