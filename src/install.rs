//! `watchmux install-static-pod`: what the Helm chart's installer DaemonSet
//! runs on each node for nodeLocal's static-pod form (docs/node-local.md).
//!
//! The watchmux image has nothing but the binary (no shell, no `cp`), so the
//! installer is the binary itself: the node then needs no second image, and
//! no registry but watchmux's own. It mirrors the files of `--files` (the
//! TLS Secret, the client CA, the kubelet's kubeconfig for watchmux, as the
//! pod mounts them) into `--host-dir`, then writes the manifest into the
//! kubelet's manifest directory: credentials first, since the kubelet starts
//! the pod as soon as its manifest is there. Each file is written only when
//! it differs, through a dot-named temporary in its own directory and a
//! rename (the kubelet reads no dot files). The manifest it replaces is kept
//! as `<host-dir>/<name>.previous` for rollback, outside the manifest
//! directory, where the kubelet would run it as a second pod. Then it waits
//! for SIGTERM, so that the DaemonSet's next rollout reaches every node.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The first argument that selects this mode instead of the proxy.
pub const SUBCOMMAND: &str = "install-static-pod";

const USAGE: &str = "usage: watchmux install-static-pod --files DIR --host-dir DIR \
--manifest FILE --manifest-dir DIR [--once]";

/// Where the files come from and go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallPlan {
    /// Mirrored into `host_dir`, sub-directories included; names starting
    /// with `..` (a projected volume's bookkeeping) are skipped.
    pub files: PathBuf,
    /// watchmux's directory on the host (mode 0700).
    pub host_dir: PathBuf,
    /// The static pod manifest, written to `manifest_dir` under its own name.
    pub manifest: PathBuf,
    /// The kubelet's static pod directory (`staticPodPath`).
    pub manifest_dir: PathBuf,
    /// Exit after installing instead of waiting for SIGTERM.
    pub once: bool,
}

impl InstallPlan {
    /// Parses the arguments after the subcommand (`--flag VALUE` or `--flag=VALUE`).
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let (mut files, mut host_dir, mut manifest, mut manifest_dir, mut once) = (None, None, None, None, false);
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "--once" {
                once = true;
                continue;
            }
            if arg == "--help" || arg == "-h" {
                return Err(USAGE.to_owned());
            }
            let (flag, value) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_owned(), value.to_owned()),
                None => {
                    let value = args.next().ok_or_else(|| format!("{arg} needs a value; {USAGE}"))?;
                    (arg, value)
                }
            };
            let slot = match flag.as_str() {
                "--files" => &mut files,
                "--host-dir" => &mut host_dir,
                "--manifest" => &mut manifest,
                "--manifest-dir" => &mut manifest_dir,
                _ => return Err(format!("unknown argument {flag}; {USAGE}")),
            };
            *slot = Some(PathBuf::from(value));
        }
        let need = |v: Option<PathBuf>, name: &str| v.ok_or_else(|| format!("{name} is required; {USAGE}"));
        Ok(Self {
            files: need(files, "--files")?,
            host_dir: need(host_dir, "--host-dir")?,
            manifest: need(manifest, "--manifest")?,
            manifest_dir: need(manifest_dir, "--manifest-dir")?,
            once,
        })
    }

    /// Writes what differs; returns the paths written, in order.
    pub fn install(&self) -> io::Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        create_private_dir(&self.host_dir)?;
        mirror(&self.files, &self.host_dir, &mut written)?;
        let name = self
            .manifest
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "--manifest names no file"))?;
        let target = self.manifest_dir.join(name);
        fs::create_dir_all(&self.manifest_dir)?;
        if !same_contents(&self.manifest, &target)? && target.exists() {
            let mut previous = name.to_owned();
            previous.push(".previous");
            put(&target, &self.host_dir.join(previous), &mut written)?;
        }
        put(&self.manifest, &target, &mut written)?;
        Ok(written)
    }
}

/// Runs the subcommand: install, then (unless `--once`) wait for SIGTERM or SIGINT.
pub fn main(args: impl IntoIterator<Item = String>) -> Result<(), String> {
    let plan = InstallPlan::from_args(args)?;
    let written = plan.install().map_err(|err| format!("watchmux-installer: {err}"))?;
    for path in &written {
        println!("watchmux-installer: wrote {}", path.display());
    }
    let target = plan.manifest_dir.join(plan.manifest.file_name().unwrap_or_default());
    println!("watchmux-installer: {} is current", target.display());
    let _ = io::stdout().flush();
    if plan.once {
        return Ok(());
    }
    // PID 1 in a container ignores signals it has no handler for.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|err| err.to_string())?;
    runtime.block_on(async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|err| err.to_string())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(())
    })
}

