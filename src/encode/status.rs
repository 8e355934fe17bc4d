//! Kubernetes `Status` objects, the one shape every API error takes.
//!
//! kube-apiserver never answers an error with bare text: clients (client-go,
//! kubectl, kube-rs) decode the body as a `meta.k8s.io/v1` Status and show its
//! message. watchmux answers its own errors the same way, so a client cannot
//! tell whether the proxy or the API server refused it.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

use super::protobuf::{self, Unplaceable};
use super::variant::{ContentVariant, Endpoint};
use crate::body::{self, ProxyBody};

/// The `reason` field of a Status, as kube-apiserver spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusReason {
    BadRequest,
    NotFound,
    RequestEntityTooLarge,
    Unauthorized,
    Forbidden,
    NotAcceptable,
    ServiceUnavailable,
    Timeout,
    Expired,
    TooManyRequests,
}

impl StatusReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "BadRequest",
            Self::NotFound => "NotFound",
            Self::RequestEntityTooLarge => "RequestEntityTooLarge",
            Self::Unauthorized => "Unauthorized",
            Self::Forbidden => "Forbidden",
            Self::NotAcceptable => "NotAcceptable",
            Self::ServiceUnavailable => "ServiceUnavailable",
            Self::Timeout => "Timeout",
            Self::Expired => "Expired",
            Self::TooManyRequests => "TooManyRequests",
        }
    }
}

/// A failure Status as kube-apiserver would send it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Status {
    pub code: StatusCode,
    pub reason: StatusReason,
    pub message: String,
    /// `details`, when the API server would include them.
    pub details: Option<Map<String, Value>>,
    /// Seconds for a `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after_seconds: Option<u32>,
    /// Send `X-Content-Type-Options: nosniff`, as the API server does with
    /// the errors its filters write (403 among them).
    pub nosniff: bool,
}

impl Status {
    pub(crate) fn new(code: StatusCode, reason: StatusReason, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None, retry_after_seconds: None, nosniff: false }
    }

    /// The answer when the upstream API server cannot be reached.
    pub(crate) fn upstream_unavailable(server: impl std::fmt::Display, detail: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            StatusReason::ServiceUnavailable,
            format!("watchmux cannot reach the upstream API server {server}: {detail}"),
        )
    }

    pub(crate) fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    /// The Status as a JSON value, fields in the API server's order.
    pub(crate) fn to_json(&self) -> Value {
        let mut details = self.details.clone();
        if let Some(secs) = self.retry_after_seconds {
            details.get_or_insert_with(Map::new).insert("retryAfterSeconds".into(), json!(secs));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason.as_str(),
        });
        let obj = status.as_object_mut().expect("built as an object");
        if let Some(details) = details {
            obj.insert("details".into(), Value::Object(details));
        }
        obj.insert("code".into(), json!(self.code.as_u16()));
        status
    }

    /// The Status as the API server's protobuf serializer writes it (the
    /// envelope, no newline).
    pub(crate) fn to_protobuf(&self) -> Result<Vec<u8>, Unplaceable> {
        protobuf::encode_object(self.to_json().to_string().as_bytes())
    }

    /// The Status as a complete HTTP response with a JSON body.
    pub(crate) fn into_response(self) -> Response<ProxyBody> {
        self.into_response_as(ContentVariant::Json)
    }

    /// The Status as the API server writes an error it cannot negotiate a
    /// form for (the `Accept` header was the error: `WriteRawJSON`, Go's
    /// `json.MarshalIndent` with two spaces, no newline at the end).
    pub(crate) fn into_raw_json_response(self) -> Response<ProxyBody> {
        let pretty = serde_json::to_string_pretty(&self.to_json()).expect("a JSON value serializes");
        self.respond(Bytes::from(go_json_escape(&pretty)), "application/json")
    }

    /// The Status as a complete HTTP response in `variant`'s serializer:
    /// protobuf for a protobuf variant (the API server negotiates its error
    /// serializer too; callers pass only [`ContentVariant::Protobuf`] there,
    /// since for a metadata Accept header the error serializer is chosen
    /// without the `as=` clauses), JSON otherwise.
    pub(crate) fn into_response_as(self, variant: ContentVariant) -> Response<ProxyBody> {
        let (bytes, content_type) = match variant.is_protobuf().then(|| self.to_protobuf()) {
            Some(Ok(body)) => (Bytes::from(body), variant.content_type(Endpoint::Get)),
            // The API server's encoder ends the body with a newline.
            _ => (Bytes::from(go_json_escape(&self.to_json().to_string()) + "\n"), "application/json"),
        };
        self.respond(bytes, content_type)
    }

    fn respond(self, bytes: Bytes, content_type: &'static str) -> Response<ProxyBody> {
        let mut resp = Response::new(body::full(bytes));
        *resp.status_mut() = self.code;
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
        if let Some(secs) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.nosniff {
            headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        }
        resp
    }
}

