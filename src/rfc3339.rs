//! RFC 3339 timestamps as Go's `time.Parse(time.RFC3339, …)` reads them:
//! the one parser for the Kubernetes API's times (metav1.Time in the
//! protobuf encoder, an ExecCredential's expirationTimestamp).

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, as time.Parse(time.RFC3339) reads
/// it (a fraction is accepted though the layout has none). Unix seconds and
/// nanoseconds.
pub(crate) fn parse(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if b[i] == b'.' || b[i] == b',' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i];
        // Go keeps nine digits and drops the rest.
        let kept = &digits[..digits.len().min(9)];
        nanos = kept.parse::<u32>().ok()? * 10u32.pow(9 - kept.len() as u32);
    }
    let offset = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hh = num(i + 1..i + 3)?;
            let mm = num(i + 4..i + 6)?;
            let _ = (h1, h2, m1, m2);
            if hh > 23 || mm > 59 {
                return None;
            }
            let off = hh * 3600 + mm * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second - offset, nanos))
}

pub(crate) fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_accepts_a_comma_before_the_fraction_and_either_case_of_t_and_z() {
        assert_eq!(parse("2024-02-29t12:00:00,5z"), Some((1_709_208_000, 500_000_000)));
        assert_eq!(parse("2024-02-29T12:00:00.1234567891Z"), Some((1_709_208_000, 123_456_789)), "nine digits kept");
        assert_eq!(parse("2024-02-29T12:00:00.Z"), None);
        assert_eq!(parse("2024-02-29T12:00:00+0200"), None);
    }
}
