//! watchmux's own upstream credentials from a client-go exec plugin, against
//! the real API server: a token plugin (a service account's token, after a
//! first token the API server refuses), a kubelet-style plugin that prints
//! a client certificate and key, rotated when it expires, and plugins that
//! fail at start-up (fatal) and later (a 503 Status).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::auth::{cluster_api, cluster_file, issue_cert, reader_namespace, token_for};
use crate::env::*;

const WAIT: Duration = Duration::from_secs(20);

/// A plugin script next to `kubeconfig`: run n prints `out-<n>.json`, or
/// `out.json` when there is none, with `@EXPIRES@` replaced by the time
/// `$EXPIRES_IN` seconds from now; it counts its runs and keeps
/// `KUBERNETES_EXEC_INFO`.
const PLUGIN: &str = r#"#!/bin/bash
dir="$(dirname "$0")"
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$dir/count"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$dir/exec-info"
out="$dir/out-$n.json"; [ -f "$out" ] || out="$dir/out.json"
sed "s/@EXPIRES@/$(date -u -d "+${EXPIRES_IN:-3600} seconds" +%Y-%m-%dT%H:%M:%SZ)/" "$out"
"#;

/// Writes the plugin and a kubeconfig whose user runs it (by a path relative
/// to the kubeconfig, as kubeconfigs written by cloud CLIs often do not, but
/// client-go allows); returns the kubeconfig.
fn exec_kubeconfig(cluster: &Cluster, dir: &Path, env: Value) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let plugin = dir.join("bin/plugin");
    std::fs::write(&plugin, PLUGIN).unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": cluster_api(cluster), "certificate-authority": cluster_file(cluster, "ca.crt")}}],
        "users": [{"name": "exec-user", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "bin/plugin", "args": ["get-credential"],
            "env": env, "interactiveMode": "Never", "provideClusterInfo": true,
            "installHint": "see integration/e2e/exec_plugin.rs"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "exec-user"}}],
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    path
}

fn exec_credential(status: Value) -> String {
    json!({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}).to_string()
}

fn runs(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("bin/count")).map_or(0, |s| s.trim().parse().unwrap())
}

/// `kubectl auth whoami` through watchmux: a SelfSubjectReview, which the
/// API server answers with whoever the request authenticated as.
fn whoami(wm: &Watchmux, cluster: &Cluster) -> Value {
    let out = wm.kubectl(cluster, &["auth", "whoami", "-o", "json"]);
    assert!(out.ok, "{out:?}\nwatchmux log:\n{}", wm.log());
    serde_json::from_str::<Value>(&out.stdout).unwrap()["status"]["userInfo"].clone()
}

#[tokio::test]
async fn an_exec_plugin_token_is_watchmuxs_upstream_identity_and_a_401_runs_the_plugin_again() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let admin = cluster.direct_client();
    let ns = reader_namespace(&admin, "exec-token").await;
    let token = token_for(&cluster, &ns, &[]);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = exec_kubeconfig(&cluster, dir.path(), json!([]));
    // The first token is one the API server refuses, as a revoked or
    // rotated one would be; every later run gives the service account's.
    std::fs::write(dir.path().join("bin/out-1.json"), exec_credential(json!({"token": "refused-token"}))).unwrap();
    std::fs::write(dir.path().join("bin/out.json"), exec_credential(json!({"token": token}))).unwrap();

    let wm = Watchmux::start_with_kubeconfig(&cluster, &kubeconfig, &[]).await;
    let user = whoami(&wm, &cluster);
    assert_eq!(user["username"], format!("system:serviceaccount:{ns}:reader"), "{user}");
    // Start-up ran it once; the API server's 401 to that token (the
    // readiness probe's or a request's) once more; no run since.
    assert_eq!(runs(dir.path()), 2, "log:\n{}", wm.log());
    assert!(wm.log().contains("401"), "the refusal is logged:\n{}", wm.log());
    // Writes pass through as the service account too, which may not.
    let denied = wm.kubectl(&cluster, &["create", "configmap", "x", "-n", &ns]);
    assert!(!denied.ok && denied.stderr.contains(&format!("system:serviceaccount:{ns}:reader")), "{denied:?}");

    let info: Value = serde_json::from_slice(&std::fs::read(dir.path().join("bin/exec-info")).unwrap()).unwrap();
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(info["spec"]["cluster"]["server"], cluster_api(&cluster));
    assert!(info["spec"]["cluster"]["certificate-authority-data"].is_string(), "{info}");
    assert!(!wm.log().contains(&token), "the token never reaches the log");
}

