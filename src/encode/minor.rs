//! The kube-apiserver minor whose bytes watchmux writes.
//!
//! What watchmux derives from Kubernetes' Go code can differ between minors:
//! the protobuf schema (a field added, or an alpha field dropped, and a Go
//! non-pointer field is always written in protobuf), Table columns, the
//! zero objects of BOOKMARK events. The generated tables carry every
//! supported minor's form (`protobuf/schema.txt` marks what only some minors
//! have with `minors=`); the upstream's minor, read from its `/version` at
//! start and followed after ([`crate::upstream::version`]), picks one, so an older
//! API server is answered in its own form and never in the pinned one's.
//!
//! The choice is process-wide, made before the caches list and followed
//! afterwards: with several API servers it is the oldest minor among the
//! ready ones, and it changes as they are upgraded (`upstream::version`);
//! what a cache keeps in one minor's form is checked against the served
//! minor at each read (`cache::state::object`). Until it is made (an
//! upstream unreachable at start) the pinned minor stands, as before: the schema check
//! ([`crate::cache::sync::schema_check`]) still compares each cached kind
//! with the served OpenAPI and turns protobuf off for a kind that differs.
//! A minor outside [`SUPPORTED`] keeps the nearest supported tables for
//! protobuf (the schema check guards them) and has its Tables passed
//! through ([`tables_derivable`]): no table describes its printers.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

/// The Kubernetes 1.x minors watchmux has tables for, oldest first: the list
/// of integration/versions/minors.txt (a test checks they agree).
pub const SUPPORTED: [u8; 4] = [34, 35, 36, 37];

/// The minor integration/go.mod pins, whose form stands until the upstream's
/// is known.
pub const PINNED: u8 = 37;

/// The upstream's minor as read, `0` until it is.
static UPSTREAM: AtomicU8 = AtomicU8::new(0);

/// What [`select`] made of an upstream's minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// A supported minor: its own form throughout.
    Supported(u8),
    /// Not supported: protobuf in the form of `nearest` (guarded by the
    /// schema check), Tables passed through.
    Unsupported {
        /// The upstream's minor.
        minor: u8,
        /// The supported minor whose protobuf table is used.
        nearest: u8,
    },
}

/// Takes the upstream's minor (from its `/version`) as the one to write
/// bytes for.
pub fn select(minor: u8) -> Selection {
    UPSTREAM.store(minor, Ordering::Relaxed);
    selection(minor)
}

/// The upstream's minor as last selected; `None` until one is.
pub fn upstream() -> Option<u8> {
    match UPSTREAM.load(Ordering::Relaxed) {
        0 => None,
        minor => Some(minor),
    }
}

impl Selection {
    /// What [`select`] would make of `minor`, without selecting it.
    pub fn of(minor: u8) -> Self {
        selection(minor)
    }
}

fn selection(minor: u8) -> Selection {
    if SUPPORTED.contains(&minor) {
        Selection::Supported(minor)
    } else {
        let nearest = if minor < SUPPORTED[0] { SUPPORTED[0] } else { PINNED };
        Selection::Unsupported { minor, nearest }
    }
}

/// The supported minor whose tables watchmux writes from now.
pub fn served() -> u8 {
    match UPSTREAM.load(Ordering::Relaxed) {
        0 => PINNED,
        minor => match selection(minor) {
            Selection::Supported(m) => m,
            Selection::Unsupported { nearest, .. } => nearest,
        },
    }
}

/// The upstream's minor, or the pinned one until it is known.
fn upstream_or_pinned() -> u8 {
    match UPSTREAM.load(Ordering::Relaxed) {
        0 => PINNED,
        minor => minor,
    }
}

/// Whether the upstream applies kube-apiserver's constrained impersonation
/// (KEP-5284, `ConstrainedImpersonation`: alpha and off in 1.35, beta and on
/// from 1.36, absent before): its `impersonate-on:` and `impersonate:<mode>`
/// checks, tried before the legacy ones. An older server knows the legacy
/// `impersonate` checks only, and a mode it lacks must grant nothing here.
pub fn constrained_impersonation() -> bool {
    upstream_or_pinned() >= 36
}

/// Whether the upstream's legacy impersonation filter answers a request it
/// cannot read (groups without a user) with a plain-text 500, as 1.34's
/// does (`responsewriters.InternalError`); a 400 Status from 1.35.
pub fn impersonation_errors_are_internal() -> bool {
    upstream_or_pinned() <= 34
}

/// Whether a Table can be written for the upstream: its minor is supported
/// (or not yet known, when the pinned one stands).
pub fn tables_derivable() -> bool {
    match UPSTREAM.load(Ordering::Relaxed) {
        0 => true,
        minor => SUPPORTED.contains(&minor),
    }
}

/// A value made once for each supported minor from a generated table (a
/// view of the protobuf schema, a map of Table columns), the served minor's
/// read by [`PerMinor::served`].
pub(crate) struct PerMinor<T>([OnceLock<T>; SUPPORTED.len()]);

