//! Pieces every module that talks to the upstream shares about errors.

/// An error and its sources on one line, e.g. "client error (Connect): tcp
/// connect error: Connection refused (os error 111)".
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
