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
//!
//! It runs as root in directories of the host that others may be able to
//! write, so it never follows a link it did not create, and refuses a
//! directory whose owner or mode would let someone else plant one
//! (`safe_fs`, which says what is refused).

mod safe_fs;

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use safe_fs::{Dir, Role};

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
        let host = Dir::open(&self.host_dir, Role::Private)?;
        mirror(&self.files, &host, &mut written)?;
        let name = self
            .manifest
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "--manifest names no file"))?;
        let manifests = Dir::open(&self.manifest_dir, Role::Kubelet)?;
        let manifest = fs::read(&self.manifest)?;
        // Only a regular file is a manifest to keep: a planted link is not read.
        match manifests.read_regular(name)? {
            Some(current) if current == manifest => return Ok(written),
            Some(current) => {
                let mut previous = name.to_owned();
                previous.push(".previous");
                put(&host, &previous, &current, &mut written)?;
            }
            None => {}
        }
        put(&manifests, name, &manifest, &mut written)?;
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

fn mirror(from: &Path, to: &Dir, written: &mut Vec<PathBuf>) -> io::Result<()> {
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
            mirror(&source, &to.private_subdir(&name)?, written)?;
        } else {
            put(to, &name, &fs::read(&source)?, written)?;
        }
    }
    Ok(())
}

