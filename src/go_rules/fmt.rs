//! Go's formatting of the values that end up in selector matching and messages:
//! `%q` for quoted field names (`strconv.Quote`), `%v` for floats
//! (`strconv.FormatFloat(f, 'g', -1, 64)`), as of Go 1.26, the toolchain the
//! test kube-apiserver v1.37.2 is built with.

/// Go's `%q` (`strconv.Quote`) for a string.
///
/// Go escapes every rune `unicode.IsPrint` rejects; without its tables this
/// escapes controls, non-ASCII spaces, format characters, private use and
/// noncharacters, which leaves only unassigned code points printed differently.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if go_is_print(c) => out.push(c),
            c if u32::from(c) < 0x10000 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

fn go_is_print(c: char) -> bool {
    if c.is_ascii() {
        return c == ' ' || c.is_ascii_graphic();
    }
    let n = u32::from(c);
    let format = matches!(n, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F);
    let private_or_nonchar =
        matches!(n, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF | 0xFDD0..=0xFDEF) || n & 0xFFFE == 0xFFFE;
    !c.is_control() && !c.is_whitespace() && !format && !private_or_nonchar
}

/// A float64 as Go's `fmt.Sprint` writes it (`%v`, that is `%g` with the
/// shortest digits: exponent form when the decimal exponent is below -4 or at least 6).
pub(crate) fn go_float(f: f64) -> String {
    // Rust's `{:e}` gives the same shortest round-trip digits as strconv: "d.ddde[-]x".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("abc"), r#""abc""#);
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\u{7}\u{8}\u{c}\n\r\t\u{b}"), r#""\a\b\f\n\r\t\v""#);
        assert_eq!(go_quote("\0\u{1f}\u{7f}"), r#""\x00\x1f\x7f""#);
        assert_eq!(go_quote("\u{80}\u{a0}\u{200b}\u{feff}"), r#""\u0080\u00a0\u200b\ufeff""#);
        assert_eq!(go_quote("é日本😀"), "\"é日本😀\"");
        assert_eq!(go_quote("\u{f0000}\u{e0001}"), r#""\U000f0000\U000e0001""#);
    }
    #[test]
    fn go_float_matches_fmt_sprint() {
        for (f, s) in [
            (0.0, "0"),
            (1.0, "1"),
            (2.5, "2.5"),
            (-0.5, "-0.5"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
        ] {
            assert_eq!(go_float(f), s, "{f}");
        }
    }
}
