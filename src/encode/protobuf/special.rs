//! The types whose protobuf form apimachinery writes by hand, each as the Go
//! code in the comment beside it does.
//!
//! Every function takes the JSON value (never null: absence and null are the
//! caller's) and returns the message body, without key or length.

use base64::Engine as _;
use serde_json::value::RawValue;

use super::json::{self, JsonKind};
use super::schema::Special;
use super::wire::{LEN, VARINT, put_bytes, put_key, put_varint};

/// Why a special value could not be read; the caller adds the path.
pub(super) struct BadSpecial {
    pub expected: &'static str,
    pub found: String,
}

fn bad(expected: &'static str, raw: &RawValue) -> BadSpecial {
    BadSpecial { expected, found: shorten(raw.get()) }
}

/// A JSON text short enough for an error message.
pub(super) fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The body of a special value.
pub(super) fn encode(special: Special, raw: &RawValue, out: &mut Vec<u8>) -> Result<(), BadSpecial> {
    match special {
        Special::Time => time(raw, false, out),
        Special::MicroTime => time(raw, true, out),
        Special::Duration => duration(raw, out),
        Special::IntOrString => int_or_string(raw, out),
        Special::Quantity => quantity(raw, out),
        // RawExtension.MarshalToSizedBuffer and FieldsV1's: field 1 `raw`,
        // written when Raw != nil. UnmarshalJSON keeps the JSON text as Raw
        // (null leaves it nil), so the bytes are the JSON value itself.
        Special::RawExtension | Special::FieldsV1 => {
            if JsonKind::of(raw) != JsonKind::Null {
                put_bytes(out, 1, raw.get().as_bytes());
            }
            Ok(())
        }
        // runtime.Unknown has no JSON form of its own to read back.
        Special::Unknown => Err(bad("a runtime.Unknown (no JSON form)", raw)),
    }
}

/// The body Go writes for the zero value of a non-pointer special field
/// absent from (or null in) the JSON.
pub(super) fn zero(special: Special, out: &mut Vec<u8>) -> Result<(), BadSpecial> {
    match special {
        // Time.MarshalToSizedBuffer: a zero time writes nothing; RawExtension
        // and FieldsV1 with nil Raw write nothing either.
        Special::Time | Special::MicroTime | Special::RawExtension | Special::FieldsV1 => Ok(()),
        Special::Duration => {
            put_key(out, 1, VARINT);
            put_varint(out, 0);
            Ok(())
        }
        Special::IntOrString => {
            write_int_or_string(0, 0, "", out);
            Ok(())
        }
        // Quantity{}.String() is "0".
        Special::Quantity => {
            put_bytes(out, 1, b"0");
            Ok(())
        }
        Special::Unknown => Err(BadSpecial { expected: "a runtime.Unknown", found: "nothing".into() }),
    }
}

/// metav1.Time and MicroTime: `Timestamp{seconds = 1, nanos = 2}`, both
/// always written, or nothing at all for the zero time. Time's ProtoTime
/// leaves nanos out (its JSON has whole seconds); MicroTime's truncates them
/// to microseconds.
fn time(raw: &RawValue, micro: bool, out: &mut Vec<u8>) -> Result<(), BadSpecial> {
    let expected = if micro { "an RFC 3339 time with microseconds" } else { "an RFC 3339 time" };
    let text = json::string(raw).map_err(|_| bad(expected, raw))?;
    let (seconds, nanos) = crate::go_rules::rfc3339::parse(&text).ok_or_else(|| bad(expected, raw))?;
    // time.Time{}.IsZero(): 0001-01-01T00:00:00Z, whatever the zone.
    if seconds == GO_ZERO_TIME_UNIX && nanos == 0 {
        return Ok(());
    }
    let nanos = if micro { nanos / 1000 * 1000 } else { 0 };
    put_key(out, 1, VARINT);
    put_varint(out, seconds as u64);
    put_key(out, 2, VARINT);
    put_varint(out, i64::from(nanos) as u64);
    Ok(())
}

/// Unix seconds of Go's zero time, January 1 of year 1, UTC.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// metav1.Duration: `{duration = 1}` as int64 nanoseconds, always written.
/// Its JSON is time.Duration.String(), read back with time.ParseDuration.
fn duration(raw: &RawValue, out: &mut Vec<u8>) -> Result<(), BadSpecial> {
    let expected = "a Go duration";
    let text = json::string(raw).map_err(|_| bad(expected, raw))?;
    let nanos = crate::go_rules::duration::parse(&text).ok_or_else(|| bad(expected, raw))?;
    put_key(out, 1, VARINT);
    put_varint(out, nanos as u64);
    Ok(())
}

/// intstr.IntOrString: `{type = 1, intVal = 2, strVal = 3}`, all three
/// always written. UnmarshalJSON: a string is type 1 (String), anything
/// else an int32 (type 0).
fn int_or_string(raw: &RawValue, out: &mut Vec<u8>) -> Result<(), BadSpecial> {
    match JsonKind::of(raw) {
        JsonKind::String => {
            let s = json::string(raw).map_err(|_| bad("a string", raw))?;
            write_int_or_string(1, 0, &s, out);
        }
        _ => {
            let v = json::integer(raw)
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| bad("an int32 or a string", raw))?;
            write_int_or_string(0, v, "", out);
        }
    }
    Ok(())
}

fn write_int_or_string(ty: i64, int_val: i32, str_val: &str, out: &mut Vec<u8>) {
    put_key(out, 1, VARINT);
    put_varint(out, ty as u64);
    put_key(out, 2, VARINT);
    put_varint(out, i64::from(int_val) as u64);
    put_key(out, 3, LEN);
    put_varint(out, str_val.len() as u64);
    out.extend_from_slice(str_val.as_bytes());
}

/// resource.Quantity: `{string = 1}` holding q.String(). Go's MarshalJSON
/// writes the same string (the cached text, or the canonical form when none
/// is cached, as String() does), so the JSON text is the protobuf text.
fn quantity(raw: &RawValue, out: &mut Vec<u8>) -> Result<(), BadSpecial> {
    if JsonKind::of(raw) != JsonKind::String {
        // Go always quotes a Quantity; a bare number did not come from it.
        return Err(bad("a quantity string", raw));
    }
    let s = json::string(raw).map_err(|_| bad("a quantity string", raw))?;
    put_bytes(out, 1, s.as_bytes());
    Ok(())
}

/// A Go `[]byte`: base64 (standard alphabet, padded) in JSON.
pub(super) fn base64_bytes(raw: &RawValue) -> Result<Vec<u8>, BadSpecial> {
    let s = json::string(raw).map_err(|_| bad("base64 bytes", raw))?;
    base64::engine::general_purpose::STANDARD.decode(s.as_bytes()).map_err(|_| bad("base64 bytes", raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse_to_unix_seconds() {
        assert_eq!(crate::go_rules::rfc3339::parse("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(crate::go_rules::rfc3339::parse("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME_UNIX, 0)));
        assert_eq!(crate::go_rules::rfc3339::parse("2024-02-29T12:00:00.123456Z"), Some((1_709_208_000, 123_456_000)));
        assert_eq!(crate::go_rules::rfc3339::parse("2024-02-29T14:00:00+02:00"), Some((1_709_208_000, 0)));
        assert_eq!(crate::go_rules::rfc3339::parse("2023-02-29T12:00:00Z"), None);
        assert_eq!(crate::go_rules::rfc3339::parse("2024-02-29 12:00:00Z"), None);
    }
}
