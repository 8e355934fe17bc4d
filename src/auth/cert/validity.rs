//! When a client certificate may be used: the window in which every
//! certificate of its verified chain, trust anchor included, is valid.
//!
//! kube-apiserver verifies the client's chain again on every request, at
//! the time of the request (k8s.io/apiserver's x509 authenticator calls
//! `Certificate.Verify` with the current time, and Go's `isValid` checks
//! `NotBefore` and `NotAfter` of the leaf, each intermediate and the root).
//! watchmux verifies the chain once, at the handshake, and keeps this
//! window with the connection's identity: a request outside it is refused
//! as the API server refuses it, however long the connection has lived.

use std::time::{SystemTime, UNIX_EPOCH};

/// The window `[not_before, not_after]`, both ends included, in seconds
/// since the Unix epoch (certificate times have no finer resolution).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Validity {
    not_before: i64,
    not_after: i64,
}

/// A time outside a certificate's window; the message is Go's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OutsideValidity {
    #[error("x509: certificate has expired or is not yet valid: current time {now} is before {not_before}")]
    NotYetValid { now: i64, not_before: i64 },
    #[error("x509: certificate has expired or is not yet valid: current time {now} is after {not_after}")]
    Expired { now: i64, not_after: i64 },
}

impl Validity {
    /// A certificate's own window; `None` when it cannot be read.
    pub(crate) fn of(der: &[u8]) -> Option<Self> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let v = cert.validity();
        Some(Self { not_before: v.not_before.timestamp(), not_after: v.not_after.timestamp() })
    }

    /// The first and the last second of the window.
    pub(crate) fn ends(&self) -> [i64; 2] {
        [self.not_before, self.not_after]
    }

    /// The part of the window both allow: the latest start, the earliest end.
    pub(crate) fn and(self, other: Self) -> Self {
        Self { not_before: self.not_before.max(other.not_before), not_after: self.not_after.min(other.not_after) }
    }

    /// Go's `isValid` test: refused when `now` is before `NotBefore` or
    /// after `NotAfter`, to the nanosecond (so one past the last second is
    /// too late).
    pub(crate) fn check(&self, now: SystemTime) -> Result<(), OutsideValidity> {
        let nanos = |secs: i64| i128::from(secs) * 1_000_000_000;
        let now_nanos = match now.duration_since(UNIX_EPOCH) {
            Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
            Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
        };
        let now_secs = i64::try_from(now_nanos.div_euclid(1_000_000_000)).unwrap_or(i64::MAX);
        if now_nanos < nanos(self.not_before) {
            Err(OutsideValidity::NotYetValid { now: now_secs, not_before: self.not_before })
        } else if now_nanos > nanos(self.not_after) {
            Err(OutsideValidity::Expired { now: now_secs, not_after: self.not_after })
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn both_ends_are_included_to_the_nanosecond() {
        let v = Validity { not_before: 100, not_after: 200 };
        assert_eq!(v.check(at(99, 999_999_999)), Err(OutsideValidity::NotYetValid { now: 99, not_before: 100 }));
        assert_eq!(v.check(at(100, 0)), Ok(()));
        assert_eq!(v.check(at(200, 0)), Ok(()));
        assert_eq!(v.check(at(200, 1)), Err(OutsideValidity::Expired { now: 200, not_after: 200 }));
    }

    #[test]
    fn a_chain_is_valid_only_where_every_certificate_is() {
        let leaf = Validity { not_before: 100, not_after: 200 };
        let root = Validity { not_before: 50, not_after: 150 };
        let chain = leaf.and(root);
        assert_eq!(chain, Validity { not_before: 100, not_after: 150 });
        assert!(chain.check(at(151, 0)).is_err());
        // Windows that do not meet allow no time at all.
        let disjoint = leaf.and(Validity { not_before: 300, not_after: 400 });
        assert!((0..500).all(|s| disjoint.check(at(s, 0)).is_err()));
    }

    #[test]
    fn times_before_the_epoch_compare_too() {
        let v = Validity { not_before: -100, not_after: 10 };
        assert_eq!(v.check(UNIX_EPOCH - Duration::from_secs(50)), Ok(()));
        assert!(v.check(UNIX_EPOCH - Duration::from_secs(101)).is_err());
    }

    #[test]
    fn a_certificate_s_window_is_read_from_it() {
        let mut params = rcgen::CertificateParams::default();
        params.not_before = rcgen::date_time_ymd(2030, 1, 2);
        params.not_after = rcgen::date_time_ymd(2031, 1, 2);
        let key = rcgen::KeyPair::generate().unwrap();
        let der = params.self_signed(&key).unwrap().der().clone();
        assert_eq!(Validity::of(&der), Some(Validity { not_before: 1_893_542_400, not_after: 1_925_078_400 }));
        assert_eq!(Validity::of(b"junk"), None);
    }
}
