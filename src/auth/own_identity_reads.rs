//! Cache reads by watchmux's own upstream identity while the upstream is
//! down: admitted without a SubjectAccessReview.
//!
//! Why: in nodeLocal mode with `--upstream-identity=client`, watchmux's
//! credentials are the node's (the kubelet's own kubeconfig), so every cache
//! it holds was listed and watched upstream *as the node*, under its
//! `--cache-scope`, and the API server authorized exactly that. A node that
//! restarts while the control plane is away (the offline reboot)
//! loads those caches from disk, but its review cache is empty and no
//! review can be had: without this rule every read by the kubelet fails
//! closed, and the persisted caches serve no one.
//!
//! The rule is narrow, and gives no one more than the API server gave:
//! - only with `--serve-stale-when-upstream-unreachable` and
//!   `--upstream-identity=client` (the operator chose offline serving, and
//!   watchmux holds no rights beyond the node's);
//! - only while the readiness probe finds the upstream down (unreachable or
//!   unresponsive); a review that merely fails still fails closed;
//! - only cache reads (`admit_read`): writes and pass-through reads go
//!   upstream and fail there as they would;
//! - only a caller that is the same principal as watchmux's own upstream
//!   identity (name, uid, groups and extras): the one the API server
//!   answered with its SelfSubjectReview, or before it ever answered, the
//!   identity of the client certificate watchmux presents, read by the API
//!   server's own rule. Such a caller reads a subset of what its own
//!   credentials already listed.
//!
//! Counted as `watchmux_auth_authorization_decisions_total{result="offline_own_identity"}`,
//! logged once when it starts and once when the upstream is back.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use metrics::counter;

use super::review_cache::Lookup;
use super::reviews::{Attributes, Decision};
use super::user::UserInfo;
use super::{Caller, Delegated, cert};
use crate::metrics as m;

impl Delegated {
    /// A cache read by `caller` that this rule may admit: `Some` review
    /// outcome when it was had, `None` when the read is admitted because the
    /// upstream is down (already, or found so while the review waited: a
    /// review sent before the first probe failed would otherwise hold the
    /// kubelet's reads for the review's whole timeout).
    pub(super) async fn own_read_offline(
        &self,
        caller: &Caller,
        attrs: &Attributes,
    ) -> Option<(Decision, Option<Lookup>)> {
        let upstream = self.reviews.upstream();
        if !upstream.health().is_down() && self.admitting_own_reads.swap(false, Ordering::AcqRel) {
            tracing::info!("the upstream is back: cache reads by watchmux's own identity are reviewed again");
        }
        if !self.settings.offline_own_reads || !is_own_identity(self.own_identity_now().as_deref(), caller) {
            return Some(self.decide(caller, attrs).await);
        }
        tokio::select! {
            biased;
            () = upstream.found_down() => {}
            decided = self.decide(caller, attrs) => return Some(decided),
        }
        counter!(m::AUTH_AUTHORIZED, "result" => "offline_own_identity").increment(1);
        if !self.admitting_own_reads.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                user = %caller.name,
                "the upstream is down: cache reads by watchmux's own upstream identity are admitted without a review"
            );
        }
        None
    }

    /// watchmux's own upstream identity: as the API server answered it, or
    /// before it ever did, as the client certificate watchmux presents says.
    fn own_identity_now(&self) -> Option<Arc<UserInfo>> {
        match self.watchmux_user.get() {
            Some(learned) => Some(Arc::new(learned.clone())),
            None => self.reviews.upstream().own_certificate_pem().and_then(|pem| cert::identity_of_pem(&pem)),
        }
    }
}

/// Whether `caller` is watchmux's own identity `own` (when it is known).
fn is_own_identity(own: Option<&UserInfo>, caller: &UserInfo) -> bool {
    own.is_some_and(|own| own.is_same_principal(caller))
}

#[cfg(test)]
mod tests {
    use rcgen::{DnType, DnValue};

    use super::*;
    use crate::auth::cert::tests::cert_with_subject;
    use crate::auth::user::AUTHENTICATED;

    fn pem(der: &[u8]) -> Vec<u8> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n")).into_bytes()
    }

    fn node_cert(cn: &str, o: &str) -> Vec<u8> {
        let der = cert_with_subject(&[
            (DnType::OrganizationName, DnValue::Utf8String(o.into())),
            (DnType::CommonName, DnValue::Utf8String(cn.into())),
        ]);
        pem(der.as_ref())
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn the_own_certificate_admits_only_the_same_principal() {
        let own = cert::identity_of_pem(&node_cert("system:node:n1", "system:nodes")).expect("an identity");
        assert_eq!(own.name, "system:node:n1");
        // The kubelet presenting the node's certificate (another copy, so
        // another credential id) is the same principal.
        let kubelet = cert::identity_of_pem(&node_cert("system:node:n1", "system:nodes")).unwrap();
        assert!(is_own_identity(Some(&own), &kubelet));
        assert!(is_own_identity(Some(&own), &user("system:node:n1", &["system:nodes", AUTHENTICATED])));
        // Another node, or the same name in other groups, is someone else.
        assert!(!is_own_identity(Some(&own), &user("system:node:n2", &["system:nodes", AUTHENTICATED])));
        assert!(!is_own_identity(Some(&own), &user("system:node:n1", &["system:masters", AUTHENTICATED])));
        assert!(!is_own_identity(Some(&own), &user("system:node:n1", &[AUTHENTICATED])));
        // No own identity known: nobody.
        assert!(!is_own_identity(None, &kubelet));
    }

    #[test]
    fn a_pem_without_a_usable_certificate_names_nobody() {
        assert!(cert::identity_of_pem(b"").is_none());
        assert!(cert::identity_of_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_none());
        let no_cn = pem(cert_with_subject(&[(DnType::OrganizationName, DnValue::Utf8String("x".into()))]).as_ref());
        assert!(cert::identity_of_pem(&no_cn).is_none());
    }
}
