//! Reading the API listener's TLS files again when they change: the serving
//! pair (`--tls-cert-file`, `--tls-private-key-file`) and the client CA
//! (`--client-ca-file`), so that a certificate cert-manager (or anyone)
//! renews is served without a restart, as kube-apiserver's
//! dynamiccertificates controllers do.
//!
//! How a change is seen: every [`POLL_INTERVAL`] each file is looked at with
//! `stat`, which follows symlinks, and its device, inode, size, modification
//! and change times compared with the last look. A Kubernetes Secret or
//! ConfigMap volume updates by pointing its `..data` symlink at a new
//! directory, so the files' paths stay and their inodes change; a file
//! rewritten in place changes its times. Only then are the files read.
//! Polling, rather than inotify as kube-apiserver does (with a one-minute
//! resync besides): it needs no watch to be set up again after each symlink
//! swap (inotify watches the inode, which the swap leaves behind), no new
//! dependency, and a few `stat` calls every five seconds cost nothing; a
//! certificate renewed weeks before it expires is served within seconds.
//!
//! Rules:
//! - the serving pair and the client CA are read again apart, each when one
//!   of its files changed;
//! - what does not read or parse, a key that is not the certificate's, or a
//!   CA file without a usable certificate is refused: the previous one stays
//!   in use, a warning is logged and `watchmux_tls_reloads_total` counts it
//!   (`result="error"`); the files are read again at their next change (a
//!   rotation caught half-way, the certificate written and not yet the key,
//!   is read again when the key lands);
//! - content equal to what is in use (a file touched, or written again the
//!   same) changes nothing and counts nothing;
//! - new content makes a new [`Handshake`] for the connections accepted from
//!   then on (`result="ok"`); open connections keep theirs.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{ApiTls, ClientCaFile, ServingPair};
use crate::error::error_chain;
use crate::metrics as m;
use crate::server::TlsFiles;

/// How often the files are looked at.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// What `stat` says of a file that tells a new one from the old.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    /// `None` when the file cannot be looked at (missing, for one): a
    /// change too, and reading it says what is wrong.
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.size(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// The stamps of every file, by kind.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Stamps {
    serving: [Option<Stamp>; 2],
    client_ca: Option<Stamp>,
}

impl Stamps {
    pub(super) fn of(files: &TlsFiles) -> Self {
        Self {
            serving: [Stamp::of(&files.cert), Stamp::of(&files.key)],
            client_ca: files.client_ca.as_deref().and_then(Stamp::of),
        }
    }
}

/// What the files held when last read with success, and their stamps when
/// last looked at.
pub(super) struct Loaded {
    pub serving: ServingPair,
    pub client_ca: Option<ClientCaFile>,
    pub stamps: Stamps,
}

/// Which files, for the metric's `file_kind` and the logs.
#[derive(Debug, Clone, Copy)]
enum FileKind {
    Serving,
    ClientCa,
}

impl FileKind {
    fn label(self) -> &'static str {
        match self {
            FileKind::Serving => "serving",
            FileKind::ClientCa => "client_ca",
        }
    }
}

/// Looks at the files every [`POLL_INTERVAL`] until `stop`.
pub(crate) async fn keep_current(tls: ApiTls, stop: CancellationToken) {
    let mut ticks = tokio::time::interval_at(Instant::now() + POLL_INTERVAL, POLL_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let tls = tls.clone();
        // File IO, however small, off the runtime's workers.
        if let Err(err) = tokio::task::spawn_blocking(move || tls.reload_changed()).await {
            tracing::error!(error = %err, "reading the TLS files again failed");
        }
    }
}

impl ApiTls {
    /// Reads again the files that changed since they were last looked at.
    /// `true` when new handshakes use something new.
    pub(crate) fn reload_changed(&self) -> bool {
        let shared = &*self.shared;
        let (files, settings) = (&shared.files, &shared.settings);
        let mut guard = shared.loaded.lock();
        let loaded = &mut *guard;
        let stamps = Stamps::of(files);
        let mut renewed = false;
        if stamps.serving != loaded.stamps.serving {
            let read = ServingPair::read(&files.cert, &files.key, &settings.provider);
            renewed |= take(FileKind::Serving, &files.cert, read, &mut loaded.serving, |a, b| a.pem == b.pem);
        }
        if let (Some(path), Some(current)) = (&files.client_ca, &mut loaded.client_ca)
            && stamps.client_ca != loaded.stamps.client_ca
        {
            renewed |= take(FileKind::ClientCa, path, ClientCaFile::read(path), current, |a, b| a.pem == b.pem);
        }
        loaded.stamps = stamps;
        if !renewed {
            return false;
        }
        match settings.handshake(&loaded.serving, loaded.client_ca.as_ref()) {
            Ok(handshake) => {
                *shared.current.write() = Arc::new(handshake);
                true
            }
            // Nothing the files hold reaches what can fail here (the
            // versions and suites, which start-up built with).
            Err(err) => {
                tracing::error!(error = %err, "building the TLS configuration of the new files; keeping the previous one");
                false
            }
        }
    }
}

