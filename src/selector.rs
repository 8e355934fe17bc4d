//! Label and field selectors: parsing, matching, and the per-kind field tables.
//!
//! watchmux answers list and watch requests from its cache only when it can
//! select exactly the objects kube-apiserver would. This module holds the two
//! selector languages as apimachinery defines them (`labels.Parse` and
//! `fields.ParseSelector`), their matching rules, and, in [`selectable`], which
//! fields each resource lets a selector name and what values an object has
//! for them. A selector that does not parse here is one the API server would
//! reject too (or one too odd to be worth serving): the caller passes such a
//! request through and lets the API server answer with its own exact error.

pub(crate) mod field;
mod label;
mod packed;
pub(crate) mod selectable;

pub(crate) use field::{FieldSelector, FieldSet, Fields, FieldsBuilder};
pub(crate) use label::{LabelSelector, Labels};

/// Why a selector string could not be parsed.
///
/// The field selector messages are the API server's own; the label selector
/// ones say the same things in fewer words (the API server's text is built
/// from validation paths that mean nothing here).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The label selector does not follow the grammar.
    #[error("unable to parse label selector: found '{found}', expected: {expected}")]
    LabelSyntax { found: String, expected: &'static str },
    /// A label key is not a qualified name (`[prefix/]name`).
    #[error("invalid label key {key:?}: {reason}")]
    LabelKey { key: String, reason: &'static str },
    /// A label value is longer than 63 bytes or has characters a label value cannot have.
    #[error("invalid value {value:?} for label {key:?}: {reason}")]
    LabelValue { key: String, value: String, reason: &'static str },
    /// The value of a `>` or `<` requirement is not a 64-bit integer.
    #[error("invalid value {value:?} for label {key:?}: for 'Gt', 'Lt' operators, the value must be an integer")]
    LabelNotInteger { key: String, value: String },
    /// A NUL byte: apimachinery's lexer treats it as the end of the input
    /// in some places and not in others, so such a selector is left to the API server.
    #[error("invalid label selector: contains a NUL byte")]
    LabelNul,
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm { selector: String, term: String },
    /// A backslash in a field selector value is not followed by `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {sequence}")]
    FieldEscape { sequence: String },
    /// A field selector value has a bare `,` or `=` (printed as its code point, like the API server does).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.character))]
    FieldUnescaped { character: char },
}
