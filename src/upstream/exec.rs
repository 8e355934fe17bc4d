//! Running a client-go credential plugin once: the kubeconfig's `exec`
//! command, with its arguments and environment and `KUBERNETES_EXEC_INFO`,
//! and reading the ExecCredential it prints.
//!
//! The plugin runs as a child process under tokio, never on a runtime
//! thread's time: without stdin (watchmux is never interactive), with a
//! deadline after which it is killed, and with bounded output. Caching and
//! refreshing what it returns is [`super::exec_cache`]'s business.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::upstream::kubeconfig::{ExecConfig, UpstreamConfig};

/// How long one run may take before the plugin is killed. Cloud plugins
/// (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`) answer in
/// a second or two; a refresh holds up the requests that need it.
pub(super) const PLUGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// The most stdout read: an ExecCredential with a certificate chain is a
/// few KiB.
pub(super) const MAX_STDOUT: usize = 1 << 20;
/// How much of the end of stderr an error quotes.
const STDERR_TAIL: usize = 1024;

/// The environment variable client-go passes the ExecCredential spec in.
const EXEC_INFO_ENV: &str = "KUBERNETES_EXEC_INFO";

/// Why a run gave no credential. Every message names the kubeconfig user.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The plugin's executable does not exist.
    #[error(
        "exec plugin for kubeconfig user {user:?}: executable {command} not found{}",
        hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    NotFound {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
        /// The kubeconfig's `installHint`.
        hint: Option<String>,
    },
    /// The plugin could not be started.
    #[error("exec plugin for kubeconfig user {user:?}: starting {command}")]
    Spawn {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Its output could not be read.
    #[error("exec plugin for kubeconfig user {user:?}: reading the output of {command}")]
    Io {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// It ran past its deadline and was killed.
    #[error("exec plugin for kubeconfig user {user:?}: {command} did not finish within {timeout:?} and was killed")]
    Timeout {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
        /// The deadline it ran past.
        timeout: Duration,
    },
    /// It wrote more to stdout than a credential needs.
    #[error("exec plugin for kubeconfig user {user:?}: {command} wrote more than {MAX_STDOUT} bytes to stdout")]
    TooMuchOutput {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
    },
    /// It exited with a failure.
    #[error(
        "exec plugin for kubeconfig user {user:?}: {command} failed with {status}{}",
        if stderr.is_empty() { String::new() } else { format!("; stderr: {stderr}") }
    )]
    Failed {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The tail of its stderr.
        stderr: String,
    },
    /// Its output is not a usable ExecCredential.
    #[error("exec plugin for kubeconfig user {user:?}: {command} printed {problem}")]
    BadOutput {
        /// The kubeconfig user.
        user: String,
        /// The plugin's command.
        command: String,
        /// What is wrong with the output.
        problem: String,
    },
}

impl ExecError {
    /// The message without the plugin's stderr: what a client of watchmux
    /// may be told (stderr goes to watchmux's log only).
    pub fn summary(&self) -> String {
        match self {
            Self::Failed { user, command, status, .. } => {
                format!("exec plugin for kubeconfig user {user:?}: {command} failed with {status}")
            }
            other => other.to_string(),
        }
    }
}

/// A client certificate chain and key from a plugin, as PEM, checked when
/// read to parse and to belong together.
pub(crate) struct ClientIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdentity(<redacted>)")
    }
}

impl PartialEq for ClientIdentity {
    fn eq(&self, other: &Self) -> bool {
        self.cert_pem == other.cert_pem && self.key_pem == other.key_pem
    }
}

/// What one run of the plugin gave.
pub(crate) struct Issued {
    pub token: Option<String>,
    pub identity: Option<Arc<ClientIdentity>>,
    /// `expirationTimestamp`: none means valid until the upstream says 401.
    pub expires: Option<SystemTime>,
}

impl std::fmt::Debug for Issued {
    // Hand-written so that the token can never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("identity", &self.identity)
            .field("expires", &self.expires)
            .finish()
    }
}

/// A plugin ready to run: its configuration and the ExecCredential spec it
/// is given.
#[derive(Debug)]
pub(crate) struct ExecPlugin {
    config: ExecConfig,
    /// The JSON for `KUBERNETES_EXEC_INFO`.
    exec_info: String,
    /// Always [`PLUGIN_TIMEOUT`] but in tests that pause time around a
    /// plugin's run (a pending timer would make tokio's paused clock jump).
    timeout: Option<Duration>,
}

