//! Where the upstream API server is and how to talk to it: kubeconfig files
//! and the in-cluster service-account environment.
//!
//! The resolution order is the one a Kubernetes client user expects: an
//! explicit `--kubeconfig`; otherwise in-cluster configuration when running in
//! a pod; otherwise `$KUBECONFIG` (a list of files, merged, first one wins per
//! entry); otherwise `~/.kube/config`. Paths inside a kubeconfig are relative
//! to the file that names them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use http::Uri;
use serde::Deserialize;

/// Everything needed to reach and authenticate to the upstream API server.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// `https://host:port`, possibly with a path prefix.
    pub server: Uri,
    /// PEM bundle of the cluster's CA certificates; `None` uses no roots
    /// (then `insecure_skip_tls_verify` must be set for HTTPS to work).
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any server certificate (the kubeconfig's `insecure-skip-tls-verify`).
    pub insecure_skip_tls_verify: bool,
    /// Overrides the name checked against the server certificate.
    pub tls_server_name: Option<String>,
    /// PEM client certificate chain and key, for certificate authentication.
    pub client_cert_pem: Option<Vec<u8>>,
    /// The PEM private key of `client_cert_pem`.
    pub client_key_pem: Option<Vec<u8>>,
    /// The files `client_cert_pem` and `client_key_pem` were read from, when
    /// both came from files: they are read again as they rotate.
    pub client_cert_files: Option<ClientCertFiles>,
    /// Credentials sent in the `Authorization` header, if any.
    pub auth: UpstreamAuth,
    /// Where this configuration came from, for logs.
    pub source: String,
}

#[cfg(test)]
impl UpstreamConfig {
    /// A configuration for tests: `server`, no TLS material, no credentials.
    pub(crate) fn for_test(server: &str) -> Self {
        Self {
            server: server.parse().expect("a test server URI"),
            ca_pem: None,
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            client_cert_pem: None,
            client_key_pem: None,
            client_cert_files: None,
            auth: UpstreamAuth::None,
            source: "test".into(),
        }
    }
}

impl std::fmt::Debug for UpstreamConfig {
    // Hand-written so that key material can never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("server", &self.server)
            .field("ca", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("tls_server_name", &self.tls_server_name)
            .field("client_cert", &self.client_cert_pem.is_some())
            .field("auth", &self.auth)
            .field("source", &self.source)
            .finish()
    }
}

/// The paths of a client certificate and its key (often the same file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertFiles {
    /// The PEM certificate chain (the kubeconfig's `client-certificate`).
    pub cert: PathBuf,
    /// The PEM private key (the kubeconfig's `client-key`).
    pub key: PathBuf,
}

/// How watchmux authenticates itself to the upstream, beyond a client certificate.
#[derive(Clone, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// No `Authorization` header (a client certificate may still authenticate).
    None,
    /// A fixed bearer token.
    Token(String),
    /// A bearer token read from a file and re-read as it rotates (projected
    /// service-account tokens are replaced on disk well before they expire).
    TokenFile(PathBuf),
    /// HTTP basic authentication, for API servers that still accept it.
    Basic {
        /// The kubeconfig's `username`.
        username: String,
        /// The kubeconfig's `password`.
        password: String,
    },
    /// A client-go credential plugin, run for a token or a client certificate.
    Exec(Box<ExecConfig>),
}

/// A kubeconfig user's `exec` credential plugin, validated and with its
/// command resolved as client-go resolves it.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// The kubeconfig user's name, for errors.
    pub user: String,
    /// A bare name is looked up in `$PATH`; one with a `/` was made absolute
    /// against the kubeconfig's directory.
    pub command: PathBuf,
    /// The arguments it is run with.
    pub args: Vec<String>,
    /// Added to watchmux's own environment.
    pub env: Vec<(String, String)>,
    /// The ExecCredential version it speaks.
    pub api_version: ExecApiVersion,
    /// Shown when the command is not found (`installHint`).
    pub install_hint: Option<String>,
    /// Pass the cluster (server, CA, ...) in `KUBERNETES_EXEC_INFO`.
    pub provide_cluster_info: bool,
    /// The cluster's `client.authentication.k8s.io/exec` extension, passed
    /// as the cluster's `config` when `provide_cluster_info` is set.
    pub cluster_config: Option<serde_json::Value>,
}

