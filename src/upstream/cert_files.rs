//! A client certificate read from files that are rotated underneath
//! watchmux: the kubelet's `/var/lib/kubelet/pki/kubelet-client-current.pem`
//! in nodeLocal mode, or a certificate that cert-manager renews.
//!
//! The kubelet renews its client certificate when 70-90% of its lifetime has
//! passed and moves the `-current.pem` symlink to the new pair. A watchmux
//! that read the pair only at start would present the old certificate until
//! it expired, and then every request it sends as the node would be refused
//! with 401. client-go's answer (its transport's certificate rotation) is the
//! one taken here: re-read the files now and then, and when the pair changed,
//! new connections present the new one.
//!
//! Rules:
//! - the files are read again once [`CERT_FILE_REFRESH`] has passed since the
//!   last read, on the request path (two small reads), and sooner after the
//!   upstream answers 401 (at most once per [`RECHECK_AFTER_401`]);
//! - a pair that does not read, parse or belong together is not used: the
//!   previous one stays (a rotation caught half-way through is read again at
//!   the next check), and the failure is logged once until a read succeeds;
//! - an unchanged pair keeps the same [`ClientIdentity`] `Arc`, so
//!   connections are only replaced when the certificate really changed.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::exec::{ClientIdentity, check_key_pair};
use super::kubeconfig::ClientCertFiles;

/// How long a client certificate read from files is used before the files
/// are read again. Kubelet certificates live for months (a year by default)
/// and are renewed with at least weeks to spare, so a minute costs nothing
/// and catches a rotation long before the old certificate expires.
pub(crate) const CERT_FILE_REFRESH: Duration = Duration::from_secs(60);

/// The soonest the files are read again after a 401: a certificate that
/// expired or was revoked is replaced as soon as the new one is on disk,
/// without a flood of refused requests reading the files once each.
pub(crate) const RECHECK_AFTER_401: Duration = Duration::from_secs(1);

/// The client certificate read from [`ClientCertFiles`], re-read when due.
#[derive(Debug)]
pub(crate) struct RotatingCertFiles {
    files: ClientCertFiles,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<ClientIdentity>,
    /// When the files were last read.
    read_at: Instant,
    /// A 401 asked for a read before the refresh interval is over.
    recheck: bool,
    /// The last read failed, and this was logged.
    failing: bool,
}

impl RotatingCertFiles {
    /// Starts from the pair the kubeconfig was loaded with.
    pub(crate) fn new(files: ClientCertFiles, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        let current = Arc::new(ClientIdentity { cert_pem, key_pem });
        Self { files, state: Mutex::new(State { current, read_at: Instant::now(), recheck: false, failing: false }) }
    }

    /// The pair to present now, read again from the files when it is due.
    pub(crate) fn current(&self) -> Arc<ClientIdentity> {
        let mut state = self.state.lock();
        let now = Instant::now();
        let due =
            now.duration_since(state.read_at) >= if state.recheck { RECHECK_AFTER_401 } else { CERT_FILE_REFRESH };
        if due {
            state.read_at = now;
            state.recheck = false;
            match read_pair(&self.files) {
                Ok(identity) => {
                    if state.failing {
                        tracing::info!(cert = %self.files.cert.display(), "the upstream client certificate reads again");
                        state.failing = false;
                    }
                    if identity != *state.current {
                        tracing::info!(cert = %self.files.cert.display(), "the upstream client certificate changed on disk: new connections present the new one");
                        state.current = Arc::new(identity);
                    }
                }
                Err(err) => {
                    if !state.failing {
                        tracing::warn!(cert = %self.files.cert.display(), error = %err, "keeping the previous upstream client certificate");
                        state.failing = true;
                    }
                }
            }
        }
        state.current.clone()
    }

    /// The upstream answered 401 to a request that presented the current
    /// pair: read the files again soon, in case it was renewed.
    pub(crate) fn unauthorized(&self) {
        self.state.lock().recheck = true;
    }
}

