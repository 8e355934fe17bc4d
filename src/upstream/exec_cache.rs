//! The credential an exec plugin issued, kept until it is due and renewed
//! one run at a time.
//!
//! Rules, after client-go's exec authenticator:
//! - a credential with an `expirationTimestamp` is used until shortly before
//!   it (see [`refresh_margin`]); from then on requests keep using it while
//!   one background run renews it, and past the expiry they wait for a run;
//! - a credential without one is used until the upstream answers 401 to a
//!   request that carried it;
//! - single flight: however many requests find the credential due, refused
//!   or missing, one run of the plugin serves them all, and a failed run is
//!   the answer for every request that waited on it and, for
//!   [`RETRY_AFTER_FAILURE`], for the requests after it (a failing plugin is
//!   not run once per request);
//! - a failed early renewal keeps the credential in use until it expires.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderValue;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::exec::{ClientIdentity, ExecError, ExecPlugin, Issued};

/// How long the outcome of a failed run answers requests before the
/// plugin is run again.
pub(super) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// The longest a credential is renewed ahead of its expiry.
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// How far ahead of its expiry a credential with `lifetime` left is renewed:
/// a quarter of it, at most a minute (a 15-minute EKS token is renewed a
/// minute early, a 20-second one 5 s early).
fn refresh_margin(lifetime: Duration) -> Duration {
    (lifetime / 4).min(MAX_REFRESH_MARGIN)
}

/// One credential in use.
#[derive(Debug)]
pub(crate) struct IssuedCredential {
    /// Counts the plugin's successful runs; a 401 names the one it refused.
    pub generation: u64,
    /// `Bearer <token>`, marked sensitive, when the plugin gave a token.
    pub authorization: Option<HeaderValue>,
    /// The client certificate, when the plugin gave one. The same `Arc` as
    /// the previous credential's when the certificate did not change, so
    /// connections are only replaced when it does.
    pub identity: Option<Arc<ClientIdentity>>,
    /// When to start renewing it, and when it may no longer be used.
    refresh_at: Option<Instant>,
    expires_at: Option<Instant>,
}

impl IssuedCredential {
    fn expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }

    fn due(&self, now: Instant) -> bool {
        self.refresh_at.is_some_and(|t| now >= t)
    }
}

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<IssuedCredential>>,
    /// The upstream answered 401 to the current credential.
    refused: bool,
    /// Finished runs, successful or not: a request that waited for a run
    /// compares it to know whether one finished meanwhile.
    runs: u64,
    generation: u64,
    last_failure: Option<(Instant, Arc<ExecError>)>,
}

impl State {
    /// The credential requests may use now, if any.
    fn usable(&self, now: Instant) -> Option<&Arc<IssuedCredential>> {
        self.current.as_ref().filter(|c| !self.refused && !c.expired(now))
    }

    /// What a request gets without running the plugin: the usable
    /// credential, else the last failure.
    fn outcome(&self, now: Instant) -> Option<Result<Arc<IssuedCredential>, Arc<ExecError>>> {
        match (self.usable(now), &self.last_failure) {
            (Some(c), _) => Some(Ok(c.clone())),
            (None, Some((_, err))) => Some(Err(err.clone())),
            (None, None) => None,
        }
    }
}

/// An exec plugin's credentials, shared by every upstream request.
#[derive(Debug)]
pub(crate) struct ExecCredentials {
    plugin: ExecPlugin,
    state: Mutex<State>,
    /// Held by the one run in progress.
    run: Arc<tokio::sync::Mutex<()>>,
}

impl ExecCredentials {
    pub(crate) fn new(plugin: ExecPlugin) -> Arc<Self> {
        Arc::new(Self { plugin, state: Mutex::new(State::default()), run: Arc::new(tokio::sync::Mutex::new(())) })
    }

    /// The credential to send now, running the plugin if there is none
    /// usable (first use, expired, or refused with a 401).
    pub(crate) async fn current(self: &Arc<Self>) -> Result<Arc<IssuedCredential>, Arc<ExecError>> {
        let now = Instant::now();
        let runs_seen = {
            let state = self.state.lock();
            let recent_failure =
                state.last_failure.as_ref().filter(|(at, _)| now.duration_since(*at) < RETRY_AFTER_FAILURE);
            if let Some(c) = state.usable(now) {
                if c.due(now) && recent_failure.is_none() {
                    self.renew_in_background();
                }
                return Ok(c.clone());
            }
            if let Some((_, err)) = recent_failure {
                return Err(err.clone());
            }
            state.runs
        };
        let _run = self.run.lock().await;
        {
            let state = self.state.lock();
            if state.runs != runs_seen
                && let Some(outcome) = state.outcome(Instant::now())
            {
                // Another request's run finished while this one waited.
                return outcome;
            }
        }
        self.run_plugin().await
    }