impl ExecPlugin {
    pub(crate) fn new(config: &ExecConfig, upstream: &UpstreamConfig) -> Self {
        let exec_info = exec_info(config, upstream).to_string();
        Self { config: config.clone(), exec_info, timeout: Some(PLUGIN_TIMEOUT) }
    }

    /// The kubeconfig user the plugin authenticates as, for logs.
    pub(crate) fn user(&self) -> &str {
        &self.config.user
    }

    #[cfg(test)]
    pub(crate) fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs the plugin once and reads its ExecCredential.
    pub(crate) async fn run(&self) -> Result<Issued, ExecError> {
        let stdout = self.run_for_stdout().await?;
        parse(&stdout, &self.config).map_err(|problem| self.error_bad_output(problem))
    }

    fn command_display(&self) -> String {
        self.config.command.display().to_string()
    }

    fn error_bad_output(&self, problem: String) -> ExecError {
        ExecError::BadOutput { user: self.config.user.clone(), command: self.command_display(), problem }
    }

    async fn run_for_stdout(&self) -> Result<Vec<u8>, ExecError> {
        let (user, command) = (self.config.user.clone(), self.command_display());
        let mut child = tokio::process::Command::new(&self.config.command)
            .args(&self.config.args)
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .env(EXEC_INFO_ENV, &self.exec_info)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // A plugin past its deadline, or whose output is refused, must
            // not linger: dropping the child kills it.
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::NotFound => ExecError::NotFound {
                    user: user.clone(),
                    command: command.clone(),
                    hint: self.config.install_hint.clone(),
                },
                _ => ExecError::Spawn { user: user.clone(), command: command.clone(), source },
            })?;
        let mut out = child.stdout.take().expect("stdout is piped");
        let mut err = child.stderr.take().expect("stderr is piped");
        let io = |source| ExecError::Io { user: user.clone(), command: command.clone(), source };
        let work = async {
            // Too much stdout ends both reads at once: the plugin, blocked
            // on a full pipe, would otherwise hold stderr open until the
            // deadline.
            let (stdout, stderr) =
                tokio::try_join!(read_bounded(&mut out, MAX_STDOUT), read_tail(&mut err, STDERR_TAIL)).map_err(
                    |source| match source.kind() {
                        std::io::ErrorKind::FileTooLarge => {
                            ExecError::TooMuchOutput { user: user.clone(), command: command.clone() }
                        }
                        _ => io(source),
                    },
                )?;
            let status = child.wait().await.map_err(io)?;
            if !status.success() {
                let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
                return Err(ExecError::Failed { user: user.clone(), command: command.clone(), status, stderr });
            }
            Ok(stdout)
        };
        let Some(timeout) = self.timeout else { return work.await };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(ExecError::Timeout { user, command, timeout }),
        }
    }
}

/// Reads to the end; more than `limit` bytes is a `FileTooLarge` error.
async fn read_bounded(r: &mut (impl AsyncRead + Unpin), limit: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let n = r.take(limit as u64 + 1).read_to_end(&mut buf).await?;
    if n > limit {
        return Err(std::io::ErrorKind::FileTooLarge.into());
    }
    Ok(buf)
}

/// Reads to the end, keeping only the last `keep` bytes.
async fn read_tail(r: &mut (impl AsyncRead + Unpin), keep: usize) -> std::io::Result<Vec<u8>> {
    let mut tail = Vec::with_capacity(keep * 2);
    let mut chunk = [0u8; 4096];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(tail);
        }
        tail.extend_from_slice(&chunk[..n]);
        if tail.len() > keep {
            tail.drain(..tail.len() - keep);
        }
    }
}