fn read_pair(files: &ClientCertFiles) -> Result<ClientIdentity, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()));
    let (cert_pem, key_pem) = (read(&files.cert)?, read(&files.key)?);
    check_key_pair(&cert_pem, &key_pem)?;
    Ok(ClientIdentity { cert_pem, key_pem })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate and its key as one PEM file, as the kubelet
    /// writes `kubelet-client-current.pem`.
    fn pair(name: &str) -> Vec<u8> {
        let (cert, key) = crate::upstream::exec_cache::tests::test_identity(name);
        [cert.into_bytes(), key.into_bytes()].concat()
    }

    fn files(dir: &Path) -> ClientCertFiles {
        let path = dir.join("kubelet-client-current.pem");
        ClientCertFiles { cert: path.clone(), key: path }
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_pair_is_presented_after_the_refresh_interval() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let first = pair("first");
        std::fs::write(&f.cert, &first).unwrap();
        let rotating = RotatingCertFiles::new(f.clone(), first.clone(), first.clone());
        let before = rotating.current();

        let second = pair("second");
        std::fs::write(&f.cert, &second).unwrap();
        tokio::time::advance(CERT_FILE_REFRESH / 2).await;
        assert!(Arc::ptr_eq(&rotating.current(), &before), "read again too early");

        tokio::time::advance(CERT_FILE_REFRESH).await;
        let after = rotating.current();
        assert_eq!(after.cert_pem, second);
        assert!(!Arc::ptr_eq(&after, &before));
        tokio::time::advance(CERT_FILE_REFRESH * 2).await;
        assert!(Arc::ptr_eq(&rotating.current(), &after), "an unchanged pair keeps its Arc (and its connections)");
    }

    #[tokio::test(start_paused = true)]
    async fn a_401_reads_the_files_again_within_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let first = pair("first");
        std::fs::write(&f.cert, &first).unwrap();
        let rotating = RotatingCertFiles::new(f.clone(), first.clone(), first);
        let second = pair("second");
        std::fs::write(&f.cert, &second).unwrap();

        rotating.unauthorized();
        tokio::time::advance(RECHECK_AFTER_401).await;
        assert_eq!(rotating.current().cert_pem, second);
    }

    #[tokio::test(start_paused = true)]
    async fn a_torn_missing_or_mismatched_pair_keeps_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let f = ClientCertFiles { cert: dir.path().join("tls.crt"), key: dir.path().join("tls.key") };
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["one".into()]).unwrap().self_signed(&key).unwrap();
        let (cert_pem, key_pem) = (cert.pem().into_bytes(), key.serialize_pem().into_bytes());
        std::fs::write(&f.cert, &cert_pem).unwrap();
        std::fs::write(&f.key, &key_pem).unwrap();
        let rotating = RotatingCertFiles::new(f.clone(), cert_pem.clone(), key_pem.clone());
        let kept = rotating.current();
        let other_key = rcgen::KeyPair::generate().unwrap().serialize_pem().into_bytes();

        /// What a check finds on disk: bytes, or no file at all.
        type Broken<'a> = Option<&'a [u8]>;
        let cases: [(&str, &Path, Broken, &[u8]); 3] = [
            ("the key of another certificate (a rotation caught half-way)", &f.key, Some(&other_key), &key_pem),
            ("a certificate that is not PEM", &f.cert, Some(b"garbage"), &cert_pem),
            ("a missing key file", &f.key, None, &key_pem),
        ];
        for (case, path, broken, good) in cases {
            match broken {
                Some(bytes) => std::fs::write(path, bytes).unwrap(),
                None => std::fs::remove_file(path).unwrap(),
            }
            tokio::time::advance(CERT_FILE_REFRESH).await;
            assert!(Arc::ptr_eq(&rotating.current(), &kept), "{case}");
            std::fs::write(path, good).unwrap();
        }
        tokio::time::advance(CERT_FILE_REFRESH).await;
        assert!(Arc::ptr_eq(&rotating.current(), &kept), "the same pair again is not a change");
    }
}
