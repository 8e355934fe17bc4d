//! The label selector lexer and parser, following apimachinery's
//! (k8s.io/apimachinery/pkg/labels/selector.go, v0.37) rule for rule, quirks included:
//! `in` and `notin` are keywords only where an operator may stand, `(,,)` is
//! the set `{""}`, and keys and values are validated as label keys and values.

use super::super::SelectorError;
use super::{LabelOp, LabelRequirement};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    End,
    ClosedPar,
    Comma,
    /// `!`
    Not,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn special_token(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::Not,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

/// Splits the input into tokens; the last one is always `End`.
fn lex(s: &str) -> Vec<(Token, &str)> {
    let bytes = s.as_bytes();
    let mut tokens = Vec::new();
    let mut pos = 0;
    loop {
        while pos < bytes.len() && is_whitespace(bytes[pos]) {
            pos += 1;
        }
        let Some(&first) = bytes.get(pos) else {
            tokens.push((Token::End, ""));
            return tokens;
        };
        let start = pos;
        if is_special(first) {
            // Every special character is a token on its own; "==" and "!="
            // are the only longer ones, so at most two characters are taken.
            pos += 1;
            if bytes.get(pos).is_some_and(|&b| is_special(b))
                && let Some(tok) = special_token(&s[start..pos + 1])
            {
                pos += 1;
                tokens.push((tok, &s[start..pos]));
            } else {
                tokens.push((special_token(&s[start..pos]).expect("a single special character"), &s[start..pos]));
            }
        } else {
            while pos < bytes.len() && !is_special(bytes[pos]) && !is_whitespace(bytes[pos]) {
                pos += 1;
            }
            // Specials and whitespace are ASCII, so `pos` is a char boundary.
            let word = &s[start..pos];
            let tok = match word {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier,
            };
            tokens.push((tok, word));
        }
    }
}

/// Where the parser is: `in` and `notin` are operators only after a key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser<'a> {
    tokens: Vec<(Token, &'a str)>,
    position: usize,
}

fn syntax(found: &str, expected: &'static str) -> SelectorError {
    SelectorError::LabelSyntax { found: found.to_owned(), expected }
}

impl<'a> Parser<'a> {
    fn peek(&self, context: Context) -> (Token, &'a str) {
        let (tok, lit) = self.tokens.get(self.position).copied().unwrap_or((Token::End, ""));
        match tok {
            Token::In | Token::NotIn if context == Context::Values => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn next(&mut self, context: Context) -> (Token, &'a str) {
        let item = self.peek(context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.peek(Context::Values);
            match tok {
                Token::Identifier | Token::Not => {
                    requirements.push(self.requirement()?);
                    let (tok, lit) = self.next(Context::Values);
                    match tok {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            let (tok, lit) = self.peek(Context::Values);
                            if tok != Token::Identifier && tok != Token::Not {
                                return Err(syntax(lit, "identifier after ','"));
                            }
                        }
                        _ => return Err(syntax(lit, "',' or 'end of string'")),
                    }
                }
                Token::End => return Ok(requirements),
                _ => return Err(syntax(lit, "!, identifier, or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, SelectorError> {
        let (key, op) = self.key_and_inferred_operator()?;
        if let Some(op) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.operator()?;
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.values()?,
            _ => vec![self.exact_value()?],
        };
        new_requirement(key, op, values)
    }

    /// The key, and `Exists` or `DoesNotExist` when no binary operator can follow.
    fn key_and_inferred_operator(&mut self) -> Result<(&'a str, Option<LabelOp>), SelectorError> {
        let (mut tok, mut lit) = self.next(Context::Values);
        let mut op = None;
        if tok == Token::Not {
            op = Some(LabelOp::DoesNotExist);
            (tok, lit) = self.next(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(syntax(lit, "identifier"));
        }
        validate_key(lit)?;
        // `!key` is unary whatever follows; what follows is then a syntax error in `parse`.
        if matches!(self.peek(Context::Values).0, Token::End | Token::Comma) && op.is_none() {
            op = Some(LabelOp::Exists);
        }
        Ok((lit, op))
    }

    fn operator(&mut self) -> Result<LabelOp, SelectorError> {
        let (tok, lit) = self.next(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => LabelOp::In,
            Token::Equals => LabelOp::Equals,
            Token::DoubleEquals => LabelOp::DoubleEquals,
            Token::GreaterThan => LabelOp::GreaterThan,
            Token::LessThan => LabelOp::LessThan,
            Token::NotIn => LabelOp::NotIn,
            Token::NotEquals => LabelOp::NotEquals,
            _ => return Err(syntax(lit, "in, notin, =, ==, !=, gt, lt")),
        })
    }

    /// `(a,b)`, where empty entries are the empty value and `()` is `{""}`.
    fn values(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, lit) = self.next(Context::Values);
        if tok != Token::OpenPar {
            return Err(syntax(lit, "'('"));
        }
        let (tok, lit) = self.peek(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let values = self.identifiers()?;
                if self.next(Context::Values).0 != Token::ClosedPar {
                    return Err(syntax(lit, "')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.next(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(syntax(lit, "',', ')' or identifier")),
        }
    }

    /// The inside of a value list, up to (not including) the closing parenthesis.
    fn identifiers(&mut self) -> Result<Vec<String>, SelectorError> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.next(Context::Values);
            match tok {
                Token::Identifier => {
                    values.push(lit.to_owned());
                    let (tok, lit) = self.peek(Context::Values);
                    match tok {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(syntax(lit, "',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.peek(Context::Values).0 {
                        Token::ClosedPar => {
                            values.push(String::new());
                            return Ok(values);
                        }
                        Token::Comma => values.push(String::new()),
                        _ => {}
                    }
                }
                _ => return Err(syntax(lit, "',', or identifier")),
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; nothing before a comma or the end is `""`.
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        if matches!(self.peek(Context::Values).0, Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next(Context::Values) {
            (Token::Identifier, lit) => Ok(lit.to_owned()),
            (_, lit) => Err(syntax(lit, "identifier")),
        }
    }
}

/// `labels.NewRequirement`: values become a sorted set, and are validated.
fn new_requirement(key: &str, op: LabelOp, mut values: Vec<String>) -> Result<LabelRequirement, SelectorError> {
    values.sort_unstable();
    values.dedup();
    let mut bound = 0;
    if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
        // Exactly one value here, as the grammar gives only one.
        bound = values[0]
            .parse::<i64>()
            .map_err(|_| SelectorError::LabelNotInteger { key: key.to_owned(), value: values[0].clone() })?;
    }
    for value in &values {
        validate_value(key, value)?;
    }
    Ok(LabelRequirement { key: key.to_owned(), op, values, bound })
}

pub(super) fn parse(s: &str) -> Result<Vec<LabelRequirement>, SelectorError> {
    if s.contains('\0') {
        return Err(SelectorError::LabelNul);
    }
    Parser { tokens: lex(s), position: 0 }.parse()
}

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`: a label key's name part, or a non-empty label value.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= PREFIX_MAX
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(first), Some(last)) => {
                    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
                    alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
                }
                _ => false,
            }
        })
}

/// `IsLabelKey` (`IsQualifiedName`): an optional DNS subdomain prefix and `/`, then a name of at most 63 bytes.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason| Err(SelectorError::LabelKey { key: key.to_owned(), reason });
    let mut parts = key.split('/');
    let (prefix, name) = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => (None, name),
        (Some(prefix), Some(name), None) => (Some(prefix), name),
        _ => return invalid("a qualified name has at most one '/'"),
    };
    match prefix {
        Some("") => return invalid("the prefix part must be non-empty"),
        Some(prefix) if !is_dns1123_subdomain(prefix) => {
            return invalid("the prefix part must be a lowercase RFC 1123 subdomain of at most 253 bytes");
        }
        _ => {}
    }
    if name.len() > NAME_MAX {
        return invalid("the name part must be no more than 63 bytes");
    }
    if !is_label_name(name) {
        return invalid(
            "the name part must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character",
        );
    }
    Ok(())
}

/// `IsValidLabelValue`: empty, or at most 63 bytes shaped like a key's name part.
fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    let reason = if value.len() > NAME_MAX {
        "must be no more than 63 bytes"
    } else if !value.is_empty() && !is_label_name(value) {
        "must be empty or consist of alphanumeric characters, '-', '_' or '.', \
         and start and end with an alphanumeric character"
    } else {
        return Ok(());
    };
    Err(SelectorError::LabelValue { key: key.to_owned(), value: value.to_owned(), reason })
}

#[cfg(test)]
mod tests {
    use super::super::LabelSelector;
    use super::*;

    fn ok(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn err(s: &str) -> SelectorError {
        LabelSelector::parse(s).expect_err(&format!("{s:?} should not parse"))
    }

    fn ops(s: &str) -> Vec<(String, LabelOp, Vec<String>)> {
        ok(s).requirements().iter().map(|r| (r.key().to_owned(), r.op(), r.values().to_vec())).collect()
    }

    fn one(key: &str, op: LabelOp, values: &[&str]) -> Vec<(String, LabelOp, Vec<String>)> {
        vec![(key.to_owned(), op, values.iter().map(|v| v.to_string()).collect())]
    }

    #[test]
    fn every_operator_parses() {
        assert_eq!(ops("a=b"), one("a", LabelOp::Equals, &["b"]));
        assert_eq!(ops("a==b"), one("a", LabelOp::DoubleEquals, &["b"]));
        assert_eq!(ops("a!=b"), one("a", LabelOp::NotEquals, &["b"]));
        assert_eq!(ops("a in (b,c)"), one("a", LabelOp::In, &["b", "c"]));
        assert_eq!(ops("a notin (b)"), one("a", LabelOp::NotIn, &["b"]));
        assert_eq!(ops("a"), one("a", LabelOp::Exists, &[]));
        assert_eq!(ops("!a"), one("a", LabelOp::DoesNotExist, &[]));
        assert_eq!(ops("a>1"), one("a", LabelOp::GreaterThan, &["1"]));
        assert_eq!(ops("a<1"), one("a", LabelOp::LessThan, &["1"]));
    }

    #[test]
    fn whitespace_separates_tokens_but_is_not_needed_around_symbols() {
        // All verified against kube-apiserver v1.37.2.
        assert_eq!(ops("  env = prod  "), one("env", LabelOp::Equals, &["prod"]));
        assert_eq!(ops("env in(prod)"), one("env", LabelOp::In, &["prod"]));
        assert_eq!(ops("a\tnotin\r\n(b)"), one("a", LabelOp::NotIn, &["b"]));
        assert_eq!(ops("n> 1"), one("n", LabelOp::GreaterThan, &["1"]));
        assert_eq!(ok("env=prod\t,\tn").requirements().len(), 2);
        assert!(matches!(err("a b"), SelectorError::LabelSyntax { .. }));
        assert!(matches!(err("env=pr od"), SelectorError::LabelSyntax { .. }));
        assert!(matches!(err("env in (a b)"), SelectorError::LabelSyntax { .. }));
    }

    #[test]
    fn in_and_notin_are_keywords_only_in_operator_position() {
        assert_eq!(ops("in=notin"), one("in", LabelOp::Equals, &["notin"]));
        assert_eq!(ops("in in (notin)"), one("in", LabelOp::In, &["notin"]));
        assert_eq!(ops("notin"), one("notin", LabelOp::Exists, &[]));
        assert_eq!(ops("!in"), one("in", LabelOp::DoesNotExist, &[]));
        assert!(err("env in prod").to_string().contains("'('"));
    }

    #[test]
    fn empty_values_in_sets() {
        assert_eq!(ops("a in ()"), one("a", LabelOp::In, &[""]));
        assert_eq!(ops("a in (,)"), one("a", LabelOp::In, &[""]));
        // Accepted since apimachinery v0.35 (consecutive commas fix), as v1.37.2 does.
        assert_eq!(ops("a in (,,)"), one("a", LabelOp::In, &[""]));
        assert_eq!(ops("a in (x,,)"), one("a", LabelOp::In, &["", "x"]));
        assert_eq!(ops("a in (x,,y)"), one("a", LabelOp::In, &["", "x", "y"]));
        assert_eq!(ops("a in (,x)"), one("a", LabelOp::In, &["", "x"]));
        assert_eq!(ops("a in (x,)"), one("a", LabelOp::In, &["", "x"]));
        assert_eq!(ops("a="), one("a", LabelOp::Equals, &[""]));
        assert_eq!(
            ops("a!=,b"),
            vec![("a".into(), LabelOp::NotEquals, vec![String::new()]), ("b".into(), LabelOp::Exists, vec![])]
        );
    }

    #[test]
    fn syntax_errors_are_rejected() {
        // Each of these is a 400 from kube-apiserver v1.37.2.
        for s in [
            "a,",
            ",a",
            ",",
            "!",
            "!!env",
            "!env=prod",
            "env=!prod",
            "env===prod",
            "env=(prod)",
            "n>=4",
            "n<>1",
            "a in",
            "a in (",
            "a in (b",
            "a in (b,c",
            "a in (!)",
            "a in ((b))",
            "a notin",
            "a = b = c",
            "(a)",
            "a)",
            "a=b)",
            "=a",
            "a,,b",
            "in (a)",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s:?} should not parse");
        }
    }

    #[test]
    fn keys_must_be_qualified_names() {
        for s in ["example.com/x", "a.b-c_d", "A1", "x/y", "a-b.example.com/Name_1", &"k".repeat(63)] {
            ok(s);
        }
        for s in ["Example.com/x", "a/b/c", "/x", "x/", "-a", "a-", "_a", ".a", "a b", "é", "a:b", "a@b"] {
            assert!(matches!(err(s), SelectorError::LabelKey { .. } | SelectorError::LabelSyntax { .. }), "{s:?}");
        }
        assert!(matches!(err(&"k".repeat(64)), SelectorError::LabelKey { .. }));
        let long_prefix = format!("{}/x", ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)].join("."));
        assert_eq!(long_prefix.len(), 255);
        ok(&long_prefix);
        let too_long = format!("{}/x", ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(62)].join("."));
        assert!(matches!(err(&too_long), SelectorError::LabelKey { .. }));
        for prefix in ["a..b", "a.", ".a", "-a.b", "a-.b", "a_b"] {
            assert!(matches!(err(&format!("{prefix}/x")), SelectorError::LabelKey { .. }), "{prefix}");
        }
    }

    #[test]
    fn values_must_be_label_values() {
        ok(&format!("a={}", "v".repeat(63)));
        assert!(matches!(err(&format!("a={}", "v".repeat(64))), SelectorError::LabelValue { .. }));
        for s in ["a=-bad", "a=bad-", "a in (ok,-bad)", "a!=x:y", "a=é"] {
            assert!(matches!(err(s), SelectorError::LabelValue { .. }), "{s:?}");
        }
    }

    #[test]
    fn greater_and_less_than_need_an_integer_that_is_also_a_label_value() {
        ok("n>0");
        ok("n>01");
        ok("n<9223372036854775807");
        assert!(matches!(err("n>99999999999999999999"), SelectorError::LabelNotInteger { .. }));
        assert!(matches!(err("n>"), SelectorError::LabelNotInteger { .. }));
        assert!(matches!(err("n>x"), SelectorError::LabelNotInteger { .. }));
        assert!(matches!(err("n>1.5"), SelectorError::LabelNotInteger { .. }));
        // A sign makes it an invalid label value (kube-apiserver rejects "n>-1" this way).
        assert!(matches!(err("n>-1"), SelectorError::LabelValue { .. }));
        assert!(matches!(err("n>+1"), SelectorError::LabelValue { .. }));
    }

    #[test]
    fn nul_bytes_are_left_to_the_api_server() {
        assert_eq!(err("a\0"), SelectorError::LabelNul);
        assert_eq!(err("a=b\0c"), SelectorError::LabelNul);
    }
}