impl std::fmt::Debug for ExecConfig {
    // Plugins take secrets through their environment; only the names show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecConfig")
            .field("user", &self.user)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("api_version", &self.api_version)
            .field("provide_cluster_info", &self.provide_cluster_info)
            .finish_non_exhaustive()
    }
}

/// The ExecCredential versions client-go still speaks (v1alpha1 is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecApiVersion {
    /// `client.authentication.k8s.io/v1`.
    V1,
    /// `client.authentication.k8s.io/v1beta1`.
    V1beta1,
}

impl ExecApiVersion {
    /// The apiVersion as written in kubeconfigs and ExecCredentials.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "client.authentication.k8s.io/v1",
            Self::V1beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }
}

impl std::fmt::Debug for UpstreamAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::TokenFile(p) => f.debug_tuple("TokenFile").field(p).finish(),
            Self::Basic { username, .. } => f.debug_struct("Basic").field("username", username).finish_non_exhaustive(),
            Self::Exec(exec) => f.debug_tuple("Exec").field(exec).finish(),
        }
    }
}

/// Why the upstream could not be resolved; each variant's message says it.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// A kubeconfig file or credential file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.

        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    #[error("parsing kubeconfig {path}")]
    /// A kubeconfig file is not valid YAML of the expected shape.
    Parse {
        /// The file.
        path: PathBuf,
        /// The YAML error.
        /// The underlying error.
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("no kubeconfig found: not in a cluster, $KUBECONFIG unset and {0} missing")]
    /// No kubeconfig anywhere a client looks, and not in a cluster.
    NotFound(PathBuf),
    /// `$KUBECONFIG` is set, none of its files exists, and there is no
    /// in-cluster account to fall back on (`~/.kube/config` is not read
    /// then, as client-go's loading rules do not read it).
    #[error("$KUBECONFIG is set ({0:?}) but none of its files exists, and not in a cluster")]
    KubeconfigEnvMissing(String),
    /// `--context` with the in-cluster configuration, which has no contexts.
    #[error(
        "--context {0:?} names a kubeconfig context, but no kubeconfig is used (in-cluster service account); give --kubeconfig too, or drop --context"
    )]
    ContextInCluster(String),
    #[error("kubeconfig has no context {0:?}")]
    /// `--context` names a context the kubeconfig lacks.
    NoContext(String),
    #[error("kubeconfig sets no current-context and no --context was given")]
    /// Neither `current-context` nor `--context`.
    NoCurrentContext,
    #[error("kubeconfig context {context:?} names cluster {cluster:?}, which it does not define")]
    /// The context names a cluster the kubeconfig lacks.
    NoCluster {
        /// The context.
        context: String,
        /// The cluster it names.
        cluster: String,
    },
    #[error("kubeconfig context {context:?} names user {user:?}, which it does not define")]
    /// The context names a user the kubeconfig lacks.
    NoUser {
        /// The context.
        context: String,
        /// The user it names.
        user: String,
    },
    #[error("invalid server URL {server:?}")]
    /// The cluster's `server` is not a URL.
    Server {
        /// The value as written.
        server: String,
        /// Why it does not parse.
        /// The underlying error.
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("decoding base64 field {field}")]
    /// A `*-data` field is not valid base64.
    Base64 {
        /// The kubeconfig field.
        field: &'static str,
        /// The decoding error.
        /// The underlying error.
        #[source]
        source: base64::DecodeError,
    },
    #[error("in-cluster configuration: {0}")]
    /// In a pod, but the service-account files or environment are incomplete.
    InCluster(String),
    /// The exec plugin's apiVersion is not one client-go speaks.
    #[error(
        "kubeconfig user {user:?}: exec plugin apiVersion {api_version:?} is not client.authentication.k8s.io/v1 or v1beta1"
    )]
    ExecApiVersion {
        /// The kubeconfig user.
        user: String,
        /// The apiVersion as written.
        api_version: String,
    },
    /// The exec plugin names no command.
    #[error("kubeconfig user {user:?}: exec plugin has no command")]
    ExecNoCommand {
        /// The kubeconfig user.
        user: String,
    },
    /// v1 requires `interactiveMode`.
    #[error("kubeconfig user {user:?}: exec plugin interactiveMode must be set for client.authentication.k8s.io/v1")]
    ExecNoInteractiveMode {
        /// The kubeconfig user.
        user: String,
    },
    /// `interactiveMode: Always`, which watchmux cannot honour.
    #[error(
        "kubeconfig user {user:?}: exec plugin interactiveMode is Always, but watchmux has no terminal and never \
         runs a plugin interactively: use a plugin configuration that can run unattended (Never or IfAvailable)"
    )]
    ExecAlwaysInteractive {
        /// The kubeconfig user.
        user: String,
    },
    /// An unknown `interactiveMode`.
    #[error("kubeconfig user {user:?}: invalid exec plugin interactiveMode {mode:?}")]
    ExecInteractiveMode {
        /// The kubeconfig user.
        user: String,
        /// The mode as written.
        mode: String,
    },
}

