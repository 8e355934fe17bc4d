//! Writing into directories that someone else might also write to, without
//! following anything they planted there.
//!
//! The installer runs as root on every node, in directories on the host
//! (`--host-dir`, `--manifest-dir`). A path-based write lets whoever can write
//! one of those directories (or any directory above them) steer it: a symlink
//! planted at a temporary or final name would be written through, a symlinked
//! directory would be chmod-ed and filled with the TLS key, and a directory
//! they own could be swapped under our feet. So every write here is relative
//! to a directory file descriptor, and nothing is ever resolved through a
//! symbolic link:
//!
//! - [`Dir::open`] walks a path one component at a time from `/` (or the
//!   working directory), each `openat` with `O_NOFOLLOW | O_DIRECTORY`, and
//!   `fstat`s every directory it passes: a symlink anywhere in the path is
//!   refused, and so is a directory owned by a user who is neither root nor
//!   us. Above the target, a directory writable by group or others must have
//!   the sticky bit (`/tmp`: others cannot rename or replace what is not
//!   theirs); the kubelet's manifest directory must not be writable by group
//!   or others at all (anyone who can write it runs pods as root already);
//!   watchmux's own directories are made 0700 with `fchmod` on the open
//!   descriptor.
//! - [`Dir::replace`] writes a dot-named temporary with `O_CREAT | O_EXCL |
//!   O_NOFOLLOW` (a stale or planted entry at that name, link or hard link, is
//!   unlinked, which never touches its target, and the create retried once),
//!   then `renameat`s it over the final name: a link at the final name is
//!   replaced, not written through.
//! - [`Dir::read_regular`] reads an existing file only if it is a regular file
//!   opened with `O_NOFOLLOW` (and `O_NONBLOCK`, so a planted FIFO cannot hang
//!   the installer): a planted link is never read, so its target cannot be
//!   copied elsewhere (the previous manifest is kept in the host directory).
//!
//! The source files (`--files`, the pod's read-only projected volume) are
//! still read through links: a projected volume's files are links into its
//! `..data` directory, and only the kubelet writes that volume.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// What a directory at the end of a walk is for, which decides the modes it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The kubelet's manifest directory: kept as it is, refused if writable by group or others.
    Kubelet,
    /// watchmux's own directory (and those under it): made 0700.
    Private,
}

/// An open directory, with the path it was opened at (for messages only).
#[derive(Debug)]
pub(super) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

impl Dir {
    /// Opens `path` (creating what is missing) without following any link,
    /// checking every directory on the way.
    pub(super) fn open(path: &Path, role: Role) -> io::Result<Self> {
        let mut components = path.components().filter(|c| *c != Component::CurDir).peekable();
        let (start, mut at) = if path.is_absolute() {
            components.next();
            ("/", PathBuf::from("/"))
        } else {
            // Paths reported as given, without a leading "./".
            (".", PathBuf::new())
        };
        if components.peek().is_none() {
            // The start itself (`--host-dir .`).
            let fd = rustix::fs::open(start, OFlags::RDONLY | DIR_FLAGS, Mode::empty())?;
            return Self::checked(fd, at, role);
        }
        let mut fd = rustix::fs::open(start, OFlags::PATH | DIR_FLAGS, Mode::empty())?;
        check_ancestor(&fd, &at)?;
        while let Some(component) = components.next() {
            let Component::Normal(name) = component else {
                return Err(refused(path, "names a parent directory (..); give the real path"));
            };
            at.push(name);
            let last = components.peek().is_none();
            let (flags, create_mode) = match (last, role) {
                (false, _) => (OFlags::PATH, 0o755),
                (true, Role::Kubelet) => (OFlags::RDONLY, 0o755),
                (true, Role::Private) => (OFlags::RDONLY, 0o700),
            };
            let next = open_or_create_dir(&fd, name, flags, create_mode, &at)?;
            if last {
                return Self::checked(next, at, role);
            }
            check_ancestor(&next, &at)?;
            fd = next;
        }
        unreachable!("the last component returns")
    }

    /// The directory at the end of a walk, checked for its role.
    fn checked(fd: OwnedFd, path: PathBuf, role: Role) -> io::Result<Self> {
        check_owner(&fd, &path)?;
        let dir = Self { fd, path };
        match role {
            Role::Kubelet => dir.refuse_if_open_to_others()?,
            Role::Private => rustix::fs::fchmod(&dir.fd, Mode::from_raw_mode(0o700))?,
        }
        Ok(dir)
    }