    /// Records that the upstream answered 401 to `refused`: the next
    /// request runs the plugin again. 401s to an older credential than the
    /// current one are the same burst and change nothing.
    pub(crate) fn unauthorized(&self, refused: &IssuedCredential) {
        let mut state = self.state.lock();
        if state.current.as_ref().is_some_and(|c| c.generation == refused.generation) && !state.refused {
            state.refused = true;
            tracing::info!(
                user = self.plugin.user(),
                "the upstream refused the exec plugin's credential (401); it will run again"
            );
        }
    }

    /// Starts a renewal unless one is running; requests meanwhile keep the
    /// current credential.
    fn renew_in_background(self: &Arc<Self>) {
        let Ok(guard) = self.run.clone().try_lock_owned() else { return };
        let this = self.clone();
        tokio::spawn(async move {
            let _run = guard;
            // Whatever it gives is recorded; a failure is logged there.
            let _ = this.run_plugin().await;
        });
    }

    /// Runs the plugin (the caller holds `run`) and records the outcome.
    async fn run_plugin(&self) -> Result<Arc<IssuedCredential>, Arc<ExecError>> {
        let started = Instant::now();
        let result = self.plugin.run().await;
        let now = Instant::now();
        let mut state = self.state.lock();
        state.runs += 1;
        match result {
            Ok(issued) => {
                state.generation += 1;
                let credential = Arc::new(credential(issued, state.generation, state.current.as_deref(), now));
                tracing::debug!(
                    user = self.plugin.user(),
                    took_ms = now.duration_since(started).as_millis() as u64,
                    expires_in_s = credential.expires_at.map(|t| t.duration_since(now).as_secs()),
                    certificate = credential.identity.is_some(),
                    "exec plugin issued a credential"
                );
                state.current = Some(credential.clone());
                state.refused = false;
                state.last_failure = None;
                Ok(credential)
            }
            Err(err) => {
                // The first run's failure is start-up's fatal error, printed
                // there; later ones are only here (with the plugin's stderr).
                if state.generation > 0 {
                    tracing::error!(error = %err, "exec plugin failed; upstream requests that need a new credential fail until it succeeds");
                } else {
                    tracing::debug!(error = %err, "exec plugin failed");
                }
                let err = Arc::new(err);
                state.last_failure = Some((now, err.clone()));
                // An early renewal that failed leaves the credential usable
                // until it expires.
                match state.usable(now) {
                    Some(c) => Ok(c.clone()),
                    None => Err(err),
                }
            }
        }
    }
}