/// Resolves the upstream as a Kubernetes client would.
///
/// `explicit` is `--kubeconfig`, `context` is `--context`.
pub fn resolve(explicit: Option<&Path>, context: Option<&str>) -> Result<UpstreamConfig, KubeconfigError> {
    resolve_with(explicit, context, &Env::from_process())
}

/// The parts of the process environment resolution depends on, separated so
/// tests can supply their own.
#[derive(Debug, Default, Clone)]
pub(crate) struct Env {
    pub kubeconfig: Option<String>,
    pub home: Option<PathBuf>,
    pub service_host: Option<String>,
    pub service_port: Option<String>,
    pub service_account_dir: PathBuf,
}

impl Env {
    pub(crate) fn from_process() -> Self {
        Self {
            kubeconfig: std::env::var("KUBECONFIG").ok().filter(|s| !s.is_empty()),
            home: std::env::var_os("HOME").map(PathBuf::from),
            service_host: std::env::var("KUBERNETES_SERVICE_HOST").ok().filter(|s| !s.is_empty()),
            service_port: std::env::var("KUBERNETES_SERVICE_PORT").ok().filter(|s| !s.is_empty()),
            service_account_dir: PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount"),
        }
    }
}

/// [`resolve`] against the given environment.
pub(crate) fn resolve_with(
    explicit: Option<&Path>,
    context: Option<&str>,
    env: &Env,
) -> Result<UpstreamConfig, KubeconfigError> {
    // controller-runtime's order: --kubeconfig, $KUBECONFIG, in-cluster,
    // ~/.kube/config. $KUBECONFIG set inside a pod is meant, not a fallback.
    if let Some(path) = explicit {
        return from_files(&[path.to_path_buf()], context);
    }
    if let Some(list) = &env.kubeconfig {
        let paths: Vec<PathBuf> = std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()).collect();
        // As kubectl does, entries in $KUBECONFIG that do not exist are skipped.
        let existing: Vec<PathBuf> = paths.into_iter().filter(|p| p.exists()).collect();
        if !existing.is_empty() {
            return from_files(&existing, context);
        }
        // None exists: client-go's deferred loader falls back on the
        // in-cluster account when it has one, and on nothing else.
        return match (&env.service_host, &env.service_port) {
            (Some(host), Some(port)) if context.is_none() => in_cluster(host, port, &env.service_account_dir),
            (Some(_), Some(_)) => Err(KubeconfigError::ContextInCluster(context.unwrap_or_default().to_owned())),
            _ => Err(KubeconfigError::KubeconfigEnvMissing(list.clone())),
        };
    }
    if let (Some(host), Some(port)) = (&env.service_host, &env.service_port) {
        // The in-cluster account has no contexts: a --context would be
        // silently ignored, so it is refused.
        if let Some(context) = context {
            return Err(KubeconfigError::ContextInCluster(context.to_owned()));
        }
        return in_cluster(host, port, &env.service_account_dir);
    }
    let default = env.home.clone().unwrap_or_default().join(".kube").join("config");
    if default.exists() {
        return from_files(&[default], context);
    }
    Err(KubeconfigError::NotFound(default))
}

