//! From flags to each subsystem's own settings: the one mapping, used by
//! `watchmux::run` and by the in-process test harness alike.
//!
//! Each subsystem owns its settings type (`cache::registry::CacheConfig`,
//! `auth::DelegatedSettings`, `app::ServerOptions`) and knows nothing of
//! flags; the flags' syntax (`resource[.group]#size`, `RESOURCE=SELECTORS`)
//! is parsed here, by clap's value parsers, so a bad value is refused with
//! clap's own message before anything starts. Every default is written once,
//! on its flag in [`super::Args`].

use std::collections::{HashMap, HashSet};

use clap::ValueEnum;
use clap::builder::PossibleValue;

use super::{AuthMode, CacheResource};
use crate::app::{Limits, ServerOptions};
use crate::auth::{self, DelegatedSettings, UpstreamIdentityMode};
use crate::cache::catalog::resolve::{GroupResource, ResourceName};
use crate::cache::persist::{PersistConfig, PersistSelection};
use crate::cache::registry::{CacheConfig, ResourceSelection};
use crate::cache::resource::{CacheSettings, Scope, SyncSettings};
use crate::selector::{FieldSelector, LabelSelector};
use crate::server;

impl super::Args {
    /// The server's options (without a metrics recorder, which the caller
    /// installs): listeners, limits, auth and the cache.
    pub fn server_options(&self) -> anyhow::Result<ServerOptions> {
        let tls = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => Some(server::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.client_ca_file.clone(),
                protocol: server::TlsProtocol {
                    min_version: self.tls_min_version,
                    cipher_suites: self.tls_cipher_suites.clone(),
                },
            }),
            _ => None,
        };
        Ok(ServerOptions {
            listeners: server::Listeners {
                api: self.listen,
                tls,
                unix: self.listen_unix.clone(),
                admin: self.admin_listen,
            },
            shutdown_grace: self.shutdown_grace,
            metrics: None,
            cache: Some(self.cache_config()),
            delegated: self.delegated_settings(),
            limits: Limits {
                max_requests_inflight: self.max_requests_inflight,
                max_connections: self.max_connections,
                max_connections_per_address: self.max_connections_per_address,
                max_connections_per_user: self.max_connections_per_user,
                idle_connection_timeout: self.idle_connection_timeout,
                goaway_chance: self.goaway_chance,
                max_connection_age: self.max_connection_age,
                max_connection_age_grace: self.max_connection_age_grace,
                passthrough_buffer_bytes: self.passthrough_buffer_bytes,
                passthrough_stall_timeout: self.passthrough_stall_timeout,
                max_request_body_bytes: self.max_request_body_bytes,
            },
            fairness: crate::fairness::FairnessSettings {
                seats: self.fairness_seats,
                queue_wait: self.fairness_queue_wait,
                watch_starts_per_second: self.fairness_watch_starts_per_second,
                watch_start_burst: self.fairness_watch_start_burst,
            },
            h2_write_batching: self.h2_write_batching,
            // Delegated mode authenticates every request instead.
            accept_hosts: match self.auth_mode {
                AuthMode::TrustedLocal => Some(server::gates::hosts::AcceptHosts::new(&self.accept_hosts)?),
                AuthMode::Delegated => None,
            },
            reject_paths: match self.auth_mode {
                AuthMode::TrustedLocal => Some(server::gates::reject_paths::RejectPaths::new(&self.reject_paths)?),
                AuthMode::Delegated => None,
            },
        })
    }

    /// What to cache and how (`--cache-*`, `--watch-cache-sizes`, the history
    /// window and the slow-watcher grace).
    fn cache_config(&self) -> CacheConfig {
        let resources = if self.cache_resources.contains(&CacheResource::All) {
            ResourceSelection::All
        } else {
            ResourceSelection::Only(
                self.cache_resources
                    .iter()
                    .filter_map(|r| match r {
                        CacheResource::One(name) => Some(name.clone()),
                        CacheResource::All | CacheResource::Empty => None,
                    })
                    .collect(),
            )
        };
        // As in the API server, only a size of 0 means something now: no
        // cache. Other sizes are accepted and ignored (capacity is dynamic).
        let disabled: HashSet<GroupResource> =
            self.watch_cache_sizes.iter().filter(|size| size.size == 0).map(|size| size.resource.clone()).collect();
        let scopes: HashMap<GroupResource, Scope> =
            self.cache_scope.iter().map(|s| (s.resource.clone(), s.scope.clone())).collect();
        CacheConfig {
            resources,
            disabled,
            scopes,
            warm: self.cache_warm,
            compression: crate::compress::ResponseCompression { enabled: self.compress_responses },
            settings: CacheSettings {
                history_window: self.events_history_window,
                slow_watcher_grace: self.slow_watcher_grace,
                consistency_check_period: self.consistency_check_period,
                sync: SyncSettings { gzip_lists: self.upstream_gzip_lists, watch_list: self.upstream_watch_list },
                ..CacheSettings::default()
            },
            persist: self.persist_config(),
        }
    }

    /// `--persist-*` and `--serve-stale-when-upstream-unreachable`.
    pub(crate) fn persist_config(&self) -> PersistConfig {
        let mut resources = PersistSelection::default();
        for entry in self.persist_resources.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            match entry {
                "*" => resources.all_but_secrets = true,
                name => {
                    resources.named.insert(GroupResource::parse(name));
                }
            }
        }
        PersistConfig {
            dir: self.persist_dir.clone(),
            resources,
            encryption_key_file: self.persist_encryption_key_file.clone(),
            serve_stale_when_unreachable: self.serve_stale_when_upstream_unreachable,
        }
    }

    /// Delegated authentication and authorization; `None` in trusted-local.
    fn delegated_settings(&self) -> Option<DelegatedSettings> {
        (self.auth_mode == AuthMode::Delegated).then_some(DelegatedSettings {
            anonymous: self.anonymous_auth,
            token_ttl: self.authentication_token_cache_ttl,
            token_negative_ttl: self.authentication_token_negative_cache_ttl,
            authorized_ttl: self.authorization_cache_authorized_ttl,
            unauthorized_ttl: self.authorization_cache_unauthorized_ttl,
            cache_capacity: auth::CACHE_CAPACITY,
            max_concurrent_reviews: self.max_concurrent_reviews,
            upstream_identity: self.upstream_identity,
            offline_own_reads: self.serve_stale_when_upstream_unreachable
                && self.upstream_identity == auth::UpstreamIdentityMode::Client,
        })
    }
}