/// Replaces `name` in `dir` with `bytes` (mode 0600), unless it already holds them.
fn put(dir: &Dir, name: &OsStr, bytes: &[u8], written: &mut Vec<PathBuf>) -> io::Result<()> {
    if dir.read_regular(name)?.as_deref() == Some(bytes) {
        return Ok(());
    }
    dir.replace(name, bytes)?;
    written.push(dir.path().join(name));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

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

    /// A scratch node: the installer's input, and files and a directory
    /// outside its paths that a planted link points at.
    struct Node {
        _dir: tempfile::TempDir,
        root: PathBuf,
    }

    impl Node {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().to_owned();
            fs::create_dir_all(root.join("src/files/tls")).unwrap();
            fs::create_dir_all(root.join("src/static")).unwrap();
            fs::write(root.join("src/files/tls/tls.key"), "key").unwrap();
            fs::write(root.join("src/files/kubelet.conf"), "conf").unwrap();
            fs::write(root.join("src/static/watchmux.yaml"), "v1").unwrap();
            for victim in ["victim", "victim-manifest"] {
                fs::write(root.join(victim), "not yours").unwrap();
                fs::set_permissions(root.join(victim), fs::Permissions::from_mode(0o644)).unwrap();
            }
            fs::create_dir(root.join("victim-dir")).unwrap();
            fs::set_permissions(root.join("victim-dir"), fs::Permissions::from_mode(0o755)).unwrap();
            fs::write(root.join("victim-dir/keep"), "x").unwrap();
            Self { _dir: dir, root }
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.root.join(relative)
        }

        fn mode(&self, relative: &str) -> u32 {
            fs::metadata(self.path(relative)).unwrap().permissions().mode() & 0o7777
        }

        /// The link targets are as they were: same bytes, same modes, nothing added.
        fn assert_victims_untouched(&self) {
            for victim in ["victim", "victim-manifest"] {
                assert_eq!(fs::read_to_string(self.path(victim)).unwrap(), "not yours", "{victim} was written");
                assert_eq!(self.mode(victim), 0o644, "{victim} was chmod-ed");
            }
            assert_eq!(self.mode("victim-dir"), 0o755, "the linked directory was chmod-ed");
            let listed: Vec<_> =
                fs::read_dir(self.path("victim-dir")).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(listed, vec![OsStr::new("keep")], "something was written into the linked directory");
        }
    }

    fn link(target: &Path, at: &Path) {
        std::os::unix::fs::symlink(target, at).unwrap();
    }

    #[test]
    fn planted_entries_at_the_temporary_names_are_unlinked_never_written_through() {
        let node = Node::new();
        fs::create_dir_all(node.path("host/watchmux/tls")).unwrap();
        fs::create_dir_all(node.path("host/manifests")).unwrap();
        link(&node.path("victim"), &node.path("host/watchmux/tls/.tls.key.new"));
        link(&node.path("victim-manifest"), &node.path("host/manifests/.watchmux.yaml.new"));
        // A hard link cannot be told from a file by its name: O_EXCL refuses it all the same.
        fs::hard_link(node.path("victim"), node.path("host/watchmux/.kubelet.conf.new")).unwrap();

        plan(&node.root).install().unwrap();

        node.assert_victims_untouched();
        assert_eq!(fs::read_to_string(node.path("host/watchmux/tls/tls.key")).unwrap(), "key");
        assert_eq!(fs::read_to_string(node.path("host/watchmux/kubelet.conf")).unwrap(), "conf");
        assert_eq!(fs::read_to_string(node.path("host/manifests/watchmux.yaml")).unwrap(), "v1");
        assert_eq!(node.mode("host/watchmux/tls/tls.key"), 0o600);
        use std::os::unix::fs::MetadataExt as _;
        assert_eq!(fs::metadata(node.path("victim")).unwrap().nlink(), 1, "the planted hard link is gone");
        for dir in ["host/watchmux", "host/watchmux/tls", "host/manifests"] {
            let left: Vec<_> = fs::read_dir(node.path(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .filter(|name| name.as_encoded_bytes().ends_with(b".new"))
                .collect();
            assert!(left.is_empty(), "{dir} still holds {left:?}");
        }
    }

    #[test]
    fn a_link_or_fifo_at_a_final_name_is_replaced_never_written_through_nor_read() {
        let node = Node::new();
        fs::create_dir_all(node.path("host/watchmux/tls")).unwrap();
        fs::create_dir_all(node.path("host/manifests")).unwrap();
        link(&node.path("victim"), &node.path("host/watchmux/tls/tls.key"));
        // Were the link read as the current manifest, its target would be
        // copied to watchmux.yaml.previous.
        link(&node.path("victim-manifest"), &node.path("host/manifests/watchmux.yaml"));
        // Opening a FIFO to read it would block the installer forever.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            node.path("host/watchmux/kubelet.conf").as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();

        let written = plan(&node.root).install().unwrap();

        node.assert_victims_untouched();
        let regular = |p: &str| fs::symlink_metadata(node.path(p)).unwrap().file_type().is_file();
        for (path, bytes) in [
            ("host/watchmux/tls/tls.key", "key"),
            ("host/watchmux/kubelet.conf", "conf"),
            ("host/manifests/watchmux.yaml", "v1"),
        ] {
            assert!(regular(path), "{path} is still not a regular file");
            assert_eq!(fs::read_to_string(node.path(path)).unwrap(), bytes);
        }
        assert!(
            !node.path("host/watchmux/watchmux.yaml.previous").exists(),
            "a planted link was kept as the previous manifest"
        );
        assert!(!written.contains(&node.path("host/watchmux/watchmux.yaml.previous")));
    }

    #[test]
    fn a_directory_link_anywhere_in_either_path_is_refused_and_its_target_untouched() {
        // (where the link is planted, what it is named for the error)
        let cases = [
            ("host/watchmux/tls", "a sub-directory of the host directory"),
            ("host/watchmux", "the host directory itself"),
            ("host", "a directory above both"),
            ("host/manifests", "the manifest directory"),
        ];
        for (at, what) in cases {
            let node = Node::new();
            fs::create_dir_all(node.path(at).parent().unwrap()).unwrap();
            link(&node.path("victim-dir"), &node.path(at));

            let err = plan(&node.root).install().expect_err(what);

            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{what}: {err}");
            let message = err.to_string();
            assert!(message.contains(&format!("refusing {}", node.path(at).display())), "{what}: {message}");
            assert!(message.contains("symbolic link"), "{what}: {message}");
            node.assert_victims_untouched();
        }
    }

    #[test]
    fn directories_others_own_or_may_write_are_refused_as_they_are() {
        let node = Node::new();
        fs::create_dir_all(node.path("host/watchmux")).unwrap();
        // The crate's tests may run unprivileged, where no file can be given away.
        if std::os::unix::fs::chown(node.path("host/watchmux"), Some(4242), None).is_err() {
            eprintln!("skipped: chown needs root");
            return;
        }
        use std::os::unix::fs::MetadataExt as _;
        let refusal = |node: &Node| plan(&node.root).install().unwrap_err().to_string();

        fs::set_permissions(node.path("host/watchmux"), fs::Permissions::from_mode(0o755)).unwrap();
        let message = refusal(&node);
        assert!(message.contains("host/watchmux: it is owned by uid 4242"), "{message}");
        assert_eq!(node.mode("host/watchmux"), 0o755, "a foreign directory was chmod-ed");
        assert_eq!(fs::metadata(node.path("host/watchmux")).unwrap().uid(), 4242);
        assert!(!node.path("host/watchmux/tls").exists(), "written into a foreign directory");

        // Ours, but a sub-directory someone else made first.
        std::os::unix::fs::chown(node.path("host/watchmux"), Some(0), None).unwrap();
        fs::create_dir(node.path("host/watchmux/tls")).unwrap();
        std::os::unix::fs::chown(node.path("host/watchmux/tls"), Some(4242), None).unwrap();
        assert!(refusal(&node).contains("tls: it is owned by uid 4242"));
        assert!(!node.path("host/watchmux/tls/tls.key").exists());
        fs::remove_dir(node.path("host/watchmux/tls")).unwrap();

        // A directory above, owned by someone else.
        std::os::unix::fs::chown(node.path("host"), Some(4242), None).unwrap();
        assert!(refusal(&node).contains("host: it is owned by uid 4242"));
        std::os::unix::fs::chown(node.path("host"), Some(0), None).unwrap();

        // A directory above that others may write, unless sticky (as /tmp is).
        fs::set_permissions(node.path("host"), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(refusal(&node).contains("without the sticky bit (mode 0777)"));
        fs::set_permissions(node.path("host"), fs::Permissions::from_mode(0o1777)).unwrap();

        // The kubelet's directory is left as it is, so one others may write is refused.
        fs::create_dir(node.path("host/manifests")).unwrap();
        fs::set_permissions(node.path("host/manifests"), fs::Permissions::from_mode(0o775)).unwrap();
        assert!(refusal(&node).contains("host/manifests: it is writable by group or others (mode 0775)"));
        assert!(!node.path("host/manifests/watchmux.yaml").exists());
        assert_eq!(node.mode("host/manifests"), 0o775);

        // Our own directory, left open: closed to 0700, then the install goes through.
        fs::set_permissions(node.path("host/manifests"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(node.path("host/watchmux"), fs::Permissions::from_mode(0o777)).unwrap();
        plan(&node.root).install().unwrap();
        assert_eq!(node.mode("host/watchmux"), 0o700);
        assert_eq!(node.mode("host/watchmux/tls"), 0o700);
        assert_eq!(fs::read_to_string(node.path("host/manifests/watchmux.yaml")).unwrap(), "v1");
    }
}