/// Go's encoding/json escapes `&`, `<`, `>` and the line and paragraph
/// separators inside strings; the API server's errors are written with it,
/// so a message with `&` must read `\u0026` to be the same bytes. None of
/// these characters can occur outside a string in JSON, so replacing them
/// everywhere is exact.
pub(crate) fn go_json_escape(json: &str) -> String {
    if !json.contains(['&', '<', '>', '\u{2028}', '\u{2029}']) {
        return json.to_owned();
    }
    json.replace('&', "\\u0026")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// `s` as a JSON string the way Go's encoding/json writes it (the HTML-safe
/// escapes of [`go_json_escape`] included), appended in one pass with the
/// plain runs copied as they are: for strings written one by one on a hot
/// path (a Table's cells), where serializing and then escaping the document
/// copied each string six times.
pub(crate) fn push_go_json_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        let escaped: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '<' => Some("\\u003c"),
            '>' => Some("\\u003e"),
            '&' => Some("\\u0026"),
            '\u{2028}' => Some("\\u2028"),
            '\u{2029}' => Some("\\u2029"),
            c if c < ' ' => None,
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        plain = i + c.len_utf8();
        match escaped {
            Some(escaped) => out.push_str(escaped),
            None => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    proptest::proptest! {
        /// A string is written as Go's encoding/json writes it, with or
        /// without anything to escape: the same as serializing it and
        /// escaping the document.
        #[test]
        fn strings_are_pushed_as_go_escapes_them(s in "(?s)[ -~<>&\"\\\\\\x00-\\x1f\\u{7f}\\u{e9}\\u{2028}\\u{2029}\\u{1f600}]{0,12}") {
            let mut out = String::new();
            push_go_json_string(&mut out, &s);
            proptest::prop_assert_eq!(out, go_json_escape(&serde_json::to_string(&s).unwrap()));
        }
    }

    #[test]
    fn plain_and_special_strings_are_pushed_as_go_writes_them() {
        let pushed = |s: &str| {
            let mut out = String::new();
            push_go_json_string(&mut out, s);
            out
        };
        assert_eq!(pushed("10.0.0.1"), r#""10.0.0.1""#);
        assert_eq!(pushed("a<b>&\"c\\\n\u{2028}é\u{1}"), r#""a\u003cb\u003e\u0026\"c\\\n\u2028é\u0001""#);
    }

    #[tokio::test]
    async fn unavailable_upstream_is_a_503_status_naming_the_upstream_and_the_cause() {
        let resp =
            Status::upstream_unavailable("https://10.0.0.1:6443", "connection refused").retry_after(1).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["code"], 503);
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
        assert_eq!(
            v["message"],
            "watchmux cannot reach the upstream API server https://10.0.0.1:6443: connection refused"
        );
    }

    #[tokio::test]
    async fn bodies_escape_html_characters_as_go_does() {
        let resp = Status::new(StatusCode::BAD_REQUEST, StatusReason::BadRequest, "a & <b>").into_response();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.contains(r#""message":"a \u0026 \u003cb\u003e""#), "{text}");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["message"], "a & <b>");
    }

    #[tokio::test]
    async fn an_error_the_accept_header_caused_is_written_indented_without_a_newline() {
        // kube-apiserver v1.37.2's answer to `GET /api/v1/namespaces/x/configmaps/a`, Accept: text/html.
        let go = "{\n  \"kind\": \"Status\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {},\n  \"status\": \"Failure\",\n  \"message\": \"406: Not Acceptable\\n\\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf\",\n  \"reason\": \"NotAcceptable\",\n  \"details\": {},\n  \"code\": 406\n}";
        let resp = crate::negotiate::route_refusal(true).into_raw_json_response();
        assert_eq!(resp.status(), StatusCode::NOT_ACCEPTABLE);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(std::str::from_utf8(&body).unwrap(), go);
    }

    #[tokio::test]
    async fn a_protobuf_status_is_the_envelope_go_writes() {
        // Go's bytes (protocorpus -golden; see encode/protobuf/tests.rs, "status").
        let go = "6b3873000a0c0a027631120653746174757312260a060a0012001a0012074661696c7572651a07746f6f206f6c64220745787069726564309a031a002200";
        let resp =
            Status::new(StatusCode::GONE, StatusReason::Expired, "too old").into_response_as(ContentVariant::Protobuf);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/vnd.kubernetes.protobuf");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let hex: String = body.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, go);
    }

    #[test]
    fn every_status_watchmux_writes_has_a_protobuf_form() {
        let mut details = Map::new();
        details.insert("name".into(), "n".into());
        details.insert("group".into(), "apps".into());
        details.insert("kind".into(), "deployments".into());
        details.insert("causes".into(), json!([{"reason": "ResourceVersionTooLarge", "message": "Too large"}]));
        let mut status = Status::new(StatusCode::GATEWAY_TIMEOUT, StatusReason::Timeout, "t").retry_after(1);
        status.details = Some(details);
        assert!(status.to_protobuf().is_ok());
    }

    #[test]
    fn status_without_details_has_no_details_field() {
        let v = Status::new(
            StatusCode::NOT_FOUND,
            StatusReason::NotFound,
            "the server could not find the requested resource",
        )
        .to_json();
        assert!(v.get("details").is_none());
        assert_eq!(v["code"], 404);
    }
}