fn in_cluster(host: &str, port: &str, sa_dir: &Path) -> Result<UpstreamConfig, KubeconfigError> {
    let token = sa_dir.join("token");
    if !token.exists() {
        return Err(KubeconfigError::InCluster(format!("{} is missing", token.display())));
    }
    let ca_path = sa_dir.join("ca.crt");
    let ca_pem = std::fs::read(&ca_path).map_err(|source| KubeconfigError::Read { path: ca_path, source })?;
    // An IPv6 service host must be bracketed in a URL.
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    let server = format!("https://{host}:{port}");
    Ok(UpstreamConfig {
        server: server.parse().map_err(|source| KubeconfigError::Server { server, source })?,
        ca_pem: Some(ca_pem),
        insecure_skip_tls_verify: false,
        tls_server_name: None,
        client_cert_pem: None,
        client_key_pem: None,
        client_cert_files: None,
        auth: UpstreamAuth::TokenFile(token),
        source: "in-cluster service account".into(),
    })
}

#[derive(Debug, Default, Deserialize)]
struct Kubeconfig {
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
    #[serde(default)]
    extensions: Vec<NamedExtension>,
}

#[derive(Debug, Deserialize)]
struct NamedExtension {
    name: String,
    extension: Option<serde_json::Value>,
}

/// The name of the cluster extension client-go passes to exec plugins.
const EXEC_CLUSTER_EXTENSION: &str = "client.authentication.k8s.io/exec";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
    exec: Option<Exec>,
}

/// `users[].user.exec`, as written (camelCase, unlike the rest of the user).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Exec {
    #[serde(default)]
    command: String,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<ExecEnvVar>>,
    #[serde(default)]
    api_version: String,
    install_hint: Option<String>,
    #[serde(default)]
    provide_cluster_info: bool,
    interactive_mode: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ExecEnvVar {
    name: String,
    #[serde(default)]
    value: String,
}

#[derive(Debug, Default, Deserialize)]
struct Context {
    cluster: String,
    user: Option<String>,
}

/// A cluster, user or context entry and the directory its relative paths
/// are resolved against.
struct Located<'a, T> {
    value: &'a T,
    dir: &'a Path,
}

