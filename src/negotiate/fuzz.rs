//! Bounded fuzzing (proptest) of this parser of untrusted input: any header value, and media ranges with odd parameters
//! and q values, on every endpoint. The answer is deterministic, GET and WATCH always
//! agree, and LIST differs from GET only by one of them refusing.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use http::HeaderValue;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::encode::variant::Endpoint;
use crate::fuzz::{Words, config, one_of};
use crate::negotiate::{Negotiation, PassthroughReason, UpstreamCbor, negotiate, negotiate_read};

const ENDPOINTS: [Endpoint; 3] = [Endpoint::Get, Endpoint::List, Endpoint::Watch];
/// Repeats weigh the choices toward what clients send.
const TYPES: &[&str] = &["application", "application", "application", "*", "text", "Application", "", " application"];
const SUBTYPES: Words = &[
    &["json", "json", "vnd.kubernetes.protobuf", "vnd.kubernetes.protobuf", "yaml", "*"],
    &["cbor", "JSON", "json/", "json/x", ""],
];
/// Parameter sets clients send together.
const CONVERSIONS: &[&str] = &[
    "as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
    "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    "as=Table;g=meta.k8s.io;v=v1",
    "as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
    "stream=watch",
];
const PARAMS: &[&str] = &["as", "g", "v", "stream", "sv", "Q", "", " as ", "x"];
const VALUES: Words = &[
    &["Table", "PartialObjectMetadata", "PartialObjectMetadataList", "meta.k8s.io", "v1", "v1beta1", "watch"],
    &["", " v1 ", "a=b", "\"v1\""],
];
const Q_VALUES: Words = &[
    &["0", "1", "1.0000001", "-0", "1e0", "1E-1", "1e400", "-1e400", ".5", "5.", "0.", "00001", "+1"],
    &["NaN", "nan", "inf", "-Inf", "infinity", "+Infinity"],
    // Read as 0 by Go, or not reproduced at all (hex, digit separators).
    &["", "1e", "1e+", "1..0", "0.5 ", " 0.5", "0x1p-1", "0X1", "1_0"],
];

fn q_value() -> impl Strategy<Value = String> {
    prop_oneof![
        one_of(Q_VALUES).prop_map(str::to_owned),
        any::<f32>().prop_map(|q| q.to_string()),
        any::<f64>().prop_map(|q| format!("{q:e}")),
        "[0-9.eE+-]{1,12}",
        // Past the 64 bytes the q parser reads.
        "[0-9.]{60,70}",
    ]
}

fn media_range() -> impl Strategy<Value = String> {
    let param = prop_oneof![
        (select(PARAMS), one_of(VALUES)).prop_map(|(k, v)| format!("{k}={v}")),
        q_value().prop_map(|q| format!("q={q}")),
        select(CONVERSIONS).prop_map(str::to_owned),
        select(&["as", "q", "=", "q==1", "v=v1="][..]).prop_map(str::to_owned),
    ];
    (select(TYPES), one_of(SUBTYPES), vec(param, 0..5), select(&[";", "; ", " ;"][..])).prop_map(
        |(media_type, subtype, params, sep)| {
            let mut range = if subtype.is_empty() { media_type.to_owned() } else { format!("{media_type}/{subtype}") };
            for param in params {
                range.push_str(sep);
                range.push_str(&param);
            }
            range
        },
    )
}

/// Mostly a few media ranges, sometimes up to 16, past the 12 that Go sorts by insertion.
fn accept() -> impl Strategy<Value = String> {
    let around = &["", "", "", " ", "\t"][..];
    let ranges = prop_oneof![3 => vec(media_range(), 0..4), 1 => vec(media_range(), 0..16)];
    (ranges, select(&[",", ", ", " ,"][..]), select(around), select(around))
        .prop_map(|(ranges, sep, lead, trail)| format!("{lead}{}{trail}", ranges.join(sep)))
}

fn answers_agree(value: &HeaderValue) -> Result<(), TestCaseError> {
    let answers = ENDPOINTS.map(|e| negotiate(Some(value), e, UpstreamCbor::Off));
    prop_assert_eq!(&ENDPOINTS.map(|e| negotiate(Some(value), e, UpstreamCbor::Off)), &answers, "{:?} twice", value);
    let [get, list, watch] = answers;
    // Only the list flag of a metadata conversion depends on the endpoint, and a mismatch is a 406.
    prop_assert_eq!(&get, &watch, "{:?}", value);
    let refused = Negotiation::Passthrough(PassthroughReason::NotAcceptable);
    prop_assert!(get == list || get == refused || list == refused, "{:?}: GET {:?}, LIST {:?}", value, get, list);
    Ok(())
}

/// A read's one negotiation, made before the upstream's CBOR is known, answers as the two it
/// stands for: with the CBOR unknown, and again once it is known when a CBOR clause decided.
fn one_negotiation_per_read(value: &HeaderValue) -> Result<(), TestCaseError> {
    for endpoint in ENDPOINTS {
        let once = negotiate_read(Some(value), endpoint);
        for cbor in [UpstreamCbor::Unknown, UpstreamCbor::Off, UpstreamCbor::On] {
            let twice = match negotiate(Some(value), endpoint, UpstreamCbor::Unknown) {
                Negotiation::Passthrough(PassthroughReason::Cbor) => negotiate(Some(value), endpoint, cbor),
                decided => decided,
            };
            prop_assert_eq!(once.clone().with(cbor), twice, "{:?} {:?} {:?}", value, endpoint, cbor);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_read_negotiated_once_answers_as_before_and_after_its_cbor_is_known(accept in accept()) {
        one_negotiation_per_read(&HeaderValue::from_str(&accept).expect("visible ASCII, spaces and tabs"))?;
    }

    #[test]
    fn any_header_value_gets_one_answer_agreeing_across_endpoints(
        bytes in vec(prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff], 0..300),
    ) {
        answers_agree(&HeaderValue::from_bytes(&bytes).expect("only bytes a header value may hold"))?;
    }

    #[test]
    fn media_ranges_with_odd_parameters_get_one_answer_agreeing_across_endpoints(accept in accept()) {
        answers_agree(&HeaderValue::from_str(&accept).expect("visible ASCII, spaces and tabs"))?;
    }
}