impl<T> PerMinor<T> {
    /// Nothing made yet.
    pub(crate) const fn new() -> Self {
        Self([const { OnceLock::new() }; SUPPORTED.len()])
    }

    /// The value for `minor` (one of [`SUPPORTED`]), made by `make` on first use.
    pub(crate) fn get(&self, minor: u8, make: impl FnOnce(u8) -> T) -> &T {
        let index = SUPPORTED.iter().position(|m| *m == minor).unwrap_or_else(|| panic!("1.{minor} is not supported"));
        self.0[index].get_or_init(|| make(minor))
    }

    /// The value for the served minor ([`served`]).
    pub(crate) fn served(&self, make: impl FnOnce(u8) -> T) -> &T {
        self.get(served(), make)
    }
}

/// The lines of a generated line table (`table/columns.txt`,
/// `zero_objects.txt`, merged by integration/scripts/lines-union.py) that
/// `minor` has, comments and blank lines left out: a line starting
/// `minors=1.34,1.35 ` is only those minors', the rest without the prefix.
pub(crate) fn lines_of(text: &'static str, minor: u8) -> impl Iterator<Item = &'static str> {
    text.lines().filter(|line| !line.starts_with('#') && !line.is_empty()).filter_map(move |line| {
        let Some(marked) = line.strip_prefix("minors=") else { return Some(line) };
        let (list, rest) = marked.split_once(' ')?;
        names_minor(list, minor).then_some(rest)
    })
}

/// Whether `list` (`1.35,1.36`, as the generated tables write it) names
/// `minor`. A malformed entry names nothing.
pub(crate) fn names_minor(list: &str, minor: u8) -> bool {
    list.split(',').any(|m| m.strip_prefix("1.").and_then(|m| m.parse::<u8>().ok()) == Some(minor))
}

/// The minor of a `/version` answer: `minor` as kube-apiserver writes it
/// ("35", or "35+" from some distributions), else `gitVersion`'s second
/// number ("v1.35.4"). `None` for a major other than 1 or nothing readable.
pub fn parse_version(info: &serde_json::Value) -> Option<u8> {
    let field = |name: &str| info.get(name).and_then(serde_json::Value::as_str).unwrap_or_default();
    let digits = |s: &str| -> Option<u8> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        d.parse().ok()
    };
    if let (Some(1), Some(minor)) = (digits(field("major")), digits(field("minor"))) {
        return Some(minor);
    }
    let mut parts = field("gitVersion").strip_prefix('v')?.split('.');
    (digits(parts.next()?)? == 1).then_some(())?;
    digits(parts.next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_answers_of_kube_apiserver_and_distributions_name_their_minor() {
        let v = |s: &str| parse_version(&serde_json::from_str(s).unwrap_or_default());
        assert_eq!(v(r#"{"major":"1","minor":"35","gitVersion":"v1.35.4"}"#), Some(35));
        assert_eq!(v(r#"{"major":"1","minor":"34+","gitVersion":"v1.34.2-gke.1"}"#), Some(34));
        assert_eq!(v(r#"{"major":"","minor":"","gitVersion":"v1.36.3"}"#), Some(36));
        assert_eq!(v(r#"{"major":"2","minor":"1","gitVersion":"v2.1.0"}"#), None);
        assert_eq!(v("not json"), None);
    }

    #[test]
    fn a_marked_line_belongs_to_the_minors_it_names_only() {
        let text = "# comment\nplain a\nminors=1.34,1.35 old b\nminors=1.36,1.37 new b\n";
        assert_eq!(lines_of(text, 34).collect::<Vec<_>>(), ["plain a", "old b"]);
        assert_eq!(lines_of(text, 37).collect::<Vec<_>>(), ["plain a", "new b"]);
        assert!(!names_minor("1.3,1.350", 35), "a minor is a whole entry");
    }

    #[test]
    fn an_unsupported_minor_takes_the_nearest_protobuf_table() {
        assert_eq!(selection(35), Selection::Supported(35));
        assert_eq!(selection(30), Selection::Unsupported { minor: 30, nearest: SUPPORTED[0] });
        assert_eq!(selection(40), Selection::Unsupported { minor: 40, nearest: PINNED });
    }

    #[test]
    fn the_supported_minors_are_integration_versions_minors_txt() {
        let listed: Vec<u8> = include_str!("../../integration/versions/minors.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().next().unwrap().strip_prefix("1.").unwrap().parse().unwrap())
            .collect();
        assert_eq!(listed, SUPPORTED);
        let pinned = include_str!("../../integration/versions/minors.txt")
            .lines()
            .find(|l| l.ends_with(" pinned"))
            .and_then(|l| l.strip_prefix("1."))
            .and_then(|l| l.split_whitespace().next())
            .map(|m| m.parse::<u8>().unwrap());
        assert_eq!(pinned, Some(PINNED));
    }
}
