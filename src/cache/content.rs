//! Why JSON and not protobuf: the one decision of the form a read the cache
//! answers is served in.
//!
//! kube-apiserver answers protobuf to a client whose `Accept` puts it first
//! (the kubelet, typed client-go clients, metadata informers);
//! `negotiate.rs` replays that choice and hands over an [`Answer`]: the
//! form asked for and the JSON the client accepts next, if any. The cache
//! answers protobuf only where it can write the API server's bytes exactly.
//! Where it cannot, [`answer_form`] (and nothing else) decides: the JSON the
//! client accepts next, which is what kube-apiserver itself answers for a
//! kind it has no protobuf for, or, when the client accepts no JSON, the
//! read passes through to the API server (passthrough reason
//! `no_protobuf_form`). The obstacles ([`NoProtobufHere`]), in the order
//! they are looked at:
//!
//! 1. **The kind is not in the table** (`encode/protobuf/schema.txt`): a
//!    custom resource (kube-apiserver has no protobuf for it either, outside
//!    PartialObjectMetadata) or a kind newer than the table. Known before any
//!    object is looked at ([`kind_obstacle`]).
//! 2. **The served schema drifted from the table** (a Kubernetes minor the
//!    table does not describe, or a patched server): the reflector's schema
//!    check (`schema_check.rs`, at each full list) compares the kind with the
//!    served OpenAPI document and sets the cache's [`ProtobufAvailability`]:
//!    the kind's own protobuf off, and PartialObjectMetadata's too when
//!    ObjectMeta drifted. The API server does have protobuf for the kind, so
//!    such a read passes through whatever JSON the client also accepts
//!    (never JSON where the API server sends protobuf), counted by
//!    `watchmux_version_form_passthrough_total{form="protobuf"}`. The
//!    supported minors do not drift: the table holds each one's form
//!    (`encode::minor`).
//! 3. **An object has no protobuf form**: the encoder refuses it (a field
//!    the table does not know, a value it cannot place; `cache::state::object`'s
//!    `NoProtobuf`). Every object of a GET or LIST answer, and every
//!    initial event of a watch, is encoded before the headers are sent, so
//!    the answer can still be JSON.
//! 4. **A live event has no protobuf form**, after a watch's headers said
//!    protobuf: the stream ends (`cache::read::watch_stream`), as at a timeout; the client
//!    watches again from the last version it got, and that watch's events
//!    since its version hold the event: obstacle 3.
//!
//! An error answer to a PartialObjectMetadata protobuf request is left to
//! the API server ([`Answer::error_variant`]). Every obstacle met is logged
//! at debug with its reason; the encoder's refusals are also counted by
//! reason (`watchmux_cache_protobuf_refused_total`), the drift by kind
//! (`watchmux_cache_protobuf_disabled`), the watches ended at a live event
//! (`watchmux_cache_protobuf_watch_ended_total`).

use std::sync::atomic::{AtomicU8, Ordering};

use super::reason::Reason;
use crate::cache::resource_info::ResourceInfo;
use crate::cache::state::object::NoProtobuf;
use crate::encode::protobuf::MessageType;
use crate::encode::variant::ContentVariant;
use crate::metrics as m;

/// The form a read is answered in, and the JSON it falls back on for an
/// object with no protobuf form (the next form the client accepts).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub variant: ContentVariant,
    pub or_json: Option<ContentVariant>,
}

impl Answer {
    /// The form of an error answer, as the API server negotiates it; `Err`
    /// for PartialObjectMetadata in protobuf, whose errors the cache leaves to
    /// the API server.
    pub(crate) fn error_variant(self) -> Result<ContentVariant, Reason> {
        match self.variant {
            ContentVariant::PartialObjectMetadataProtobuf => Err(Reason::MetadataProtobufError),
            variant => Ok(variant),
        }
    }
}

/// Why the cache cannot answer in the protobuf form asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoProtobufHere {
    /// The kind has no message in the encoder's table.
    NotInTable,
    /// The schema check turned this form off for the kind.
    SchemaDrift,
    /// An object to be sent has no form in it.
    Refused(NoProtobuf),
}

impl NoProtobufHere {
    fn reason(self) -> &'static str {
        match self {
            Self::NotInTable => "not_in_table",
            Self::SchemaDrift => "schema_drift",
            Self::Refused(refused) => refused.reason,
        }
    }
}

/// The one decision: the answer to serve, given what stands in the way of
/// the protobuf asked for (nothing stands in the way of JSON), or why the
/// read passes through.
pub(crate) fn answer_form(answer: Answer, obstacle: Option<NoProtobufHere>) -> Result<Answer, Reason> {
    let Some(obstacle) = obstacle.filter(|_| answer.variant.is_protobuf()) else {
        return Ok(answer);
    };
    if obstacle == NoProtobufHere::SchemaDrift {
        // The API server has protobuf for this kind; the table does not
        // describe its minor's form of it. Its bytes, not JSON in their place.
        metrics::counter!(m::VERSION_FORM_PASSTHROUGH, "form" => "protobuf").increment(1);
        tracing::debug!(asked = answer.variant.metric_label(), "protobuf of a drifted schema: passed through");
        return Err(Reason::NoProtobufForm);
    }
    let json = answer.or_json.ok_or(Reason::NoProtobufForm);
    tracing::debug!(
        asked = answer.variant.metric_label(),
        reason = obstacle.reason(),
        answered = json.map_or("upstream", |v| v.metric_label()),
        "no protobuf from the cache"
    );
    Ok(Answer { variant: json?, or_json: None })
}