    /// Opens (creating it if missing) the private directory `name` under this one, made 0700.
    pub(super) fn private_subdir(&self, name: &OsStr) -> io::Result<Self> {
        let path = self.path.join(name);
        let fd = open_or_create_dir(&self.fd, name, OFlags::RDONLY, 0o700, &path)?;
        check_owner(&fd, &path)?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
        Ok(Self { fd, path })
    }

    /// The path this directory was opened at.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of `name` if it is a regular file; `None` if it is missing or
    /// anything else (a link, a FIFO, a directory), which is never read.
    pub(super) fn read_regular(&self, name: &OsStr) -> io::Result<Option<Vec<u8>>> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // ELOOP: a symlink; ENXIO: a socket; EISDIR cannot happen read-only.
            Err(Errno::NOENT | Errno::LOOP | Errno::NXIO) => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        File::from(fd).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// Replaces `name` with `bytes` (mode 0600) through a dot-named temporary
    /// and a rename, neither of which follows a link.
    pub(super) fn replace(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let mut temporary = std::ffi::OsString::from(".");
        temporary.push(name);
        temporary.push(".new");
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(0o600);
        let fd = match rustix::fs::openat(&self.fd, &temporary, flags, mode) {
            Err(Errno::EXIST) => {
                // Left by an interrupted run, or planted: unlinking removes the
                // entry (a link, a hard link, a file), never what it points to.
                rustix::fs::unlinkat(&self.fd, &temporary, AtFlags::empty()).map_err(|err| {
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{}: cannot remove what is there: {err}", self.path.join(&temporary).display()),
                    )
                })?;
                rustix::fs::openat(&self.fd, &temporary, flags, mode)?
            }
            other => other?,
        };
        let written = (|| {
            // The umask may have narrowed the mode, never widened it; make it exact.
            rustix::fs::fchmod(&fd, mode)?;
            let mut file = File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()?;
            rustix::fs::renameat(&self.fd, &temporary, &self.fd, name)?;
            Ok::<_, io::Error>(())
        })();
        if let Err(err) = written {
            let _ = rustix::fs::unlinkat(&self.fd, &temporary, AtFlags::empty());
            return Err(err);
        }
        // The rename itself survives a crash only once the directory is synced.
        rustix::fs::fsync(&self.fd)?;
        Ok(())
    }

    fn refuse_if_open_to_others(&self) -> io::Result<()> {
        let mode = rustix::fs::fstat(&self.fd)?.st_mode & 0o7777;
        if mode & 0o022 != 0 {
            return Err(refused(
                &self.path,
                &format!("is writable by group or others (mode {mode:04o}): whoever can write it runs pods as root"),
            ));
        }
        Ok(())
    }
}

/// Opens the directory `name` under `parent` without following a link,
/// creating it (with `mode`) if it is missing.
fn open_or_create_dir(parent: &OwnedFd, name: &OsStr, flags: OFlags, mode: u32, path: &Path) -> io::Result<OwnedFd> {
    let open = || rustix::fs::openat(parent, name, flags | DIR_FLAGS, Mode::empty());
    let result = match open() {
        Err(Errno::NOENT) => match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(Errno::EXIST) => open(),
            Err(err) => Err(err),
        },
        other => other,
    };
    result.map_err(|err| match err {
        // O_NOFOLLOW | O_DIRECTORY on a link: ELOOP, or ENOTDIR with O_PATH.
        Errno::LOOP | Errno::NOTDIR => match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                refused(path, "is a symbolic link, which the installer never follows; give the real path")
            }
            _ => refused(path, "is not a directory"),
        },
        err => io::Error::from(err),
    })
}

/// A directory above the target: ours or root's, and if others may write it, sticky.
fn check_ancestor(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    check_owner(fd, path)?;
    let mode = rustix::fs::fstat(fd)?.st_mode & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(refused(
            path,
            &format!(
                "is writable by group or others without the sticky bit (mode {mode:04o}): they could replace what is under it"
            ),
        ));
    }
    Ok(())
}

/// Owned by root or by us: anyone else who owns a directory can plant in it at any time.
fn check_owner(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let owner = rustix::fs::fstat(fd)?.st_uid;
    if owner != 0 && owner != rustix::process::geteuid().as_raw() {
        return Err(refused(path, &format!("is owned by uid {owner}, neither root nor the installer")));
    }
    Ok(())
}

fn refused(path: &Path, why: &str) -> io::Error {
    let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
    io::Error::new(io::ErrorKind::PermissionDenied, format!("refusing {}: it {why}", path.display()))
}