#[tokio::test]
async fn a_kubelet_style_exec_plugin_certificate_authenticates_watchmux_and_a_rotated_one_replaces_it() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let dir = tempfile::tempdir().unwrap();
    // Each credential says it expires 3 s after it was issued, so the first
    // is renewed within the test; the second node's certificate follows.
    let kubeconfig = exec_kubeconfig(&cluster, dir.path(), json!([{"name": "EXPIRES_IN", "value": "3"}]));
    for (run, node) in [("out-1.json", "exec-node-a"), ("out.json", "exec-node-b")] {
        let (crt, key) =
            issue_cert(&cluster, dir.path(), node, &format!("/O=system:nodes/CN=system:node:{node}"), true);
        let status = json!({
            "clientCertificateData": std::fs::read_to_string(crt).unwrap(),
            "clientKeyData": std::fs::read_to_string(key).unwrap(),
            "expirationTimestamp": "@EXPIRES@",
        });
        std::fs::write(dir.path().join("bin").join(run), exec_credential(status)).unwrap();
    }

    let wm = Watchmux::start_with_kubeconfig(&cluster, &kubeconfig, &[]).await;
    let user = whoami(&wm, &cluster);
    let groups = user["groups"].as_array().cloned().unwrap_or_default();
    if user["username"] == "system:node:exec-node-a" {
        assert!(groups.contains(&json!("system:nodes")), "{user}");
    } else {
        // A slow machine may already be past the first certificate's 3 s.
        assert_eq!(user["username"], "system:node:exec-node-b", "{user}");
    }
    // Past the first certificate's expiry the plugin runs again and new
    // connections present the new certificate.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let user = whoami(&wm, &cluster);
        if user["username"] == "system:node:exec-node-b" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {user} after {WAIT:?}; log:\n{}", wm.log());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(runs(dir.path()) >= 2);
    assert!(wm.log().contains("new upstream connections for a new client certificate"), "{}", wm.log());
}

#[tokio::test]
async fn an_exec_plugin_that_fails_at_start_up_stops_watchmux_naming_the_user_and_the_cause() {
    let cluster = Cluster::from_env();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = exec_kubeconfig(&cluster, dir.path(), json!([]));
    std::fs::write(dir.path().join("bin/out.json"), "{\"kind\": \"ExecCredential\"}").unwrap();
    let log = dir.path().join("watchmux.log");
    let mut child = std::process::Command::new(watchmux_binary())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut status = None;
    for _ in 0..200 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "watchmux kept running; log:\n{log}");
    let says = "printed apiVersion \"\", but the kubeconfig asks for client.authentication.k8s.io/v1";
    assert!(log.contains("kubeconfig user \"exec-user\"") && log.contains(says), "{log}");
    assert!(!log.contains("exec plugin failed"), "only the fatal error reports it: {log}");
}

#[tokio::test]
async fn a_plugin_that_fails_after_start_up_gets_requests_a_503_status_and_its_stderr_only_in_the_log() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = exec_kubeconfig(&cluster, dir.path(), json!([{"name": "EXPIRES_IN", "value": "3"}]));
    let tokens = std::fs::read_to_string(cluster_file(&cluster, "tokens.csv")).unwrap();
    let admin_token = tokens.split(',').next().unwrap().to_owned();
    let first = exec_credential(json!({"token": admin_token, "expirationTimestamp": "@EXPIRES@"}));
    std::fs::write(dir.path().join("bin/out-1.json"), first).unwrap();
    // Every later run fails, as a cloud CLI whose login has lapsed does.
    let failing = "#!/bin/bash\necho 'error: login required (run `cloud login`)' >&2\nexit 2\n";
    // (Until the script below replaces it, a second run prints nothing: an error too.)
    std::fs::write(dir.path().join("bin/out.json"), "").unwrap();

    let wm = Watchmux::start_with_kubeconfig(&cluster, &kubeconfig, &[]).await;
    // Not cached: passes through with watchmux's credentials.
    let path = "/api/v1/namespaces/default/serviceaccounts";
    let (code, _) = read(get(wm.addr, path).await).await;
    assert_eq!(code, 200);
    let plugin = dir.path().join("bin/plugin");
    std::fs::write(&plugin, failing).unwrap();

    // Past the 3 s expiry no request can be sent upstream.
    let deadline = tokio::time::Instant::now() + WAIT;
    let body = loop {
        let (code, body) = read(get(wm.addr, path).await).await;
        if code == 503 {
            break body;
        }
        assert_eq!(code, 200);
        assert!(tokio::time::Instant::now() < deadline, "still 200 after {WAIT:?}; log:\n{}", wm.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["kind"], "Status", "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("kubeconfig user \"exec-user\"") && message.contains("exit status: 2"), "{message}");
    assert!(!message.contains("login required"), "the plugin's stderr is for the log: {message}");
    assert!(wm.log().contains("login required"), "{}", wm.log());
    assert!(!wm.log().contains(&admin_token), "the token never reaches the log");
    let failures = watchmux_metric_sum(wm.admin, "watchmux_upstream_errors_total", &["cause=\"credentials\""]).await;
    assert!(failures >= 1.0, "{failures}");
}