fn from_files(paths: &[PathBuf], context: Option<&str>) -> Result<UpstreamConfig, KubeconfigError> {
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read(path).map_err(|source| KubeconfigError::Read { path: path.clone(), source })?;
        let parsed: Kubeconfig = if text.iter().all(u8::is_ascii_whitespace) {
            Kubeconfig::default()
        } else {
            serde_yaml_ng::from_slice(&text).map_err(|source| KubeconfigError::Parse { path: path.clone(), source })?
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        files.push((parsed, dir));
    }
    let source = paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(":");

    // Merge: the first file that defines a name wins, as in client-go.
    let mut clusters: HashMap<&str, Located<Cluster>> = HashMap::new();
    let mut users: HashMap<&str, Located<User>> = HashMap::new();
    let mut contexts: HashMap<&str, &Context> = HashMap::new();
    let mut current = None;
    for (file, dir) in &files {
        current = current.or(file.current_context.as_deref().filter(|c| !c.is_empty()));
        for c in &file.clusters {
            if let Some(value) = &c.value {
                clusters.entry(&c.name).or_insert(Located { value, dir });
            }
        }
        for u in &file.users {
            if let Some(value) = &u.value {
                users.entry(&u.name).or_insert(Located { value, dir });
            }
        }
        for c in &file.contexts {
            if let Some(value) = &c.value {
                contexts.entry(&c.name).or_insert(value);
            }
        }
    }

    let context_name = context.or(current).ok_or(KubeconfigError::NoCurrentContext)?;
    let ctx = contexts.get(context_name).ok_or_else(|| KubeconfigError::NoContext(context_name.into()))?;
    let cluster = clusters
        .get(ctx.cluster.as_str())
        .ok_or_else(|| KubeconfigError::NoCluster { context: context_name.into(), cluster: ctx.cluster.clone() })?;
    let user = match &ctx.user {
        Some(name) if !name.is_empty() => Some((
            name.as_str(),
            users
                .get(name.as_str())
                .ok_or_else(|| KubeconfigError::NoUser { context: context_name.into(), user: name.clone() })?,
        )),
        _ => None,
    };

    let server = cluster.value.server.clone();
    let mut cfg = UpstreamConfig {
        server: server.parse().map_err(|source| KubeconfigError::Server { server: server.clone(), source })?,
        ca_pem: data_or_file(
            "certificate-authority-data",
            cluster.value.certificate_authority_data.as_deref(),
            cluster.value.certificate_authority.as_deref(),
            cluster.dir,
        )?,
        insecure_skip_tls_verify: cluster.value.insecure_skip_tls_verify,
        tls_server_name: cluster.value.tls_server_name.clone(),
        client_cert_pem: None,
        client_key_pem: None,
        client_cert_files: None,
        auth: UpstreamAuth::None,
        source: format!("kubeconfig {source}, context {context_name}"),
    };
    if let Some((user_name, user)) = user {
        let u = user.value;
        cfg.client_cert_pem = data_or_file(
            "client-certificate-data",
            u.client_certificate_data.as_deref(),
            u.client_certificate.as_deref(),
            user.dir,
        )?;
        cfg.client_key_pem =
            data_or_file("client-key-data", u.client_key_data.as_deref(), u.client_key.as_deref(), user.dir)?;
        // Inline data wins over a file (data_or_file), so the pair rotates
        // only when both halves came from files.
        let file = |data: Option<&str>, file: Option<&Path>| {
            file.filter(|f| data.is_none_or(str::is_empty) && !f.as_os_str().is_empty()).map(|f| user.dir.join(f))
        };
        cfg.client_cert_files = match (
            file(u.client_certificate_data.as_deref(), u.client_certificate.as_deref()),
            file(u.client_key_data.as_deref(), u.client_key.as_deref()),
        ) {
            (Some(cert), Some(key)) => Some(ClientCertFiles { cert, key }),
            _ => None,
        };
        // As in client-go, a token file wins over an inline token: it is the
        // one that rotates.
        cfg.auth = if let Some(file) = &u.token_file {
            UpstreamAuth::TokenFile(user.dir.join(file))
        } else if let Some(token) = u.token.as_ref().filter(|t| !t.is_empty()) {
            UpstreamAuth::Token(token.clone())
        } else if let (Some(username), Some(password)) = (&u.username, &u.password) {
            UpstreamAuth::Basic { username: username.clone(), password: password.clone() }
        } else if let Some(exec) = u.exec.as_ref().filter(|_| cfg.client_cert_pem.is_none()) {
            // As in client-go, a plugin only runs when the user has no other
            // credential: a token, basic auth or a client certificate wins.
            let cluster_config = cluster
                .value
                .extensions
                .iter()
                .find(|e| e.name == EXEC_CLUSTER_EXTENSION)
                .and_then(|e| e.extension.clone());
            UpstreamAuth::Exec(Box::new(exec_config(user_name, exec, user.dir, cluster_config)?))
        } else {
            UpstreamAuth::None
        };
    }
    Ok(cfg)
}