/// The ExecCredential spec client-go passes: never interactive, and the
/// cluster when `provideClusterInfo` asks for it.
fn exec_info(config: &ExecConfig, upstream: &UpstreamConfig) -> serde_json::Value {
    let mut spec = serde_json::json!({ "interactive": false });
    if config.provide_cluster_info {
        // Field names and omissions as client-go's clientauthentication Cluster.
        let mut cluster = serde_json::json!({ "server": upstream.server.to_string().trim_end_matches('/') });
        if let Some(name) = &upstream.tls_server_name {
            cluster["tls-server-name"] = name.clone().into();
        }
        if upstream.insecure_skip_tls_verify {
            cluster["insecure-skip-tls-verify"] = true.into();
        }
        if let Some(ca) = &upstream.ca_pem {
            cluster["certificate-authority-data"] = base64::engine::general_purpose::STANDARD.encode(ca).into();
        }
        if let Some(extension) = &config.cluster_config {
            cluster["config"] = extension.clone();
        }
        spec["cluster"] = cluster;
    }
    serde_json::json!({ "kind": "ExecCredential", "apiVersion": config.api_version.as_str(), "spec": spec })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredential {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    status: Option<ExecCredentialStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredentialStatus {
    expiration_timestamp: Option<String>,
    #[serde(default)]
    token: String,
    #[serde(default)]
    client_certificate_data: String,
    #[serde(default)]
    client_key_data: String,
}

/// Reads the plugin's stdout with client-go's checks; the error says what
/// was wrong with it (never the credential itself).
fn parse(stdout: &[u8], config: &ExecConfig) -> Result<Issued, String> {
    let cred: ExecCredential =
        serde_json::from_slice(stdout).map_err(|e| format!("output that is not an ExecCredential in JSON ({e})"))?;
    if cred.kind != "ExecCredential" {
        return Err(format!("kind {:?}, not ExecCredential", cred.kind));
    }
    if cred.api_version != config.api_version.as_str() {
        return Err(format!(
            "apiVersion {:?}, but the kubeconfig asks for {}",
            cred.api_version,
            config.api_version.as_str()
        ));
    }
    let status = cred.status.ok_or("an ExecCredential without a status")?;
    if status.token.is_empty() && status.client_certificate_data.is_empty() && status.client_key_data.is_empty() {
        return Err("an ExecCredential with neither a token nor a client certificate and key".into());
    }
    if status.client_certificate_data.is_empty() != status.client_key_data.is_empty() {
        return Err("an ExecCredential with a client certificate or key, not both".into());
    }
    let expires = status
        .expiration_timestamp
        .as_deref()
        .map(|t| parse_rfc3339(t).ok_or_else(|| format!("an expirationTimestamp that is not RFC 3339: {t:?}")))
        .transpose()?;
    let identity = if status.client_certificate_data.is_empty() {
        None
    } else {
        let (cert_pem, key_pem) = (status.client_certificate_data.into_bytes(), status.client_key_data.into_bytes());
        check_key_pair(&cert_pem, &key_pem)?;
        Some(Arc::new(ClientIdentity { cert_pem, key_pem }))
    };
    let token = Some(status.token).filter(|t| !t.is_empty());
    if let Some(t) = &token
        && http::HeaderValue::try_from(format!("Bearer {t}")).is_err()
    {
        return Err("a token that cannot be sent in an HTTP header".into());
    }
    Ok(Issued { token, identity, expires })
}

/// The certificate chain and key parse and belong together, so a bad pair
/// fails here, at the refresh, not in every TLS handshake after it.
pub(super) fn check_key_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("clientCertificateData that is not PEM ({e})"))?;
    if chain.is_empty() {
        return Err("clientCertificateData without a certificate".into());
    }
    let key =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("clientKeyData that is not a PEM key ({e})"))?;
    CertifiedKey::from_der(chain, key, &super::tls::provider())
        .map(drop)
        .map_err(|e| format!("a client certificate and key that do not make a pair ({e})"))
}

