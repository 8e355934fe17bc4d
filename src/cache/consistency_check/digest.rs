//! What the consistency check compares: the (namespace, name,
//! resourceVersion) of every object on each side, reduced to a digest, and,
//! when the digests differ, which keys differ.
//!
//! The API server's own checker (`cacher/consistency`) hashes the entries in
//! list order with one running FNV-64. Here the digest is the wrapping sum of
//! one FNV-64 per entry, so it does not depend on order: the store orders
//! keys as (namespace, name) tuples, etcd as the bytes of `namespace/name`,
//! and the two differ (`a-b/x` comes before `a/x` in etcd, after it here). A
//! sum, unlike an XOR, does not cancel an entry that is there twice.
//!
//! Only names are ever reported, never object contents.

use std::collections::BTreeMap;

use crate::cache::state::object::ObjectKey;
use crate::cache::state::store::Objects;

/// How many differing keys a mismatch reports (in the log); the count is
/// always whole.
pub(crate) const REPORTED_KEYS: usize = 10;

/// The identity and version of one object, as both sides have it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub key: ObjectKey,
    pub rv: u64,
}

/// An order-independent digest of a set of entries, and how many there were.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Digest {
    pub sum: u64,
    pub count: usize,
}

impl Digest {
    pub(crate) fn add(&mut self, entry: &Entry) {
        self.sum = self.sum.wrapping_add(entry_hash(entry));
        self.count += 1;
    }

    /// The digest of a cache state (its objects at one version).
    pub(crate) fn of_objects(objects: &Objects) -> Self {
        let mut d = Self::default();
        for (key, obj) in objects {
            d.add(&Entry { key: key.clone(), rv: obj.rv });
        }
        d
    }
}

/// FNV-1a 64 of `namespace/name/rv`, as the API server's checker hashes an
/// object (it writes the same three fields with the same separators).
fn entry_hash(entry: &Entry) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let rv = entry.rv.to_string();
    let parts: [&[u8]; 5] = [entry.key.namespace.as_bytes(), b"/", entry.key.name.as_bytes(), b"/", rv.as_bytes()];
    let mut h = OFFSET;
    for b in parts.into_iter().flatten() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// How one key differs between the cache and the upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Difference {
    /// The upstream has it, the cache does not.
    MissingInCache { key: ObjectKey, upstream_rv: u64 },
    /// The cache has it, the upstream does not.
    OnlyInCache { key: ObjectKey, cache_rv: u64 },
    /// Both have it, at different versions.
    Version { key: ObjectKey, cache_rv: u64, upstream_rv: u64 },
    /// The upstream listed it more than once (the cache, a map, cannot).
    Repeated { key: ObjectKey, times: usize },
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = |k: &ObjectKey| {
            if k.namespace.is_empty() { k.name.to_string() } else { format!("{}/{}", k.namespace, k.name) }
        };
        match self {
            Self::MissingInCache { key, upstream_rv } => {
                write!(f, "{}: missing from the cache (upstream at {upstream_rv})", name(key))
            }
            Self::OnlyInCache { key, cache_rv } => {
                write!(f, "{}: only in the cache (at {cache_rv})", name(key))
            }
            Self::Version { key, cache_rv, upstream_rv } => {
                write!(f, "{}: cache at {cache_rv}, upstream at {upstream_rv}", name(key))
            }
            Self::Repeated { key, times } => write!(f, "{}: listed {times} times by the upstream", name(key)),
        }
    }
}

/// What comparing the two sides found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Comparison {
    Same,
    /// The sides differ: how many keys, and the first [`REPORTED_KEYS`] of them.
    Differ {
        count: usize,
        first: Vec<Difference>,
    },
}

/// Compares the cache's `objects` with the `upstream` entries of the same
/// version: digests first (the common, equal case costs one pass on each
/// side), then, when they differ, key by key.
pub(crate) fn compare(objects: &Objects, upstream: &[Entry]) -> Comparison {
    let mut theirs = Digest::default();
    for e in upstream {
        theirs.add(e);
    }
    if Digest::of_objects(objects) == theirs {
        return Comparison::Same;
    }
    let differences = differences(objects, upstream);
    let count = differences.len();
    // A digest collision in the other direction (equal sets, different sums)
    // cannot happen: equal multisets give equal sums.
    Comparison::Differ { count, first: differences.into_iter().take(REPORTED_KEYS).collect() }
}

