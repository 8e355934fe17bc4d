//! Go's `strconv.ParseUint(s, 10, 64)` and `strconv.ParseInt(s, 10, 64)`
//! (Go 1.26, `src/strconv/atoi.go`), and `strconv.ParseBool`
//! (`src/strconv/atob.go`), where Rust's `str::parse` differs:
//! Rust's unsigned parse takes a leading `+`, Go's `ParseUint` does not. The
//! API server reads a request's `resourceVersion` with `ParseUint`
//! (apiserver `storage.APIObjectVersioner.ParseResourceVersion`), so
//! `resourceVersion=+5` is its 400 `invalid resource version`, and must
//! not be served from the cache as version 5. Rust's `bool` parse takes
//! `true` and `false` alone, where pflag (every Kubernetes component's flags)
//! reads `--flag=<value>` of a boolean flag with `ParseBool`, so
//! `--cache-warm=1` or `=True` is a spelling operators carry over.

/// `strconv.ParseUint(s, 10, 64)`: ASCII digits only (no sign, no space,
/// no underscore: those need base 0), at least one, within u64.
pub(crate) fn parse_uint(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `strconv.ParseInt(s, 10, 64)`: an optional `+` or `-`, then ASCII
/// digits, within i64 (Rust's `i64` parse is the same rule, named here so
/// that each query integer says which Go function it follows).
pub(crate) fn parse_int(s: &str) -> Option<i64> {
    s.parse().ok()
}

/// `strconv.ParseBool`: exactly `1 t T TRUE true True` or `0 f F FALSE
/// false False`; any other case or word (`yes`, `tRuE`, ` true`) is not one.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each answer is kube-apiserver v1.37.2's for `?resourceVersion=<s>`
    /// (`05` served as 5; the rest `strconv.ParseUint: parsing ...: invalid
    /// syntax` or `value out of range`).
    #[test]
    fn parse_uint_is_gos() {
        for (s, want) in [
            ("5", Some(5)),
            ("05", Some(5)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("+5", None),
            ("+0", None),
            ("-5", None),
            (" 5", None),
            ("5 ", None),
            ("0x5", None),
            ("5_0", None),
            ("", None),
            ("٥", None),
        ] {
            assert_eq!(parse_uint(s), want, "{s:?}");
        }
    }

    #[test]
    fn parse_int_takes_a_sign() {
        assert_eq!(parse_int("+5"), Some(5));
        assert_eq!(parse_int("-5"), Some(-5));
        assert_eq!(parse_int("9223372036854775808"), None);
        assert_eq!(parse_int(" 5"), None);
    }

    #[test]
    fn parse_bool_takes_gos_spellings_and_nothing_else() {
        for s in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(s), Some(true), "{s:?}");
        }
        for s in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(s), Some(false), "{s:?}");
        }
        for s in ["", "yes", "no", "on", "tRuE", "fALSE", " true", "true ", "2", "-1", "y"] {
            assert_eq!(parse_bool(s), None, "{s:?}");
        }
    }
}