/// Turns what the plugin printed into the credential requests carry.
fn credential(issued: Issued, generation: u64, previous: Option<&IssuedCredential>, now: Instant) -> IssuedCredential {
    let authorization = issued.token.map(|t| {
        let mut v = HeaderValue::try_from(format!("Bearer {t}")).expect("checked when the output was parsed");
        v.set_sensitive(true);
        v
    });
    let identity = match (issued.identity, previous.and_then(|p| p.identity.as_ref())) {
        (Some(new), Some(old)) if *new == **old => Some(old.clone()),
        (new, _) => new,
    };
    // The expiry is wall-clock; the monotonic clock decides from here on.
    let (refresh_at, expires_at) = match issued.expires {
        None => (None, None),
        Some(expires) => {
            let lifetime = expires.duration_since(SystemTime::now()).unwrap_or_default();
            if lifetime.is_zero() {
                tracing::warn!("exec plugin issued a credential that has already expired; using it once");
            }
            let expires_at = now + lifetime;
            (Some(expires_at - refresh_margin(lifetime)), Some(expires_at))
        }
    };
    IssuedCredential { generation, authorization, identity, refresh_at, expires_at }
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::upstream::kubeconfig::{ExecApiVersion, ExecConfig, UpstreamAuth, UpstreamConfig};

    /// A plugin script in a temporary directory. Run n prints `out-<n>.json`
    /// if it exists, else `out.json`, with `@EXPIRES@` replaced by the time
    /// `$EXPIRES_IN` seconds from now; exits with the number in `exit` (0
    /// without one), after writing `stderr` to stderr. It counts its runs
    /// in `count` and keeps its arguments, environment and
    /// `KUBERNETES_EXEC_INFO` for the test to read.
    pub(in crate::upstream) struct Plugin {
        pub dir: tempfile::TempDir,
        pub config: ExecConfig,
    }

    const SCRIPT: &str = r#"#!/bin/bash
dir="$(dirname "$0")"
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$dir/count"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$dir/exec-info"
printf '%s\n' "$@" > "$dir/args"
printf '%s' "${PLUGIN_VAR:-}" > "$dir/env-var"
[ -f "$dir/stderr" ] && cat "$dir/stderr" >&2
out="$dir/out-$n.json"; [ -f "$out" ] || out="$dir/out.json"
expires=$(date -u -d "+${EXPIRES_IN:-3600} seconds" +%Y-%m-%dT%H:%M:%SZ)
sed "s/@EXPIRES@/$expires/" "$out"
exit "$(cat "$dir/exit" 2>/dev/null || echo 0)"
"#;

    impl Plugin {
        pub(crate) fn new(api_version: ExecApiVersion) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let command = dir.path().join("plugin");
            std::fs::write(&command, SCRIPT).unwrap();
            std::fs::set_permissions(&command, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let config = ExecConfig {
                user: "exec-user".into(),
                command,
                args: vec!["get-token".into(), "--cluster=c1".into()],
                env: vec![("PLUGIN_VAR".into(), "from-kubeconfig".into())],
                api_version,
                install_hint: None,
                provide_cluster_info: false,
                cluster_config: None,
            };
            Self { dir, config }
        }

        pub(crate) fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        pub(crate) fn write(&self, name: &str, text: &str) {
            std::fs::write(self.path(name), text).unwrap();
        }

        /// The plugin prints `status` (a JSON object's members) in an
        /// ExecCredential of the configured version, from run `run` on
        /// (every run with `None`).
        pub(crate) fn prints(&self, run: Option<u32>, status: &str) {
            let name = run.map_or("out.json".to_owned(), |n| format!("out-{n}.json"));
            let v = self.config.api_version.as_str();
            self.write(&name, &format!(r#"{{"apiVersion":"{v}","kind":"ExecCredential","status":{{{status}}}}}"#));
        }

        pub(crate) fn runs(&self) -> u32 {
            std::fs::read_to_string(self.path("count")).map_or(0, |s| s.trim().parse().unwrap())
        }

        pub(crate) fn upstream(&self) -> UpstreamConfig {
            UpstreamConfig {
                ca_pem: Some(b"CA PEM".to_vec()),
                tls_server_name: Some("kubernetes".into()),
                auth: UpstreamAuth::Exec(Box::new(self.config.clone())),
                ..UpstreamConfig::for_test("https://10.1.2.3:6443")
            }
        }

        /// The cache, without the plugin timeout when `paused` (see
        /// `ExecPlugin::with_timeout`).
        pub(crate) fn credentials(&self, paused: bool) -> Arc<ExecCredentials> {
            let plugin = ExecPlugin::new(&self.config, &self.upstream());
            ExecCredentials::new(if paused { plugin.with_timeout(None) } else { plugin })
        }
    }

    fn bearer(c: &IssuedCredential) -> String {
        c.authorization.as_ref().unwrap().to_str().unwrap().to_owned()
    }

    #[test]
    fn margin_is_a_quarter_of_the_lifetime_at_most_a_minute() {
        assert_eq!(refresh_margin(Duration::from_secs(20)), Duration::from_secs(5));
        assert_eq!(refresh_margin(Duration::from_secs(900)), Duration::from_secs(60));
        assert_eq!(refresh_margin(Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_v1_token_is_cached_without_expiry_and_the_plugin_gets_args_env_and_exec_info() {
        let p = Plugin::new(ExecApiVersion::V1);
        p.prints(None, r#""token":"tok-1""#);
        let creds = p.credentials(false);
        let c = creds.current().await.unwrap();
        assert_eq!(bearer(&c), "Bearer tok-1");
        assert!(c.authorization.as_ref().unwrap().is_sensitive());
        assert!(c.identity.is_none());
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");
        assert_eq!(p.runs(), 1, "a credential without expiry is kept");
        assert_eq!(std::fs::read_to_string(p.path("args")).unwrap(), "get-token\n--cluster=c1\n");
        assert_eq!(std::fs::read_to_string(p.path("env-var")).unwrap(), "from-kubeconfig");
        let info: serde_json::Value = serde_json::from_slice(&std::fs::read(p.path("exec-info")).unwrap()).unwrap();
        assert_eq!(
            info,
            serde_json::json!({"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1",
                "spec": {"interactive": false}})
        );
    }

    #[tokio::test]
    async fn a_v1beta1_plugin_with_cluster_info_is_told_the_cluster() {
        let mut p = Plugin::new(ExecApiVersion::V1beta1);
        p.config.provide_cluster_info = true;
        p.config.cluster_config = Some(serde_json::json!({"audience": "kube"}));
        p.prints(None, r#""token":"beta""#);
        assert_eq!(bearer(&p.credentials(false).current().await.unwrap()), "Bearer beta");
        let info: serde_json::Value = serde_json::from_slice(&std::fs::read(p.path("exec-info")).unwrap()).unwrap();
        assert_eq!(
            info,
            serde_json::json!({"kind": "ExecCredential", "apiVersion": "client.authentication.k8s.io/v1beta1",
                "spec": {"interactive": false, "cluster": {
                    "server": "https://10.1.2.3:6443", "tls-server-name": "kubernetes",
                    "certificate-authority-data": "Q0EgUEVN", "config": {"audience": "kube"}}}})
        );
    }

    #[tokio::test]
    async fn a_client_certificate_is_read_and_kept_as_the_same_identity_while_unchanged() {
        let p = Plugin::new(ExecApiVersion::V1);
        let (cert, key) = test_identity("exec-node");
        let status = format!(
            r#""clientCertificateData":{},"clientKeyData":{}"#,
            serde_json::Value::from(cert.clone()),
            serde_json::Value::from(key)
        );
        p.prints(None, &status);
        let creds = p.credentials(false);
        let first = creds.current().await.unwrap();
        assert!(first.authorization.is_none());
        assert_eq!(first.identity.as_ref().unwrap().cert_pem, cert.as_bytes());
        creds.unauthorized(&first);
        let second = creds.current().await.unwrap();
        assert_eq!(p.runs(), 2);
        assert!(Arc::ptr_eq(first.identity.as_ref().unwrap(), second.identity.as_ref().unwrap()));
    }

    /// A self-signed client certificate and its key, as PEM.
    pub(in crate::upstream) fn test_identity(cn: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[tokio::test(start_paused = true)]
    async fn an_expiring_token_is_renewed_in_the_background_before_expiry_and_awaited_after() {
        let mut p = Plugin::new(ExecApiVersion::V1);
        // Whole seconds: each credential lives 19 to 20 s, renewed 5 s early.
        p.config.env.push(("EXPIRES_IN".into(), "20".into()));
        p.prints(Some(1), r#""token":"tok-1","expirationTimestamp":"@EXPIRES@""#);
        p.prints(Some(2), r#""token":"tok-2","expirationTimestamp":"@EXPIRES@""#);
        p.prints(None, r#""token":"tok-3""#);
        let creds = p.credentials(true);
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");

        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");
        assert_eq!(p.runs(), 1, "not due yet");

        tokio::time::advance(Duration::from_secs(6)).await;
        // Due: answered at once with the current token, renewed behind it.
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");
        drop(creds.run.lock().await);
        assert_eq!(p.runs(), 2);
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-2");

        // Past tok-2's expiry with the renewal (run 3) never started in the
        // background: the request waits for a run.
        tokio::time::advance(Duration::from_secs(25)).await;
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-3");
        assert_eq!(p.runs(), 3);
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_run() {
        let p = Plugin::new(ExecApiVersion::V1);
        p.prints(None, r#""token":"shared""#);
        let creds = p.credentials(false);
        // join! polls every request before the plugin can answer, so all
        // of them find no credential and wait.
        let all = futures_util::future::join_all((0..50).map(|_| creds.current())).await;
        assert!(all.iter().all(|c| bearer(c.as_ref().unwrap()) == "Bearer shared"));
        assert_eq!(p.runs(), 1);
    }

    #[tokio::test]
    async fn a_401_burst_runs_the_plugin_once_and_late_401s_to_the_old_token_change_nothing() {
        let p = Plugin::new(ExecApiVersion::V1);
        p.prints(Some(1), r#""token":"old""#);
        p.prints(None, r#""token":"new""#);
        let creds = p.credentials(false);
        let old = creds.current().await.unwrap();
        for _ in 0..10 {
            creds.unauthorized(&old);
        }
        let all = futures_util::future::join_all((0..10).map(|_| creds.current())).await;
        assert!(all.iter().all(|c| bearer(c.as_ref().unwrap()) == "Bearer new"));
        assert_eq!(p.runs(), 2);
        creds.unauthorized(&old);
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer new");
        assert_eq!(p.runs(), 2, "a 401 to a replaced token is not a reason to run again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_plugin_reports_its_status_and_stderr_and_is_not_rerun_at_once() {
        let p = Plugin::new(ExecApiVersion::V1);
        p.write("exit", "3");
        p.write("stderr", &format!("{}\nerror: token expired, run `login`\n", "noise ".repeat(500)));
        p.prints(None, r#""token":"t""#);
        let creds = p.credentials(true);
        let err = creds.current().await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"exec-user\"") && text.contains("exit status: 3"), "{text}");
        assert!(text.contains("error: token expired, run `login`"), "stderr tail: {text}");
        assert!(text.len() < 1500, "only the tail of stderr: {}", text.len());
        assert!(!err.summary().contains("token expired"), "no stderr for clients: {}", err.summary());
        assert!(creds.current().await.is_err());
        assert_eq!(p.runs(), 1, "a failure answers for a while");
        tokio::time::advance(RETRY_AFTER_FAILURE).await;
        std::fs::remove_file(p.path("exit")).unwrap();
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer t");
        assert_eq!(p.runs(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_keeps_the_credential_until_it_expires() {
        let mut p = Plugin::new(ExecApiVersion::V1);
        p.config.env.push(("EXPIRES_IN".into(), "20".into()));
        p.prints(None, r#""token":"tok-1","expirationTimestamp":"@EXPIRES@""#);
        let creds = p.credentials(true);
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");
        p.write("exit", "1");
        tokio::time::advance(Duration::from_secs(16)).await;
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");
        drop(creds.run.lock().await);
        assert_eq!(p.runs(), 2);
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1", "still valid");
        drop(creds.run.lock().await);
        assert_eq!(p.runs(), 2, "a renewal that just failed is not retried by the next request");
        tokio::time::advance(RETRY_AFTER_FAILURE).await;
        assert_eq!(bearer(&creds.current().await.unwrap()), "Bearer tok-1");
        drop(creds.run.lock().await);
        assert_eq!(p.runs(), 3, "but a second after it is");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(creds.current().await.is_err(), "expired, and the plugin still fails");
    }

    #[tokio::test]
    async fn bad_output_and_the_wrong_api_version_are_errors_naming_the_user() {
        let p = Plugin::new(ExecApiVersion::V1);
        p.write("out.json", "not json");
        let err = p.credentials(false).current().await.unwrap_err().to_string();
        assert!(err.contains("\"exec-user\"") && err.contains("not an ExecCredential in JSON"), "{err}");
        p.write(
            "out.json",
            r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}"#,
        );
        let err = p.credentials(false).current().await.unwrap_err().to_string();
        assert!(err.contains("apiVersion \"client.authentication.k8s.io/v1beta1\", but the kubeconfig asks for client.authentication.k8s.io/v1"), "{err}");
        p.write("out.json", &"x".repeat(super::super::exec::MAX_STDOUT + 10));
        let err = p.credentials(false).current().await.unwrap_err().to_string();
        assert!(err.contains("more than"), "{err}");
    }

    #[tokio::test]
    async fn a_plugin_that_never_stops_writing_is_refused_without_waiting_for_the_deadline() {
        let mut p = Plugin::new(ExecApiVersion::V1);
        p.write("plugin-yes", "#!/bin/bash\nexec yes\n");
        std::fs::set_permissions(p.path("plugin-yes"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p.config.command = p.path("plugin-yes");
        let started = std::time::Instant::now();
        let err = p.credentials(false).current().await.unwrap_err();
        assert!(matches!(*err, ExecError::TooMuchOutput { .. }), "{err}");
        assert!(started.elapsed() < super::super::exec::PLUGIN_TIMEOUT / 2, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_missing_plugin_names_its_install_hint() {
        let mut p = Plugin::new(ExecApiVersion::V1);
        p.config.command = p.path("no-such-plugin");
        p.config.install_hint = Some("install it with `apt-get install no-such-plugin`".into());
        let err = p.credentials(false).current().await.unwrap_err().to_string();
        assert!(err.contains("no-such-plugin not found"), "{err}");
        assert!(err.contains("apt-get install no-such-plugin"), "{err}");
        p.config.command = "watchmux-no-such-plugin-in-path".into();
        let err = p.credentials(false).current().await.unwrap_err().to_string();
        assert!(err.contains("watchmux-no-such-plugin-in-path not found"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_plugin_that_hangs_is_killed_at_the_timeout() {
        let p = Plugin::new(ExecApiVersion::V1);
        p.write("plugin-hang", "#!/bin/bash\necho $$ > \"$(dirname \"$0\")/pid\"\nexec sleep 600\n");
        std::fs::set_permissions(p.path("plugin-hang"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut config = p.config.clone();
        config.command = p.path("plugin-hang");
        let creds = ExecCredentials::new(ExecPlugin::new(&config, &p.upstream()));
        // Paused time: the runtime jumps to the deadline once it is idle.
        let err = creds.current().await.unwrap_err();
        assert!(matches!(*err, ExecError::Timeout { .. }), "{err}");
    }
}
