//! A reader of exactly what the consistency check needs from a protobuf
//! `PartialObjectMetadataList` page: the list's resourceVersion and continue
//! token, and each item's namespace, name and resourceVersion. Every other
//! field is skipped by its wire type, so fields the API server adds later
//! change nothing.
//!
//! `k8s\0` + `runtime.Unknown{raw: PartialObjectMetadataList}`;
//! `PartialObjectMetadataList{1: ListMeta, 2: repeated PartialObjectMetadata}`;
//! `ListMeta{2: resourceVersion, 3: continue}`;
//! `PartialObjectMetadata{1: ObjectMeta}`;
//! `ObjectMeta{1: name, 3: namespace, 6: resourceVersion}`
//! (apimachinery's `meta/v1/generated.proto`).

use crate::encode::protobuf::envelope_message;

/// One page, as the check reads it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Page {
    pub resource_version: String,
    pub continue_token: Option<String>,
    /// (namespace, name, resourceVersion) of each item.
    pub items: Vec<(String, String, String)>,
}

/// Why a body is not a page.
#[derive(Debug, thiserror::Error)]
#[error("not a protobuf PartialObjectMetadataList: {0}")]
pub(crate) struct Malformed(&'static str);

/// Reads a protobuf PartialObjectMetadataList body.
pub(crate) fn read_page(body: &[u8]) -> Result<Page, Malformed> {
    let raw = envelope_message(body).ok_or(Malformed("no envelope"))?;
    let mut page = Page::default();
    for field in Fields(&body[raw]) {
        match field? {
            (1, Value::Bytes(list_meta)) => {
                for f in Fields(list_meta) {
                    match f? {
                        (2, Value::Bytes(rv)) => page.resource_version = text(rv)?,
                        // Go writes every string field, "" too: the last page has "".
                        (3, Value::Bytes(token)) if !token.is_empty() => page.continue_token = Some(text(token)?),
                        _ => {}
                    }
                }
            }
            (2, Value::Bytes(item)) => page.items.push(item_identity(item)?),
            _ => {}
        }
    }
    Ok(page)
}

fn item_identity(item: &[u8]) -> Result<(String, String, String), Malformed> {
    let (mut namespace, mut name, mut rv) = (String::new(), String::new(), String::new());
    for field in Fields(item) {
        if let (1, Value::Bytes(meta)) = field? {
            for f in Fields(meta) {
                match f? {
                    (1, Value::Bytes(v)) => name = text(v)?,
                    (3, Value::Bytes(v)) => namespace = text(v)?,
                    (6, Value::Bytes(v)) => rv = text(v)?,
                    _ => {}
                }
            }
        }
    }
    Ok((namespace, name, rv))
}

fn text(bytes: &[u8]) -> Result<String, Malformed> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Malformed("a string that is not UTF-8"))
}

enum Value<'a> {
    Bytes(&'a [u8]),
    Other,
}

/// The fields of one message, in order.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        Some(self.read())
    }
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> Result<(u64, Value<'a>), Malformed> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => {
                self.varint()?;
                Value::Other
            }
            1 => {
                self.skip(8)?;
                Value::Other
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Malformed("a length past memory"))?;
                Value::Bytes(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                Value::Other
            }
            _ => return Err(Malformed("a group or unknown wire type")),
        };
        Ok((key >> 3, value))
    }

    fn varint(&mut self) -> Result<u64, Malformed> {
        let mut out = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.0.split_first().ok_or(Malformed("cut short in a varint"))?;
            self.0 = rest;
            out |= u64::from(b & 0x7F) << (7 * i);
            if b < 0x80 {
                return Ok(out);
            }
        }
        Err(Malformed("a varint longer than ten bytes"))
    }

    fn skip(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed("cut short in a field"));
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::protobuf::{encode_list, encode_partial_object_metadata};

    /// A page as the API server writes it (the crate's encoder, held to
    /// Go's own by the protobuf corpus).
    fn page(list_meta: &str, items: &[&str]) -> Vec<u8> {
        let items: Vec<Vec<u8>> = items.iter().map(|m| encode_partial_object_metadata(m.as_bytes()).unwrap()).collect();
        encode_list("meta.k8s.io/v1", "PartialObjectMetadataList", list_meta.as_bytes(), items).unwrap()
    }

    #[test]
    fn identities_and_the_lists_version_and_token_are_read() {
        let body = page(
            r#"{"resourceVersion":"42","continue":"tok","remainingItemCount":3}"#,
            &[
                r#"{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"40","labels":{"x":"y"},"generation":2,"creationTimestamp":"2026-01-01T00:00:00Z"}"#,
                r#"{"name":"node-1","resourceVersion":"41"}"#,
            ],
        );
        let read = read_page(&body).unwrap();
        assert_eq!(read.resource_version, "42");
        assert_eq!(read.continue_token.as_deref(), Some("tok"));
        assert_eq!(read.items, [("ns".into(), "a".into(), "40".into()), (String::new(), "node-1".into(), "41".into())]);
    }

    #[test]
    fn the_last_page_has_no_token_and_broken_bodies_are_refused() {
        let body = page(r#"{"resourceVersion":"7"}"#, &[]);
        assert_eq!(read_page(&body).unwrap(), Page { resource_version: "7".into(), ..Page::default() });
        assert!(read_page(b"{\"kind\":\"Status\"}").is_err(), "JSON");
        let cut = &body[..body.len() - 6];
        assert!(read_page(cut).is_err(), "cut short");
    }
}