/// Validates a user's `exec` as client-go does at load time, and refuses
/// what an unattended proxy can never do: a plugin that must be interactive.
fn exec_config(
    user: &str,
    exec: &Exec,
    dir: &Path,
    cluster_config: Option<serde_json::Value>,
) -> Result<ExecConfig, KubeconfigError> {
    let user = user.to_owned();
    let api_version = match exec.api_version.as_str() {
        "client.authentication.k8s.io/v1" => ExecApiVersion::V1,
        "client.authentication.k8s.io/v1beta1" => ExecApiVersion::V1beta1,
        other => return Err(KubeconfigError::ExecApiVersion { user, api_version: other.into() }),
    };
    if exec.command.is_empty() {
        return Err(KubeconfigError::ExecNoCommand { user });
    }
    // v1beta1 defaults to IfAvailable; v1 must say (client-go's defaulting
    // and validation). watchmux never has a terminal, so IfAvailable runs
    // without stdin, as Never does.
    match (exec.interactive_mode.as_deref().filter(|m| !m.is_empty()), api_version) {
        (None, ExecApiVersion::V1) => return Err(KubeconfigError::ExecNoInteractiveMode { user }),
        (None, ExecApiVersion::V1beta1) | (Some("Never" | "IfAvailable"), _) => {}
        (Some("Always"), _) => return Err(KubeconfigError::ExecAlwaysInteractive { user }),
        (Some(other), _) => return Err(KubeconfigError::ExecInteractiveMode { user, mode: other.into() }),
    }
    // client-go resolves a command against the kubeconfig's directory only
    // when it names a path; a bare name is looked up in $PATH when run.
    let command = PathBuf::from(&exec.command);
    let command = if exec.command.contains('/') { dir.join(command) } else { command };
    Ok(ExecConfig {
        user,
        command,
        args: exec.args.clone().unwrap_or_default(),
        env: exec.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone())).collect(),
        api_version,
        install_hint: exec.install_hint.clone().filter(|h| !h.is_empty()),
        provide_cluster_info: exec.provide_cluster_info,
        cluster_config,
    })
}