/// One `--watch-cache-sizes` entry, `resource[.group]#size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchCacheSize {
    resource: GroupResource,
    size: u64,
}

/// One `--cache-scope` entry, `RESOURCE=SELECTORS`.
#[derive(Debug, Clone)]
pub struct CacheScope {
    resource: GroupResource,
    scope: Scope,
}

/// `--cache-resources`: `*` or `resource[.group]`.
pub(super) fn parse_cache_resource(entry: &str) -> Result<CacheResource, String> {
    match entry.trim() {
        "*" => Ok(CacheResource::All),
        "" => Ok(CacheResource::Empty),
        name => Ok(CacheResource::One(ResourceName::parse(name))),
    }
}

/// `--watch-cache-sizes`: `resource[.group]#size`, the API server's syntax.
pub(super) fn parse_watch_cache_size(entry: &str) -> Result<WatchCacheSize, String> {
    let bad = || format!("{entry:?} is not resource[.group]#size");
    let (name, size) = entry.split_once('#').ok_or_else(bad)?;
    let size = size.trim().parse().map_err(|_| bad())?;
    Ok(WatchCacheSize { resource: GroupResource::parse(name.trim()), size })
}

/// `--cache-scope`: `RESOURCE=SELECTORS`, the selectors as query parameters.
pub(super) fn parse_cache_scope(entry: &str) -> Result<CacheScope, String> {
    let (resource, query) = entry
        .split_once('=')
        .ok_or_else(|| format!("{entry:?} is not RESOURCE=SELECTORS, e.g. pods=fieldSelector=spec.nodeName=node-1"))?;
    let mut scope = Scope::default();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let invalid = |e: crate::selector::SelectorError| format!("{entry:?}: {e}");
        match &*k {
            "labelSelector" => scope.labels = LabelSelector::parse(&v).map_err(invalid)?,
            "fieldSelector" => scope.fields = FieldSelector::parse(&v).map_err(invalid)?,
            _ => return Err(format!("{entry:?}: only labelSelector and fieldSelector may narrow a cache")),
        }
        scope.query.push((k.into_owned(), v.into_owned()));
    }
    Ok(CacheScope { resource: GroupResource::parse(resource.trim()), scope })
}