fn mirror(from: &Path, to: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries = fs::read_dir(from)?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name.as_encoded_bytes().starts_with(b"..") {
            continue;
        }
        let source = entry.path();
        // Follows symlinks: a mounted ConfigMap's files are links into `..data`.
        if fs::metadata(&source)?.is_dir() {
            create_private_dir(&to.join(&name))?;
            mirror(&source, &to.join(&name), written)?;
        } else {
            put(&source, &to.join(&name), written)?;
        }
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

fn same_contents(a: &Path, b: &Path) -> io::Result<bool> {
    match fs::read(b) {
        Ok(existing) => Ok(fs::read(a)? == existing),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

/// Replaces `dest` with `source`'s bytes (mode 0600) by a rename, unless equal.
fn put(source: &Path, dest: &Path, written: &mut Vec<PathBuf>) -> io::Result<()> {
    if same_contents(source, dest)? {
        return Ok(());
    }
    let bytes = fs::read(source)?;
    let name = dest.file_name().unwrap_or(OsStr::new("file"));
    let mut temporary = std::ffi::OsString::from(".");
    temporary.push(name);
    temporary.push(".new");
    let temporary = dest.with_file_name(temporary);
    let mut file = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fs::set_permissions(&temporary, fs::Permissions::from_mode(0o600))?;
    fs::rename(&temporary, dest)?;
    written.push(dest.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(root: &Path) -> InstallPlan {
        InstallPlan {
            files: root.join("src/files"),
            host_dir: root.join("host/watchmux"),
            manifest: root.join("src/static/watchmux.yaml"),
            manifest_dir: root.join("host/manifests"),
            once: true,
        }
    }

    #[test]
    fn installs_credentials_before_the_manifest_then_rewrites_only_what_changed() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        fs::create_dir_all(root.join("src/files/tls")).unwrap();
        fs::create_dir_all(root.join("src/files/..data")).unwrap();
        fs::create_dir_all(root.join("src/static")).unwrap();
        fs::write(root.join("src/files/tls/tls.key"), "key").unwrap();
        fs::write(root.join("src/files/..data/skip"), "x").unwrap();
        fs::write(root.join("src/static/watchmux.yaml"), "v1").unwrap();
        let plan = plan(root);

        let written = plan.install().unwrap();
        let manifest = root.join("host/manifests/watchmux.yaml");
        assert_eq!(written, vec![root.join("host/watchmux/tls/tls.key"), manifest.clone()]);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root.join("host/watchmux")), 0o700);
        assert_eq!(mode(&root.join("host/watchmux/tls/tls.key")), 0o600);
        assert!(!root.join("host/watchmux/..data").exists());

        assert!(plan.install().unwrap().is_empty(), "an unchanged re-run writes nothing");

        fs::write(root.join("src/static/watchmux.yaml"), "v2").unwrap();
        let written = plan.install().unwrap();
        let previous = root.join("host/watchmux/watchmux.yaml.previous");
        assert_eq!(written, vec![previous.clone(), manifest.clone()]);
        assert_eq!(fs::read_to_string(&previous).unwrap(), "v1");
        assert_eq!(fs::read_to_string(&manifest).unwrap(), "v2");
        let listed: Vec<_> =
            fs::read_dir(root.join("host/manifests")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(listed, vec![OsStr::new("watchmux.yaml")], "no temporary or previous file beside the manifest");
    }

    #[test]
    fn arguments_take_both_spellings_and_refuse_unknown_ones() {
        let args = |a: &[&str]| InstallPlan::from_args(a.iter().map(|s| s.to_string()));
        let plan = args(&["--files=/f", "--host-dir", "/h", "--manifest", "/m/w.yaml", "--manifest-dir=/d", "--once"])
            .unwrap();
        assert_eq!(plan.host_dir, PathBuf::from("/h"));
        assert!(plan.once);
        assert!(args(&["--files=/f"]).unwrap_err().contains("--host-dir is required"));
        assert!(args(&["--bogus=1"]).unwrap_err().contains("unknown argument --bogus"));
        assert!(args(&["--help"]).unwrap_err().starts_with("usage: watchmux install-static-pod"));
    }
}
