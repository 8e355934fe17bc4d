//! watchmux's own client certificate, read from a file that is rotated
//! underneath it, as the kubelet rotates `kubelet-client-current.pem` on a
//! node where watchmux runs with the kubelet's credentials (nodeLocal).
//!
//! The API server refuses an expired certificate, or one it does not trust,
//! with 401. watchmux must pick the renewed pair up from disk without a
//! restart: it reads the files again soon after a 401 (and every minute in
//! any case, a unit test's matter).

use std::path::Path;
use std::time::Duration;

use crate::auth::{cluster_file, issue_cert};
use crate::env::*;

/// A client certificate the cluster does not trust (self-signed), as one
/// PEM file with its key: the API server answers 401 to it, as it does to
/// an expired certificate.
fn untrusted_pair(dir: &Path) -> Vec<u8> {
    let (crt, key) = (dir.join("untrusted.crt"), dir.join("untrusted.key"));
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=watchmux-untrusted", "-addext", "extendedKeyUsage=clientAuth", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    [std::fs::read(crt).unwrap(), std::fs::read(key).unwrap()].concat()
}

/// Replaces `path` in one rename, as the kubelet's certificate manager
/// moves its `-current.pem` link: a reader never sees half a file.
fn replace(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn whoami(wm: &Watchmux, cluster: &Cluster) -> (bool, String) {
    let out = wm.kubectl(cluster, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    let text = if out.ok { out.stdout } else { out.stderr };
    (out.ok, text.trim().to_owned())
}

#[tokio::test]
async fn a_client_certificate_renewed_on_disk_is_presented_without_a_restart() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("client-current.pem");
    std::fs::write(&current, untrusted_pair(dir.path())).unwrap();
    let api = format!("https://{}", cluster.api_addr());
    let kubeconfig = dir.path().join("upstream");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters:\n- name: c\n  cluster: {{server: '{api}', certificate-authority: '{ca}'}}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: u}}\n\
             users:\n- name: u\n  user: {{client-certificate: '{pem}', client-key: '{pem}'}}\n",
            ca = cluster_file(&cluster, "ca.crt").display(),
            pem = current.display(),
        ),
    )
    .unwrap();
    // Pass-through only (no cache to fill with a refused identity), as
    // watchmux's own identity (trusted-local on loopback).
    let wm = Watchmux::spawn_with_kubeconfig(&kubeconfig, &["--cache-resources="]);
    wm.wait_for_admin("/healthz").await;

    // watchmux's own credentials refused: a 503 that says so (not a relayed
    // 401 telling a client that sent none to log in), and a re-read of the files.
    let (ok, said) = whoami(&wm, &cluster);
    assert!(
        !ok && said.contains("refused watchmux's own credentials (401)"),
        "the untrusted certificate is refused: {said}"
    );

    let (crt, key) = issue_cert(&cluster, dir.path(), "renewed", "/CN=watchmux-renewed/O=watchmux-e2e", true);
    replace(&current, &[std::fs::read(crt).unwrap(), std::fs::read(key).unwrap()].concat());
    // Bounded: watchmux reads the files again at most a second after a
    // 401; each try that is still refused is another 401.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let said = loop {
        let (ok, said) = whoami(&wm, &cluster);
        if ok {
            break said;
        }
        assert!(tokio::time::Instant::now() < deadline, "still refused after the renewal: {said}\n{}", wm.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(said, "watchmux-renewed", "the renewed certificate's identity");
    assert!(wm.log().contains("changed on disk"), "the rotation is logged:\n{}", wm.log());
}