/// Inline base64 data wins over a file path, as in client-go.
fn data_or_file(
    field: &'static str,
    data: Option<&str>,
    file: Option<&Path>,
    dir: &Path,
) -> Result<Option<Vec<u8>>, KubeconfigError> {
    if let Some(data) = data.filter(|d| !d.is_empty()) {
        let compact: String = data.split_ascii_whitespace().collect();
        return base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map(Some)
            .map_err(|source| KubeconfigError::Base64 { field, source });
    }
    match file.filter(|f| !f.as_os_str().is_empty()) {
        Some(file) => {
            let path = dir.join(file);
            std::fs::read(&path).map(Some).map_err(|source| KubeconfigError::Read { path, source })
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const TWO_CONTEXTS: &str = r#"
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: ca
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: certs/ca.pem
- name: cb
  cluster:
    server: https://b.example:443/prefix
    certificate-authority-data: aGVsbG8=
    insecure-skip-tls-verify: true
    tls-server-name: kubernetes
users:
- name: ua
  user:
    token: secret-a
- name: ub
  user:
    tokenFile: tok
    token: ignored-inline
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
contexts:
- name: a
  context: {cluster: ca, user: ua}
- name: b
  context: {cluster: cb, user: ub}
"#;

    #[test]
    fn current_context_with_relative_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("certs")).unwrap();
        write(&dir.path().join("certs"), "ca.pem", "PEM");
        let kc = write(dir.path(), "config", TWO_CONTEXTS);
        let cfg = resolve_with(Some(&kc), None, &Env::default()).unwrap();
        assert_eq!(cfg.server, "https://127.0.0.1:6443");
        assert_eq!(cfg.ca_pem.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(cfg.auth, UpstreamAuth::Token("secret-a".into()));
        assert!(!cfg.insecure_skip_tls_verify);
    }

    #[test]
    fn explicit_context_with_inline_data_and_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let kc = write(dir.path(), "config", TWO_CONTEXTS);
        let cfg = resolve_with(Some(&kc), Some("b"), &Env::default()).unwrap();
        assert_eq!(cfg.server.path(), "/prefix");
        assert_eq!(cfg.ca_pem.as_deref(), Some(&b"hello"[..]));
        assert_eq!(cfg.client_cert_pem.as_deref(), Some(&b"cert"[..]));
        assert_eq!(cfg.client_key_pem.as_deref(), Some(&b"key"[..]));
        assert!(cfg.insecure_skip_tls_verify);
        assert_eq!(cfg.tls_server_name.as_deref(), Some("kubernetes"));
        assert_eq!(cfg.auth, UpstreamAuth::TokenFile(dir.path().join("tok")));
    }

    #[test]
    fn unknown_context_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let kc = write(dir.path(), "config", TWO_CONTEXTS);
        let err = resolve_with(Some(&kc), Some("nope"), &Env::default()).unwrap_err();
        assert!(matches!(err, KubeconfigError::NoContext(ref c) if c == "nope"), "{err}");
    }

    #[test]
    fn kubeconfig_env_list_merges_first_wins_and_skips_missing() {
        let dir = tempfile::tempdir().unwrap();
        let first = write(
            dir.path(),
            "first",
            "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: one}\n",
        );
        let second = write(
            dir.path(),
            "second",
            "current-context: y\nclusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1'}\nusers:\n- name: u\n  user: {token: two}\n",
        );
        let missing = dir.path().join("missing");
        let list = std::env::join_paths([&missing, &first, &second]).unwrap();
        let env = Env { kubeconfig: Some(list.into_string().unwrap()), ..Env::default() };
        let cfg = resolve_with(None, None, &env).unwrap();
        assert_eq!(cfg.server, "https://10.0.0.1");
        assert_eq!(cfg.auth, UpstreamAuth::Token("one".into()));
    }

    #[test]
    fn in_cluster_comes_after_kubeconfig_env_and_uses_rotating_token() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "token", "t");
        write(dir.path(), "ca.crt", "CA");
        let env = Env {
            service_host: Some("fd00::1".into()),
            service_port: Some("443".into()),
            service_account_dir: dir.path().to_path_buf(),
            home: Some(dir.path().to_path_buf()),
            ..Env::default()
        };
        let cfg = resolve_with(None, None, &env).unwrap();
        assert_eq!(cfg.server, "https://[fd00::1]:443");
        assert_eq!(cfg.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert_eq!(cfg.auth, UpstreamAuth::TokenFile(dir.path().join("token")));
        // $KUBECONFIG inside a pod is what the operator meant (controller-runtime's order).
        let kc = write(
            dir.path(),
            "kc",
            "current-context: k\ncontexts:\n- name: k\n  context: {cluster: c}\nclusters:\n- name: c\n  cluster: {server: 'https://10.9.9.9'}\n",
        );
        let with_env = Env { kubeconfig: Some(kc.display().to_string()), ..env.clone() };
        assert_eq!(resolve_with(None, None, &with_env).unwrap().server, "https://10.9.9.9");
        // ...and when none of its files exists, the in-cluster account is
        // the fallback (client-go's deferred loader), ~/.kube/config never.
        let missing = Env { kubeconfig: Some("/nonexistent".into()), ..env.clone() };
        assert_eq!(resolve_with(None, None, &missing).unwrap().server, "https://[fd00::1]:443");
        let nowhere = Env { service_host: None, service_port: None, ..missing.clone() };
        std::fs::create_dir_all(dir.path().join(".kube")).unwrap();
        std::fs::copy(&kc, dir.path().join(".kube").join("config")).unwrap();
        assert!(matches!(resolve_with(None, None, &nowhere), Err(KubeconfigError::KubeconfigEnvMissing(_))));
        // --context cannot apply to the in-cluster account: refused, not ignored.
        let err = resolve_with(None, Some("prod"), &env).unwrap_err();
        assert!(matches!(&err, KubeconfigError::ContextInCluster(c) if c == "prod"), "{err}");
        // With --kubeconfig, the context applies to it as ever.
        assert_eq!(resolve_with(Some(&kc), Some("k"), &env).unwrap().server, "https://10.9.9.9");
    }

    #[test]
    fn home_default_is_last_and_missing_everything_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env { home: Some(dir.path().to_path_buf()), ..Env::default() };
        assert!(matches!(resolve_with(None, None, &env), Err(KubeconfigError::NotFound(_))));
        std::fs::create_dir(dir.path().join(".kube")).unwrap();
        write(
            &dir.path().join(".kube"),
            "config",
            "current-context: h\ncontexts:\n- name: h\n  context: {cluster: c}\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:8080'}\n",
        );
        let cfg = resolve_with(None, None, &env).unwrap();
        assert_eq!(cfg.server, "http://127.0.0.1:8080");
        assert_eq!(cfg.auth, UpstreamAuth::None);
    }

    fn exec_user(exec: &str) -> String {
        format!(
            "current-context: x\ncontexts:\n- name: x\n  context: {{cluster: c, user: eks}}\n\
             clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1\n    extensions:\n\
             \x20   - name: client.authentication.k8s.io/exec\n      extension: {{audience: kube}}\n\
             users:\n- name: eks\n  user:\n    exec: {exec}\n"
        )
    }

    fn resolve_exec(dir: &Path, exec: &str) -> Result<UpstreamConfig, KubeconfigError> {
        let kc = write(dir, "config", &exec_user(exec));
        resolve_with(Some(&kc), None, &Env::default())
    }

    #[test]
    fn exec_plugin_is_read_with_a_path_command_relative_to_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = resolve_exec(
            dir.path(),
            "{apiVersion: client.authentication.k8s.io/v1, command: bin/plugin, args: [a, b], \
             env: [{name: K, value: s3cret}], interactiveMode: Never, provideClusterInfo: true, installHint: get it}",
        )
        .unwrap();
        let UpstreamAuth::Exec(exec) = cfg.auth else { panic!("{:?}", cfg.auth) };
        assert_eq!(exec.user, "eks");
        assert_eq!(exec.command, dir.path().join("bin/plugin"));
        assert_eq!(exec.args, ["a", "b"]);
        assert_eq!(exec.env, [("K".to_owned(), "s3cret".to_owned())]);
        assert_eq!(exec.api_version, ExecApiVersion::V1);
        assert!(exec.provide_cluster_info);
        assert_eq!(exec.install_hint.as_deref(), Some("get it"));
        assert_eq!(exec.cluster_config, Some(serde_json::json!({"audience": "kube"})));
        assert!(!format!("{exec:?}").contains("s3cret"), "env values stay out of logs");

        // A bare name is looked up in $PATH when run, as client-go does.
        let cfg = resolve_exec(dir.path(), "{apiVersion: client.authentication.k8s.io/v1beta1, command: aws}").unwrap();
        let UpstreamAuth::Exec(exec) = cfg.auth else { panic!() };
        assert_eq!(exec.command, Path::new("aws"));
        assert_eq!(exec.api_version, ExecApiVersion::V1beta1, "v1beta1 defaults interactiveMode to IfAvailable");
    }

    #[test]
    fn exec_plugins_watchmux_cannot_run_are_refused_naming_the_user() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("{apiVersion: client.authentication.k8s.io/v1, command: p}", "interactiveMode must be set"),
            (
                "{apiVersion: client.authentication.k8s.io/v1, command: p, interactiveMode: Always}",
                "never runs a plugin interactively",
            ),
            ("{apiVersion: client.authentication.k8s.io/v1, command: p, interactiveMode: Sometimes}", "Sometimes"),
            ("{apiVersion: client.authentication.k8s.io/v1alpha1, command: p}", "v1alpha1"),
            ("{apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never}", "no command"),
        ];
        for (exec, says) in cases {
            let err = resolve_exec(dir.path(), exec).unwrap_err().to_string();
            assert!(err.contains("user \"eks\"") && err.contains(says), "{exec}: {err}");
        }
    }

    #[test]
    fn a_token_or_client_certificate_wins_over_an_exec_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let exec = "{apiVersion: client.authentication.k8s.io/v1, command: p, interactiveMode: Never}";
        let with = |extra: &str| {
            let text = exec_user(exec).replace("    exec:", &format!("    {extra}\n    exec:"));
            let kc = write(dir.path(), "config", &text);
            resolve_with(Some(&kc), None, &Env::default()).unwrap()
        };
        assert_eq!(with("token: t").auth, UpstreamAuth::Token("t".into()));
        let cert = with("client-certificate-data: Y2VydA==\n    client-key-data: a2V5");
        assert_eq!(cert.auth, UpstreamAuth::None);
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let cfg = UpstreamConfig {
            client_cert_pem: Some(b"CERT".to_vec()),
            client_key_pem: Some(b"PRIVATE-KEY".to_vec()),
            auth: UpstreamAuth::Basic { username: "u".into(), password: "hunter2".into() },
            ..UpstreamConfig::for_test("https://x")
        };
        let shown = format!("{cfg:?} {:?}", UpstreamAuth::Token("tok-123".into()));
        for secret in ["PRIVATE-KEY", "hunter2", "tok-123"] {
            assert!(!shown.contains(secret), "{secret} leaked: {shown}");
        }
    }
}

#[cfg(test)]
mod fuzz;
