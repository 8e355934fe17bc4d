//! RFC 3339 timestamps as Go's `time.Parse(time.RFC3339, …)` reads them (Go 1.26):
//! the one parser for the Kubernetes API's times (metav1.Time in the
//! protobuf encoder, an ExecCredential's expirationTimestamp), and the
//! calendar arithmetic beside it (Go's `AddDate` of a year).

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

/// The proleptic Gregorian date of a day counted from 1970-01-01 (the
/// inverse of [`days_from_civil`], Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Unix seconds one calendar year after `secs` (UTC), as Go's
/// `t.AddDate(1, 0, 0)` counts it: the same day and time a year on, and
/// February 29th normalized to March 1st in a year without one.
pub(crate) fn one_year_later(secs: i64) -> i64 {
    let (days, time_of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (month, day) = if month == 2 && day == 29 && days_in_month(year + 1, 2) == 28 { (3, 1) } else { (month, day) };
    days_from_civil(year + 1, month, day) * 86_400 + time_of_day
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

    #[test]
    fn a_year_later_is_gos_add_date() {
        let at = |s: &str| parse(s).unwrap().0;
        assert_eq!(one_year_later(at("2026-12-03T09:45:07Z")), at("2027-12-03T09:45:07Z"));
        // Across a February 29th: 366 days.
        assert_eq!(one_year_later(at("2027-03-01T00:00:00Z")), at("2028-03-01T00:00:00Z"));
        assert_eq!(one_year_later(at("2028-01-31T23:59:59Z")), at("2029-01-31T23:59:59Z"));
        // Go normalizes February 29th + 1y to March 1st.
        assert_eq!(one_year_later(at("2028-02-29T06:00:00Z")), at("2029-03-01T06:00:00Z"));
        assert_eq!(one_year_later(at("1969-12-31T23:00:00Z")), at("1970-12-31T23:00:00Z"));
        for days in [-800_000_i64, -1, 0, 1, 59, 60, 10_956, 20_000, 2_932_896] {
            assert_eq!(days_from_civil_of(civil_from_days(days)), days);
        }
    }

    fn days_from_civil_of((y, m, d): (i64, i64, i64)) -> i64 {
        days_from_civil(y, m, d)
    }
}