/// Puts what was `read` in `current` when it is sound and new; logs and
/// counts either way. `true` when `current` changed.
fn take<T, E: std::error::Error>(
    kind: FileKind,
    path: &Path,
    read: Result<T, E>,
    current: &mut T,
    same: impl Fn(&T, &T) -> bool,
) -> bool {
    let (file_kind, file) = (kind.label(), path.display());
    match read {
        Ok(new) if same(&new, current) => false,
        Ok(new) => {
            *current = new;
            counter!(m::TLS_RELOADS, "file_kind" => file_kind, "result" => "ok").increment(1);
            tracing::info!(file_kind, %file, "TLS files changed: new connections use them");
            true
        }
        Err(err) => {
            counter!(m::TLS_RELOADS, "file_kind" => file_kind, "result" => "error").increment(1);
            tracing::warn!(file_kind, %file, error = %error_chain(&err), "TLS files changed and are refused; keeping the previous ones");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

    use super::super::api_tls;
    use super::super::protocol::TlsProtocol;
    use super::super::tests::{connect, connector, files_in, serving_cert, write_pair};
    use super::*;
    use crate::auth::cert::client_ca::tests::{ca, client};

    /// `reload_changed` with its metrics recorded.
    struct Reloads {
        recorder: PrometheusRecorder,
        prom: PrometheusHandle,
    }

    impl Reloads {
        fn new() -> Self {
            let recorder = PrometheusBuilder::new().build_recorder();
            let prom = recorder.handle();
            Self { recorder, prom }
        }

        fn run(&self, tls: &ApiTls) -> bool {
            metrics::with_local_recorder(&self.recorder, || tls.reload_changed())
        }

        /// `watchmux_tls_reloads_total` of `file_kind` and `result`.
        fn count(&self, file_kind: &str, result: &str) -> u64 {
            let series = format!("{}{{file_kind=\"{file_kind}\",result=\"{result}\"}} ", m::TLS_RELOADS);
            self.prom.render().lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.parse().unwrap())
        }
    }

    #[tokio::test]
    async fn a_handshake_after_rotation_presents_the_new_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (serving_cert(), serving_cert());
        write_pair(dir.path(), &old);
        let tls = api_tls(&files_in(dir.path(), false, TlsProtocol::default())).unwrap();
        // A new client each time: a resumed session shows the certificate
        // of the handshake it resumes.
        let client = || connector(&[&old, &new], rustls::DEFAULT_VERSIONS, &[], None);
        assert_eq!(connect(&tls, &client()).await.unwrap().server_cert, *old.cert.der());
        let reloads = Reloads::new();
        assert!(!reloads.run(&tls), "nothing changed");

        write_pair(dir.path(), &new);
        assert!(reloads.run(&tls));
        assert_eq!(connect(&tls, &client()).await.unwrap().server_cert, *new.cert.der());
        assert_eq!((reloads.count("serving", "ok"), reloads.count("serving", "error")), (1, 0));
    }

    #[tokio::test]
    async fn a_bad_new_pair_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let good = serving_cert();
        write_pair(dir.path(), &good);
        let files = files_in(dir.path(), false, TlsProtocol::default());
        let tls = api_tls(&files).unwrap();
        let client = || connector(&[&good], rustls::DEFAULT_VERSIONS, &[], None);
        let reloads = Reloads::new();
        let other = serving_cert();
        let (cert_pem, key_pem) = (good.cert.pem(), good.key_pair.serialize_pem());

        /// What a look finds on disk: bytes, or no file at all.
        type Broken = Option<String>;
        let cases: [(&str, &PathBuf, Broken, &str); 4] = [
            ("a new certificate, its key not written yet", &files.cert, Some(other.cert.pem()), &cert_pem),
            ("the key of another certificate", &files.key, Some(other.key_pair.serialize_pem()), &key_pem),
            ("a certificate file that is not PEM", &files.cert, Some("garbage".into()), &cert_pem),
            ("a missing key file", &files.key, None, &key_pem),
        ];
        for (n, (case, path, broken, restore)) in cases.into_iter().enumerate() {
            match broken {
                Some(bytes) => std::fs::write(path, bytes).unwrap(),
                None => std::fs::remove_file(path).unwrap(),
            }
            assert!(!reloads.run(&tls), "{case}");
            assert_eq!(connect(&tls, &client()).await.unwrap().server_cert, *good.cert.der(), "{case}");
            assert_eq!(reloads.count("serving", "error"), n as u64 + 1, "{case}");
            assert!(!reloads.run(&tls), "{case}: read again though unchanged");
            assert_eq!(reloads.count("serving", "error"), n as u64 + 1, "{case}: counted again though unchanged");
            std::fs::write(path, restore).unwrap();
            assert!(!reloads.run(&tls), "{case}: the same pair again is not a change");
        }
        assert_eq!(reloads.count("serving", "ok"), 0);
    }

    /// A Secret volume as the kubelet writes it: the files are symlinks
    /// into `..data`, itself a symlink to the current version's directory,
    /// swapped whole with a rename.
    #[tokio::test]
    async fn a_secret_volume_update_is_seen_through_its_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path();
        let publish = |version: &str, serving: &rcgen::CertifiedKey| {
            std::fs::create_dir(volume.join(version)).unwrap();
            write_pair(&volume.join(version), serving);
            std::os::unix::fs::symlink(version, volume.join("..data_tmp")).unwrap();
            std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).unwrap();
        };
        let (old, new) = (serving_cert(), serving_cert());
        publish("..2026_12_05_v1", &old);
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), volume.join(name)).unwrap();
        }
        let tls = api_tls(&files_in(volume, false, TlsProtocol::default())).unwrap();
        let client = || connector(&[&old, &new], rustls::DEFAULT_VERSIONS, &[], None);
        assert_eq!(connect(&tls, &client()).await.unwrap().server_cert, *old.cert.der());

        publish("..2026_12_05_v2", &new);
        std::fs::remove_dir_all(volume.join("..2026_12_05_v1")).unwrap();
        assert!(Reloads::new().run(&tls));
        assert_eq!(connect(&tls, &client()).await.unwrap().server_cert, *new.cert.der());
    }

    #[tokio::test]
    async fn a_rotated_client_ca_verifies_the_certificates_it_issued() {
        let dir = tempfile::tempdir().unwrap();
        let serving = serving_cert();
        write_pair(dir.path(), &serving);
        let (old_ca, new_ca) = (ca("old", (2000, 2090), None), ca("new", (2000, 2090), None));
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, old_ca.cert.pem()).unwrap();
        let tls = api_tls(&files_in(dir.path(), true, TlsProtocol::default())).unwrap();
        let alice =
            connector(&[&serving], rustls::DEFAULT_VERSIONS, &[], Some(&client("alice".into(), (2000, 2090), &old_ca)));
        let bob =
            connector(&[&serving], rustls::DEFAULT_VERSIONS, &[], Some(&client("bob".into(), (2000, 2090), &new_ca)));
        assert_eq!(connect(&tls, &alice).await.unwrap().user.as_deref(), Some("alice"));
        assert!(connect(&tls, &bob).await.is_err(), "a CA not in the file yet");

        let reloads = Reloads::new();
        std::fs::write(&ca_file, "not a certificate").unwrap();
        assert!(!reloads.run(&tls));
        assert_eq!(connect(&tls, &alice).await.unwrap().user.as_deref(), Some("alice"), "the old CA stays");
        assert_eq!(reloads.count("client_ca", "error"), 1);

        std::fs::write(&ca_file, new_ca.cert.pem()).unwrap();
        assert!(reloads.run(&tls));
        assert_eq!(connect(&tls, &bob).await.unwrap().user.as_deref(), Some("bob"));
        assert!(connect(&tls, &alice).await.is_err(), "the old CA is gone from the file");
        assert_eq!(reloads.count("client_ca", "ok"), 1);
        assert_eq!(
            reloads.count("serving", "ok") + reloads.count("serving", "error"),
            0,
            "the serving pair was not read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_files_are_looked_at_every_poll_interval_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (serving_cert(), serving_cert());
        write_pair(dir.path(), &old);
        let tls = api_tls(&files_in(dir.path(), false, TlsProtocol::default())).unwrap();
        let stop = CancellationToken::new();
        let polling = tokio::spawn(keep_current(tls.clone(), stop.clone()));
        // Its first poll, which starts its interval, before the clock moves.
        tokio::task::yield_now().await;
        let before = tls.current();
        write_pair(dir.path(), &new);
        tokio::time::advance(POLL_INTERVAL / 2).await;
        tokio::task::yield_now().await;
        assert!(Arc::ptr_eq(&tls.current(), &before), "looked at too early");
        // The look runs on a blocking thread, which paused time does not
        // wait for: wait for its outcome instead.
        tokio::time::advance(POLL_INTERVAL / 2).await;
        while Arc::ptr_eq(&tls.current(), &before) {
            tokio::task::yield_now().await;
        }
        stop.cancel();
        polling.await.unwrap();
    }
}
