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
    let (seconds, nanos) = crate::rfc3339::parse(&text).ok_or_else(|| bad(expected, raw))?;
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
    let nanos = parse_go_duration(&text).ok_or_else(|| bad(expected, raw))?;
    put_key(out, 1, VARINT);
    put_varint(out, nanos as u64);
    Ok(())
}

/// time.ParseDuration, step for step (its overflow limits and its float
/// arithmetic for fractions included, so the nanoseconds are Go's).
pub(super) fn parse_go_duration(s: &str) -> Option<i64> {
    const LIMIT: u64 = 1 << 63;
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        // leadingInt
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut v: u64 = 0;
        for c in rest[..digits].bytes() {
            if v > LIMIT / 10 {
                return None;
            }
            v = v * 10 + u64::from(c - b'0');
            if v > LIMIT {
                return None;
            }
        }
        let pre = digits > 0;
        rest = &rest[digits..];
        // leadingFraction
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(after) = rest.strip_prefix('.') {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            let mut overflow = false;
            for c in after[..n].bytes() {
                if overflow {
                    continue;
                }
                if f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            post = n > 0;
            rest = &after[n..];
        }
        if !pre && !post {
            return None;
        }
        let unit_len = rest.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(rest.len());
        let unit: u64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        if v > LIMIT / unit {
            return None;
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > LIMIT {
                return None;
            }
        }
        total = total.checked_add(v)?;
        if total > LIMIT {
            return None;
        }
    }
    if neg {
        return Some((total as i64).wrapping_neg());
    }
    if total > LIMIT - 1 {
        return None;
    }
    Some(total as i64)
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
    fn go_durations_parse_to_go_nanoseconds() {
        assert_eq!(parse_go_duration("0s"), Some(0));
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(3_723_500_000_000));
        assert_eq!(parse_go_duration("-1.5µs"), Some(-1500));
        assert_eq!(parse_go_duration("2562047h47m16.854775807s"), Some(i64::MAX));
        assert_eq!(parse_go_duration("-2562047h47m16.854775808s"), Some(i64::MIN));
        assert_eq!(parse_go_duration("2562047h47m16.854775808s"), None);
        assert_eq!(parse_go_duration("1"), None);
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration(".s"), None);
    }

    #[test]
    fn rfc3339_times_parse_to_unix_seconds() {
        assert_eq!(crate::rfc3339::parse("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(crate::rfc3339::parse("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME_UNIX, 0)));
        assert_eq!(crate::rfc3339::parse("2024-02-29T12:00:00.123456Z"), Some((1_709_208_000, 123_456_000)));
        assert_eq!(crate::rfc3339::parse("2024-02-29T14:00:00+02:00"), Some((1_709_208_000, 0)));
        assert_eq!(crate::rfc3339::parse("2023-02-29T12:00:00Z"), None);
        assert_eq!(crate::rfc3339::parse("2024-02-29 12:00:00Z"), None);
    }
}
