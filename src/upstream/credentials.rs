//! The `Authorization` header watchmux sends upstream, including bearer
//! tokens read from a file that rotates underneath it, and the credentials
//! of an exec plugin (a token, a client certificate, or both).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http::HeaderValue;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::exec::{ExecError, ExecPlugin};
use super::exec_cache::{ExecCredentials, IssuedCredential};
use crate::upstream::kubeconfig::{UpstreamAuth, UpstreamConfig};

/// How long a token read from a file is used before the file is read again.
///
/// Projected service-account tokens are rewritten by the kubelet when 80% of
/// their lifetime has passed (at least hours), so re-reading every few seconds
/// picks a new token up long before the old one expires, at the cost of one
/// small read per interval on the request path.
pub(crate) const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("reading token file {path}")]
    ReadTokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("token file {0} is empty")]
    EmptyTokenFile(PathBuf),
    #[error("the token is not a valid HTTP header value")]
    InvalidToken,
}

/// Produces the `Authorization` header for upstream requests.
#[derive(Debug)]
pub(crate) enum CredentialSource {
    None,
    Fixed(HeaderValue),
    TokenFile { path: PathBuf, cached: Mutex<(HeaderValue, Instant)> },
    Exec(Arc<ExecCredentials>),
}

/// What one request goes upstream with as watchmux.
#[derive(Debug, Default)]
pub(crate) struct WatchmuxAuth {
    pub authorization: Option<HeaderValue>,
    /// The exec plugin's credential, when that is where it came from: its
    /// client certificate, and what a 401 names.
    pub exec: Option<Arc<IssuedCredential>>,
}

impl CredentialSource {
    /// `cfg` is the upstream an exec plugin is told about.
    pub(crate) fn new(auth: &UpstreamAuth, cfg: &UpstreamConfig) -> Result<Self, CredentialsError> {
        Ok(match auth {
            UpstreamAuth::Exec(exec) => Self::Exec(ExecCredentials::new(ExecPlugin::new(exec, cfg))),
            UpstreamAuth::None => Self::None,
            UpstreamAuth::Token(token) => Self::Fixed(bearer(token)?),
            UpstreamAuth::Basic { username, password } => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
                Self::Fixed(sensitive(format!("Basic {encoded}"))?)
            }
            UpstreamAuth::TokenFile(path) => {
                let header = read_token_file(path)?;
                Self::TokenFile { path: path.clone(), cached: Mutex::new((header, Instant::now())) }
            }
        })
    }

    /// The credentials to send now: the exec plugin's current ones (run
    /// if none is usable), or [`Self::authorization`].
    pub(crate) async fn watchmux_auth(&self) -> Result<WatchmuxAuth, Arc<ExecError>> {
        match self {
            Self::Exec(exec) => {
                let credential = exec.current().await?;
                Ok(WatchmuxAuth { authorization: credential.authorization.clone(), exec: Some(credential) })
            }
            other => Ok(WatchmuxAuth { authorization: other.authorization(), exec: None }),
        }
    }

    /// Tells the exec plugin's cache that the upstream answered 401 to `own`.
    pub(crate) fn unauthorized(&self, own: &WatchmuxAuth) {
        if let (Self::Exec(exec), Some(credential)) = (self, &own.exec) {
            exec.unauthorized(credential);
        }
    }

    /// The header to send now, re-reading a token file when it is due. A
    /// failed re-read keeps the previous token: it is likely still valid, and
    /// the upstream's 401 will say so if not. An exec plugin's token comes
    /// from [`Self::watchmux_auth`] instead.
    fn authorization(&self) -> Option<HeaderValue> {
        match self {
            Self::None | Self::Exec(_) => None,
            Self::Fixed(h) => Some(h.clone()),
            Self::TokenFile { path, cached } => {
                let mut cached = cached.lock();
                if cached.1.elapsed() >= TOKEN_FILE_REFRESH {
                    match read_token_file(path) {
                        Ok(header) => cached.0 = header,
                        Err(err) => tracing::warn!(error = %err, "keeping the previous upstream token"),
                    }
                    cached.1 = Instant::now();
                }
                Some(cached.0.clone())
            }
        }
    }
}

fn read_token_file(path: &PathBuf) -> Result<HeaderValue, CredentialsError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| CredentialsError::ReadTokenFile { path: path.clone(), source })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(CredentialsError::EmptyTokenFile(path.clone()));
    }
    bearer(token)
}

fn bearer(token: &str) -> Result<HeaderValue, CredentialsError> {
    sensitive(format!("Bearer {token}"))
}

/// A header value marked sensitive, so HTTP/2 never puts it in its
/// compression table and `Debug` never prints it.
fn sensitive(value: String) -> Result<HeaderValue, CredentialsError> {
    let mut v = HeaderValue::try_from(value).map_err(|_| CredentialsError::InvalidToken)?;
    v.set_sensitive(true);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_cfg() -> UpstreamConfig {
        UpstreamConfig::for_test("https://127.0.0.1:6443")
    }

    #[tokio::test(start_paused = true)]
    async fn token_file_is_reread_after_the_refresh_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let creds = CredentialSource::new(&UpstreamAuth::TokenFile(path.clone()), &test_cfg()).unwrap();
        assert_eq!(creds.authorization().unwrap(), "Bearer first");

        std::fs::write(&path, "second").unwrap();
        tokio::time::advance(TOKEN_FILE_REFRESH / 2).await;
        assert_eq!(creds.authorization().unwrap(), "Bearer first", "re-read too early");

        tokio::time::advance(TOKEN_FILE_REFRESH).await;
        assert_eq!(creds.authorization().unwrap(), "Bearer second");
    }

    #[tokio::test(start_paused = true)]
    async fn vanished_token_file_keeps_the_last_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "kept").unwrap();
        let creds = CredentialSource::new(&UpstreamAuth::TokenFile(path.clone()), &test_cfg()).unwrap();
        std::fs::remove_file(&path).unwrap();
        tokio::time::advance(TOKEN_FILE_REFRESH * 2).await;
        assert_eq!(creds.authorization().unwrap(), "Bearer kept");
    }

    #[test]
    fn empty_token_file_is_an_error_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  \n").unwrap();
        assert!(matches!(
            CredentialSource::new(&UpstreamAuth::TokenFile(path), &test_cfg()),
            Err(CredentialsError::EmptyTokenFile(_))
        ));
    }

    #[test]
    fn basic_auth_and_sensitivity() {
        let creds =
            CredentialSource::new(&UpstreamAuth::Basic { username: "u".into(), password: "p".into() }, &test_cfg())
                .unwrap();
        let h = creds.authorization().unwrap();
        assert_eq!(h, "Basic dTpw");
        assert!(h.is_sensitive());
        assert!(!format!("{h:?}").contains("dTpw"));
    }
}
