//! The open-file limit, raised at start to what the system allows.
//!
//! Every downstream connection is a descriptor (and every HTTP/1.1 watch its
//! own connection), so the common soft limit of 1,024 caps watchmux at about
//! a thousand HTTP/1.1 watchers however much memory it has. The hard limit is
//! what the administrator allows; raising the soft limit to it needs no
//! privilege.

/// Raises the soft RLIMIT_NOFILE to the hard limit, logging the change once
/// (or why it could not be made), and returns the soft limit now in force:
/// the connection budget is sized within it. Never fails: a lower limit is
/// no reason not to serve.
pub(crate) fn raise_nofile() -> Option<usize> {
    let (soft, hard) = match rlimit::Resource::NOFILE.get() {
        Ok(limits) => limits,
        Err(err) => {
            tracing::warn!(error = %err, "could not read the open-file limit");
            return None;
        }
    };
    let in_force = if soft >= hard {
        tracing::info!(limit = soft, "open-file limit already at the hard limit");
        soft
    } else {
        match rlimit::increase_nofile_limit(hard) {
            Ok(now) => {
                tracing::info!(before = soft, after = now, hard, "raised the open-file limit");
                now
            }
            Err(err) => {
                tracing::warn!(error = %err, soft, hard, "could not raise the open-file limit");
                soft
            }
        }
    };
    Some(usize::try_from(in_force).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let in_force = super::raise_nofile();
        let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap();
        assert_eq!(soft, hard);
        assert_eq!(in_force, Some(soft as usize));
    }
}