// `auth` owns the mode and knows nothing of clap; its spelling and help on
// the command line are written here.
impl ValueEnum for UpstreamIdentityMode {
    fn value_variants<'a>() -> &'a [Self] {
        &[Self::Impersonate, Self::Client]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::Impersonate => PossibleValue::new("impersonate").help(
                "watchmux's credentials, impersonating the caller: needs the right to impersonate anyone \
                 (shared and tier proxies)",
            ),
            Self::Client => PossibleValue::new("client").help(
                "the caller's own credentials; a client certificate of watchmux's own upstream identity goes \
                 with watchmux's (node-local with the node's credentials)",
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Args;

    fn args(extra: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("watchmux").chain(extra.iter().copied()))
    }

    fn gr(s: &str) -> GroupResource {
        GroupResource::parse(s)
    }

    fn names(cfg: &CacheConfig) -> Vec<String> {
        match &cfg.resources {
            ResourceSelection::Only(names) => names.iter().map(ToString::to_string).collect(),
            ResourceSelection::All => vec!["*".into()],
        }
    }

    #[test]
    fn the_default_resources_are_what_node_agents_watch() {
        let cfg = args(&[]).unwrap().cache_config();
        let names = names(&cfg);
        for cached in ["pods", "nodes", "configmaps", "endpointslices.discovery.k8s.io", "csidrivers.storage.k8s.io"] {
            assert!(names.contains(&cached.to_owned()), "{cached}");
        }
        assert!(!names.contains(&"secrets".to_owned()));
    }

    #[test]
    fn star_caches_everything_but_what_watch_cache_sizes_turns_off() {
        let cfg = args(&[
            "--cache-resources",
            "*",
            "--watch-cache-sizes",
            "secrets#0,pods#1000,leases.coordination.k8s.io#0",
        ])
        .unwrap()
        .cache_config();
        assert_eq!(cfg.resources, ResourceSelection::All);
        assert!(!cfg.disabled.contains(&gr("pods")), "a size other than 0 is ignored");
        assert!(cfg.disabled.contains(&gr("secrets")));
        assert!(cfg.disabled.contains(&gr("leases.coordination.k8s.io")));
    }

    #[test]
    fn an_empty_cache_resources_caches_nothing() {
        assert_eq!(names(&args(&["--cache-resources="]).unwrap().cache_config()), Vec::<String>::new());
        assert_eq!(names(&args(&["--cache-resources", "pods,,nodes"]).unwrap().cache_config()), ["pods", "nodes"]);
    }

    #[test]
    fn resource_names_are_kept_as_written_for_resolution() {
        let cfg =
            args(&["--cache-resources", "deploy,deployments.v1.apps,events.events.k8s.io"]).unwrap().cache_config();
        assert_eq!(names(&cfg), ["deploy", "deployments.apps", "events.events.k8s.io"]);
    }

    #[test]
    fn malformed_flag_values_are_refused_by_the_parser_with_the_entry_named() {
        for (flag, bad) in [
            ("--watch-cache-sizes", "pods"),
            ("--watch-cache-sizes", "pods#many"),
            ("--cache-scope", "pods"),
            ("--cache-scope", "pods=limit=5"),
            ("--cache-scope", "pods=labelSelector=a in (b"),
        ] {
            let err = args(&[flag, bad]).unwrap_err();
            assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation, "{flag} {bad}");
            assert!(err.to_string().contains(flag), "{err}");
        }
    }

    #[test]
    fn a_scope_keeps_its_selectors_and_their_query_form() {
        let cfg = args(&["--cache-scope", "pods=fieldSelector=spec.nodeName=node-1"]).unwrap().cache_config();
        let scope = &cfg.scopes[&gr("pods")];
        assert_eq!(scope.fields.exact("spec.nodeName"), Some("node-1"));
        assert_eq!(scope.query, vec![("fieldSelector".to_owned(), "spec.nodeName=node-1".to_owned())]);
    }

    #[test]
    fn the_history_window_default_is_the_api_servers() {
        let cfg = args(&[]).unwrap().cache_config();
        assert_eq!(cfg.settings.history_window, crate::cache::state::history::DEFAULT_WINDOW);
    }

    /// The cache's sync settings come from the `--upstream-*` flags that
    /// shape its lists, each from its own.
    #[test]
    fn the_caches_sync_settings_follow_their_flags() {
        let sync = |flags: &[&str]| args(flags).unwrap().cache_config().settings.sync;
        assert_eq!(sync(&[]), SyncSettings { gzip_lists: true, watch_list: false });
        let flipped = sync(&["--upstream-gzip-lists=false", "--upstream-watch-list"]);
        assert_eq!(flipped, SyncSettings { gzip_lists: false, watch_list: true });
    }

    /// `--goaway-chance` is off by default, as kube-apiserver's, and takes
    /// its range with its message.
    #[test]
    fn the_goaway_chance_is_off_by_default_and_capped_as_kube_apiservers() {
        let chance = |flags: &[&str]| args(flags).unwrap().server_options().unwrap().limits.goaway_chance;
        assert_eq!(chance(&[]), 0.0);
        assert_eq!(chance(&["--goaway-chance", "0.001"]), 0.001);
        let err = args(&["--goaway-chance", "0.05"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("--goaway-chance can not be less than 0 or greater than 0.02"), "{err}");
    }

    /// `--max-connection-age` is off by default (the binary serves one
    /// client, or none behind a balancer), with a grace of 5 minutes.
    #[test]
    fn the_maximum_connection_age_is_off_by_default() {
        let limits = |flags: &[&str]| args(flags).unwrap().server_options().unwrap().limits;
        let default = limits(&[]);
        assert_eq!(default.max_connection_age, std::time::Duration::ZERO);
        assert_eq!(default.max_connection_age_grace, std::time::Duration::from_secs(300));
        let set = limits(&["--max-connection-age", "10m", "--max-connection-age-grace", "90s"]);
        assert_eq!(set.max_connection_age, std::time::Duration::from_secs(600));
        assert_eq!(set.max_connection_age_grace, std::time::Duration::from_secs(90));
    }

    #[test]
    fn delegated_settings_exist_only_in_delegated_mode() {
        assert!(args(&[]).unwrap().delegated_settings().is_none());
        let delegated = args(&["--auth-mode", "delegated", "--upstream-identity", "client"]).unwrap();
        let settings = delegated.delegated_settings().unwrap();
        assert_eq!(settings.upstream_identity, UpstreamIdentityMode::Client);
        assert!(settings.anonymous);
        assert!(args(&["--upstream-identity", "nobody"]).is_err());
    }
}
