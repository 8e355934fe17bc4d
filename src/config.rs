//! Command-line flags and the defaults that go with them: the one place where
//! watchmux's configuration is defined.

pub mod kubeconfig;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// watchmux: a transparent caching watch proxy for the Kubernetes API.
///
/// Point clients' kubeconfig at watchmux instead of kube-apiserver. Requests
/// are forwarded upstream with watchmux's own credentials; long-lived streams
/// (watch, logs -f) are flushed as bytes arrive and upgrades (exec, attach,
/// port-forward) are tunnelled.
#[derive(Debug, Clone, Parser)]
#[command(name = "watchmux", version, about, long_about = None)]
pub struct Args {
    /// Kubeconfig for the upstream API server. Without it: in-cluster service
    /// account, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of its current-context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Address of the API listener (HTTP/1.1 and HTTP/2 on one port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,

    /// Also serve the API on this unix socket.
    #[arg(long, value_name = "PATH")]
    pub listen_unix: Option<PathBuf>,

    /// PEM certificate chain for TLS on the API listener (plain HTTP without it;
    /// HTTP/2 then by prior knowledge).
    #[arg(long, value_name = "PATH", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key for --tls-cert-file.
    #[arg(long, value_name = "PATH", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Address of the admin listener: /metrics, /healthz, /livez, /readyz. Kept
    /// apart from the API port so the API server's own paths pass through.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9444")]
    pub admin_listen: SocketAddr,

    /// How long in-flight requests may run after SIGTERM/SIGINT before the
    /// process exits. Watch streams end at once so clients reconnect.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// Speak only HTTP/1.1 to the upstream, even when it offers HTTP/2.
    #[arg(long)]
    pub upstream_http1_only: bool,

    /// Resources to cache, as resource[.group], comma-separated; `*` caches
    /// every resource that can be listed and watched, custom resources
    /// included. Everything else passes through.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "pods,nodes,services,endpoints,endpointslices.discovery.k8s.io,namespaces,configmaps,runtimeclasses.node.k8s.io,csidrivers.storage.k8s.io"
    )]
    pub cache_resources: Vec<String>,

    /// Per-resource cache sizes in the API server's syntax, resource[.group]#size;
    /// a size of 0 turns that resource's cache off (other sizes are accepted and
    /// ignored: capacity adapts on its own).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub watch_cache_sizes: Vec<String>,

    /// Start the caches at start-up instead of on first request, and report
    /// ready only once they are synced.
    #[arg(long)]
    pub cache_warm: bool,

    /// Narrows one resource's upstream watch, e.g.
    /// `pods=fieldSelector=spec.nodeName=node-1` on a node-local proxy. Requests
    /// whose selectors do not lie inside the scope pass through. Repeatable.
    #[arg(long, value_name = "RESOURCE=SELECTORS")]
    pub cache_scope: Vec<String>,

    /// How long events are kept for watchers resuming from a resourceVersion;
    /// the history grows and shrinks to cover this window, as the API server's does.
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = parse_duration)]
    pub events_history_window: Duration,

    /// How long a watcher may stay behind by a full buffer before it is closed
    /// (it then resumes from its last resourceVersion).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub slow_watcher_grace: Duration,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Parses `30s`, `500ms`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 30s, 500ms, 2m"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("invalid duration unit {unit:?} in {s:?}: use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("3 days").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let args = Args::try_parse_from(["watchmux"]).unwrap();
        assert_eq!(args.listen, "127.0.0.1:6443".parse().unwrap());
        assert_eq!(args.admin_listen, "127.0.0.1:9444".parse().unwrap());
        assert_eq!(args.shutdown_grace, Duration::from_secs(30));
        assert!(args.kubeconfig.is_none() && args.listen_unix.is_none());
        assert_eq!(args.cache_resources.len(), 9);
        assert!(args.cache_resources.contains(&"endpointslices.discovery.k8s.io".to_owned()));
        assert_eq!(args.events_history_window, Duration::from_secs(75));
        assert!(!args.cache_warm);
    }

    #[test]
    fn tls_cert_requires_key() {
        assert!(Args::try_parse_from(["watchmux", "--tls-cert-file", "c.pem"]).is_err());
        assert!(Args::try_parse_from(["watchmux", "--tls-cert-file", "c", "--tls-private-key-file", "k"]).is_ok());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Args::command().debug_assert();
    }
}