/// What stands in the way of `variant` for a cached kind as a whole (its
/// `info`, and the cache's `availability`), before any object is looked at.
pub(crate) fn kind_obstacle(
    info: &ResourceInfo,
    availability: ProtobufAvailability,
    variant: ContentVariant,
) -> Option<NoProtobufHere> {
    if variant == ContentVariant::Protobuf && MessageType::for_kind(&info.api_version(), &info.kind).is_none() {
        return Some(NoProtobufHere::NotInTable);
    }
    (!availability.allows(variant)).then_some(NoProtobufHere::SchemaDrift)
}

/// Which protobuf forms the cache may serve for its kind, as the schema
/// check last found (see `schema_check.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ProtobufAvailability {
    /// The kind fits the table, or it was not checked: every form.
    Both = 0,
    /// The kind's schema drifted, ObjectMeta did not: PartialObjectMetadata only.
    MetadataOnly = 1,
    /// ObjectMeta drifted too: no protobuf at all.
    Neither = 2,
}

impl ProtobufAvailability {
    /// Whether `variant` may be served (JSON always may).
    pub(crate) fn allows(self, variant: ContentVariant) -> bool {
        match variant {
            ContentVariant::Protobuf => self == Self::Both,
            ContentVariant::PartialObjectMetadataProtobuf => self != Self::Neither,
            _ => true,
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Both,
            1 => Self::MetadataOnly,
            _ => Self::Neither,
        }
    }
}

/// A [`ProtobufAvailability`] the writer sets and readers load, lock-free.
#[derive(Debug)]
pub(crate) struct AvailabilityCell(AtomicU8);

impl Default for AvailabilityCell {
    fn default() -> Self {
        Self(AtomicU8::new(ProtobufAvailability::Both as u8))
    }
}

impl AvailabilityCell {
    pub(crate) fn load(&self) -> ProtobufAvailability {
        ProtobufAvailability::from_u8(self.0.load(Ordering::Acquire))
    }

    /// Sets it; returns what it was.
    pub(crate) fn swap(&self, to: ProtobufAvailability) -> ProtobufAvailability {
        ProtobufAvailability::from_u8(self.0.swap(to as u8, Ordering::AcqRel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PB: ContentVariant = ContentVariant::Protobuf;
    const JSON: ContentVariant = ContentVariant::Json;

    #[test]
    fn protobuf_with_an_obstacle_falls_back_to_the_next_json_or_passes_through() {
        let with_json = Answer { variant: PB, or_json: Some(JSON) };
        assert_eq!(answer_form(with_json, None).unwrap().variant, PB);
        let fell_back = answer_form(with_json, Some(NoProtobufHere::NotInTable)).unwrap();
        assert_eq!((fell_back.variant, fell_back.or_json), (JSON, None));
        let only_protobuf = Answer { variant: PB, or_json: None };
        let refused = NoProtobufHere::Refused(NoProtobuf { reason: "unknown_field" });
        assert!(matches!(answer_form(only_protobuf, Some(refused)), Err(Reason::NoProtobufForm)));
        // A drifted schema is another minor's form: the API server's bytes.
        assert!(matches!(answer_form(with_json, Some(NoProtobufHere::SchemaDrift)), Err(Reason::NoProtobufForm)));
        // JSON is never in the way of anything.
        let json = Answer { variant: JSON, or_json: None };
        assert_eq!(answer_form(json, Some(NoProtobufHere::SchemaDrift)).unwrap().variant, JSON);
    }

    #[test]
    fn drift_in_metadata_turns_off_every_protobuf_form_and_in_the_kind_only_its_own() {
        let metadata = ContentVariant::PartialObjectMetadataProtobuf;
        assert!(ProtobufAvailability::Both.allows(PB) && ProtobufAvailability::Both.allows(metadata));
        assert!(!ProtobufAvailability::MetadataOnly.allows(PB) && ProtobufAvailability::MetadataOnly.allows(metadata));
        assert!(!ProtobufAvailability::Neither.allows(PB) && !ProtobufAvailability::Neither.allows(metadata));
        assert!(ProtobufAvailability::Neither.allows(JSON));
        let cell = AvailabilityCell::default();
        assert_eq!(cell.swap(ProtobufAvailability::MetadataOnly), ProtobufAvailability::Both);
        assert_eq!(cell.load(), ProtobufAvailability::MetadataOnly);
    }
}