/// An RFC 3339 timestamp as Go's `time.RFC3339` layout reads it.
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let (secs, nanos) = crate::go_rules::rfc3339::parse(s)?;
    let base = if secs >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs as u64))?
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))?
    };
    base.checked_add(Duration::from_nanos(nanos.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_as_go_reads_it() {
        let at = |s| parse_rfc3339(s).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64());
        assert_eq!(at("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(at("2026-11-30T19:25:00Z"), Some(1_796_066_700.0));
        assert_eq!(at("2026-11-30T21:25:00+02:00"), Some(1_796_066_700.0));
        assert_eq!(at("2026-11-30T19:25:00.5Z"), Some(1_796_066_700.5));
        assert_eq!(at("2026-11-30T21:25:00.25+02:00"), Some(1_796_066_700.25), "a fraction and an offset");
        assert_eq!(at("2024-02-29T00:00:00Z"), Some(1_709_164_800.0));
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30 19:25:00Z",
            "2026-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2026-11-30T19:25:00",
            "2026-11-30T19:25:00.Z",
            "2026-11-30T19:25:00+0200",
            "2026-11-30T24:00:00Z",
        ] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
    }

    fn leap(y: i64) -> bool {
        (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
    }

    proptest::proptest! {
        /// Any valid timestamp is the seconds a day-by-day count gives.
        #[test]
        fn a_valid_timestamp_is_its_seconds_since_the_epoch(
            y in 1971i64..2400, m in 1i64..=12, d in 1i64..=31, h in 0i64..24, mi in 0i64..60, s in 0i64..60,
            frac in proptest::option::of(0u32..1_000_000_000), off in proptest::option::of(-1439i64..=1439),
        ) {
            proptest::prop_assume!(d <= crate::go_rules::rfc3339::days_in_month(y, m));
            let days = (1970..y).map(|yy| if leap(yy) { 366 } else { 365 }).sum::<i64>()
                + (1..m).map(|mm| crate::go_rules::rfc3339::days_in_month(y, mm)).sum::<i64>() + d - 1;
            let offset = off.unwrap_or(0);
            let expected = days * 86_400 + h * 3600 + mi * 60 + s - offset * 60;
            let zone = match off {
                None => "Z".to_owned(),
                Some(o) => format!("{}{:02}:{:02}", if o < 0 { '-' } else { '+' }, o.abs() / 60, o.abs() % 60),
            };
            let fraction = frac.map(|f| format!(".{f:09}")).unwrap_or_default();
            let text = format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}{zone}");
            let at = parse_rfc3339(&text).unwrap().duration_since(SystemTime::UNIX_EPOCH).unwrap();
            proptest::prop_assert_eq!(at.as_secs() as i64, expected, "{}", text);
            proptest::prop_assert_eq!(at.subsec_nanos(), frac.unwrap_or(0), "{}", text);
        }

        /// Whatever a plugin prints is read or refused, never a panic.
        #[test]
        fn any_output_is_read_or_refused(
            out in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            stamp in "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?([Zz]|[+-][0-9]{2}:?[0-9]{2})?",
        ) {
            let _ = parse(&out, &config(crate::upstream::kubeconfig::ExecApiVersion::V1));
            let _ = parse_rfc3339(&stamp);
            let _ = parse_rfc3339(&String::from_utf8_lossy(&out));
        }
    }

    fn config(api_version: crate::upstream::kubeconfig::ExecApiVersion) -> ExecConfig {
        ExecConfig {
            user: "u".into(),
            command: "p".into(),
            args: vec![],
            env: vec![],
            api_version,
            install_hint: None,
            provide_cluster_info: false,
            cluster_config: None,
        }
    }

    #[test]
    fn output_is_checked_as_client_go_checks_it() {
        use crate::upstream::kubeconfig::ExecApiVersion::{V1, V1beta1};
        let v1 = config(V1);
        let ok = parse(br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#, &v1).unwrap();
        assert_eq!(ok.token.as_deref(), Some("t"));
        assert!(ok.expires.is_some() && ok.identity.is_none());
        let beta =
            br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}"#;
        assert!(parse(beta, &config(V1beta1)).is_ok());
        let cases: [(&[u8], &str); 7] = [
            (beta, "apiVersion"),
            (b"token: t", "not an ExecCredential in JSON"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"Status"}"#, "kind"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#, "without a status"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#, "neither"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientKeyData":"k"}}"#, "not both"),
            (br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"soon"}}"#, "RFC 3339"),
        ];
        for (out, problem) in cases {
            let err = parse(out, &v1).unwrap_err();
            assert!(err.contains(problem), "{err:?} should say {problem:?}");
        }
        let bad_cert = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"x","clientKeyData":"y"}}"#;
        assert!(parse(bad_cert, &v1).unwrap_err().contains("clientCertificateData"));
    }
}