/// Every key that differs, in key order.
fn differences(objects: &Objects, upstream: &[Entry]) -> Vec<Difference> {
    let mut listed: BTreeMap<&ObjectKey, (u64, usize)> = BTreeMap::new();
    for e in upstream {
        listed.entry(&e.key).and_modify(|(_, n)| *n += 1).or_insert((e.rv, 1));
    }
    let mut out = Vec::new();
    for (key, &(upstream_rv, times)) in &listed {
        if times > 1 {
            out.push(Difference::Repeated { key: (*key).clone(), times });
        }
        match objects.get(*key) {
            None => out.push(Difference::MissingInCache { key: (*key).clone(), upstream_rv }),
            Some(obj) if obj.rv != upstream_rv => {
                out.push(Difference::Version { key: (*key).clone(), cache_rv: obj.rv, upstream_rv })
            }
            Some(_) => {}
        }
    }
    for (key, obj) in objects {
        if !listed.contains_key(key) {
            out.push(Difference::OnlyInCache { key: key.clone(), cache_rv: obj.rv });
        }
    }
    out.sort_by(|a, b| difference_key(a).cmp(difference_key(b)));
    out
}

fn difference_key(d: &Difference) -> &ObjectKey {
    match d {
        Difference::MissingInCache { key, .. }
        | Difference::OnlyInCache { key, .. }
        | Difference::Version { key, .. }
        | Difference::Repeated { key, .. } => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::state::object::tests::cm;
    use std::sync::Arc;

    fn objects(items: &[(&str, u64)]) -> Objects {
        let mut o = Objects::new();
        for (name, rv) in items {
            let obj = Arc::new(cm(name, *rv, ""));
            o.insert(obj.key.clone(), obj);
        }
        o
    }

    fn entries(items: &[(&str, &str, u64)]) -> Vec<Entry> {
        items
            .iter()
            .map(|(ns, name, rv)| Entry { key: ObjectKey { namespace: (*ns).into(), name: (*name).into() }, rv: *rv })
            .collect()
    }

    /// `cm` puts its objects in namespace `ns`.
    fn upstream(items: &[(&str, u64)]) -> Vec<Entry> {
        entries(&items.iter().map(|(n, rv)| ("ns", *n, *rv)).collect::<Vec<_>>())
    }

    #[test]
    fn the_same_entries_in_any_order_are_the_same() {
        let cache = objects(&[("a", 2), ("b", 3), ("c", 4)]);
        assert_eq!(compare(&cache, &upstream(&[("c", 4), ("a", 2), ("b", 3)])), Comparison::Same);
        assert_eq!(compare(&Objects::new(), &[]), Comparison::Same);
    }

    #[test]
    fn the_digest_tells_etcd_order_from_nothing() {
        // etcd lists `a-b/x` before `a/x`; the store the other way round.
        let one = entries(&[("a", "x", 1), ("a-b", "x", 2)]);
        let other = entries(&[("a-b", "x", 2), ("a", "x", 1)]);
        let digest = |es: &[Entry]| {
            let mut d = Digest::default();
            es.iter().for_each(|e| d.add(e));
            d
        };
        assert_eq!(digest(&one), digest(&other));
    }

    #[test]
    fn each_kind_of_difference_is_found_and_named() {
        let cache = objects(&[("kept", 2), ("stale", 3), ("extra", 4)]);
        let theirs = upstream(&[("kept", 2), ("stale", 5), ("new", 6)]);
        let Comparison::Differ { count, first } = compare(&cache, &theirs) else { panic!("must differ") };
        assert_eq!(count, 3);
        let shown: Vec<String> = first.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "ns/extra: only in the cache (at 4)",
                "ns/new: missing from the cache (upstream at 6)",
                "ns/stale: cache at 3, upstream at 5",
            ]
        );
    }

    #[test]
    fn a_version_one_off_changes_the_digest() {
        let cache = objects(&[("a", 2)]);
        assert!(matches!(compare(&cache, &upstream(&[("a", 1)])), Comparison::Differ { count: 1, .. }));
        // The key is hashed with separators: `ns/ab` at 1 is not `ns/a` at b1.
        let a = Entry { key: ObjectKey { namespace: "ns".into(), name: "a".into() }, rv: 11 };
        let b = Entry { key: ObjectKey { namespace: "ns".into(), name: "a1".into() }, rv: 1 };
        assert_ne!(entry_hash(&a), entry_hash(&b));
    }

    #[test]
    fn an_entry_listed_twice_is_a_difference_even_when_it_matches() {
        let cache = objects(&[("a", 2)]);
        let Comparison::Differ { count, first } = compare(&cache, &upstream(&[("a", 2), ("a", 2)])) else {
            panic!("a repeated entry must not cancel out")
        };
        assert_eq!((count, first[0].to_string()), (1, "ns/a: listed 2 times by the upstream".to_owned()));
    }

    #[test]
    fn only_the_first_few_differences_are_reported_but_all_are_counted() {
        let many: Vec<(String, u64)> = (0..25).map(|i| (format!("o{i:02}"), 10 + i)).collect();
        let cache = objects(&many.iter().map(|(n, rv)| (n.as_str(), *rv)).collect::<Vec<_>>());
        let Comparison::Differ { count, first } = compare(&cache, &[]) else { panic!("must differ") };
        assert_eq!((count, first.len()), (25, REPORTED_KEYS));
        assert_eq!(first[0].to_string(), "ns/o00: only in the cache (at 10)");
    }
}
