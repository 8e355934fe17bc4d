//! Go's `time.ParseDuration` (Go 1.26, `src/time/format.go`: `ParseDuration`,
//! `leadingInt`, `leadingFraction`), step for step: the durations of the
//! Kubernetes API (metav1.Duration in the protobuf encoder) and of its
//! request parameters (`?timeout=` on a LIST or WATCH).

/// time.ParseDuration, step for step (its overflow limits and its float
/// arithmetic for fractions included, so the nanoseconds are Go's).
pub(crate) fn parse(s: &str) -> Option<i64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse_to_go_nanoseconds() {
        assert_eq!(parse("0s"), Some(0));
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("1h2m3.5s"), Some(3_723_500_000_000));
        assert_eq!(parse("-1.5µs"), Some(-1500));
        assert_eq!(parse("2562047h47m16.854775807s"), Some(i64::MAX));
        assert_eq!(parse("-2562047h47m16.854775808s"), Some(i64::MIN));
        assert_eq!(parse("2562047h47m16.854775808s"), None);
        assert_eq!(parse("1"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse(".s"), None);
    }
}
