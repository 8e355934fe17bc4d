//! Priority levels and flows, shaped like the API server's default
//! Priority and Fairness configuration (v1.37's bootstrap FlowSchemas,
//! in their matching precedence): who a cached read is from decides the
//! level its seats come from, and the flow it is queued in.

use std::net::SocketAddr;

/// A priority level: a share of the seats, of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PriorityLevel {
    /// `system:masters`: never limited.
    Exempt,
    /// Leases read by the controller manager, the scheduler and
    /// kube-system's service accounts.
    LeaderElection,
    /// Nodes and leases read by kubelets (`system:nodes`).
    NodeHigh,
    /// Everything else kubelets read.
    System,
    /// The controller manager, the scheduler, kube-system's service accounts.
    WorkloadHigh,
    /// Other service accounts.
    WorkloadLow,
    /// Other users, authenticated or anonymous (each user one flow, so all
    /// anonymous callers are one), and every client in trusted-local mode.
    GlobalDefault,
    /// Anything no other level takes.
    CatchAll,
}

impl PriorityLevel {
    /// Every limited level, in the order their seats are laid out.
    pub(crate) const LIMITED: [Self; 7] = [
        Self::LeaderElection,
        Self::NodeHigh,
        Self::System,
        Self::WorkloadHigh,
        Self::WorkloadLow,
        Self::GlobalDefault,
        Self::CatchAll,
    ];

    /// The level's name, as the API server's PriorityLevelConfiguration.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Exempt => "exempt",
            Self::LeaderElection => "leader-election",
            Self::NodeHigh => "node-high",
            Self::System => "system",
            Self::WorkloadHigh => "workload-high",
            Self::WorkloadLow => "workload-low",
            Self::GlobalDefault => "global-default",
            Self::CatchAll => "catch-all",
        }
    }

    /// The API server's nominal concurrency shares for the level.
    pub(crate) fn shares(self) -> usize {
        match self {
            Self::Exempt => 0,
            Self::LeaderElection => 10,
            Self::NodeHigh => 40,
            Self::System => 30,
            Self::WorkloadHigh => 40,
            Self::WorkloadLow => 100,
            Self::GlobalDefault => 20,
            Self::CatchAll => 5,
        }
    }

    /// The level of a read of `group`/`resource` by `user` in `groups`, as
    /// the default FlowSchemas match it (lowest precedence first).
    pub(crate) fn of(user: &str, groups: &[String], group: &str, resource: &str) -> Self {
        let in_group = |g: &str| groups.iter().any(|x| x == g);
        let controller = user == KUBE_CONTROLLER_MANAGER || user == KUBE_SCHEDULER;
        let kube_system_sa = user.starts_with(KUBE_SYSTEM_SERVICE_ACCOUNT);
        if in_group("system:masters") {
            Self::Exempt
        } else if (controller || kube_system_sa) && group == "coordination.k8s.io" && resource == "leases" {
            Self::LeaderElection
        } else if in_group("system:nodes")
            && ((group.is_empty() && resource == "nodes") || (group == "coordination.k8s.io" && resource == "leases"))
        {
            Self::NodeHigh
        } else if in_group("system:nodes") {
            Self::System
        } else if controller || kube_system_sa {
            Self::WorkloadHigh
        } else if in_group("system:serviceaccounts") {
            Self::WorkloadLow
        } else if in_group("system:authenticated") || in_group("system:unauthenticated") {
            Self::GlobalDefault
        } else {
            Self::CatchAll
        }
    }
}

const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const KUBE_SCHEDULER: &str = "system:kube-scheduler";
const KUBE_SYSTEM_SERVICE_ACCOUNT: &str = "system:serviceaccount:kube-system:";

/// What requests of one level are queued by: one queue a flow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum FlowKey {
    /// An authenticated (or the anonymous) user, by name: the API server's
    /// `ByUser` distinguisher.
    User(String),
    /// trusted-local: one client connection (`None`: the unix socket).
    Connection(Option<SocketAddr>),
}

/// Where one request's seats come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flow {
    pub level: PriorityLevel,
    pub key: FlowKey,
}

impl Flow {
    /// A delegated-mode caller's read of `group`/`resource`.
    pub(crate) fn of_user(user: &str, groups: &[String], group: &str, resource: &str) -> Self {
        Self { level: PriorityLevel::of(user, groups, group, resource), key: FlowKey::User(user.to_owned()) }
    }

    /// A trusted-local client: every client is watchmux, so connections are
    /// what tells them apart.
    pub(crate) fn of_connection(addr: Option<SocketAddr>) -> Self {
        Self { level: PriorityLevel::GlobalDefault, key: FlowKey::Connection(addr) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(user: &str, groups: &[&str], group: &str, resource: &str) -> PriorityLevel {
        let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        PriorityLevel::of(user, &groups, group, resource)
    }

    #[test]
    fn levels_follow_the_default_flow_schemas_in_precedence_order() {
        use PriorityLevel::*;
        let authed = "system:authenticated";
        let rows: &[(&str, &[&str], &str, &str, PriorityLevel)] = &[
            ("admin", &["system:masters", authed], "", "pods", Exempt),
            // A node in system:masters is still exempt: exempt matches first.
            ("system:node:n1", &["system:nodes", "system:masters"], "", "nodes", Exempt),
            ("system:node:n1", &["system:nodes", authed], "", "nodes", NodeHigh),
            ("system:node:n1", &["system:nodes", authed], "coordination.k8s.io", "leases", NodeHigh),
            ("system:node:n1", &["system:nodes", authed], "", "pods", System),
            // `nodes` of another group is not the core Node.
            ("system:node:n1", &["system:nodes", authed], "example.com", "nodes", System),
            ("system:kube-controller-manager", &[authed], "coordination.k8s.io", "leases", LeaderElection),
            ("system:kube-controller-manager", &[authed], "apps", "deployments", WorkloadHigh),
            ("system:kube-scheduler", &[authed], "", "pods", WorkloadHigh),
            (
                "system:serviceaccount:kube-system:coredns",
                &["system:serviceaccounts", "system:serviceaccounts:kube-system", authed],
                "",
                "endpoints",
                WorkloadHigh,
            ),
            ("system:serviceaccount:team:app", &["system:serviceaccounts", authed], "", "configmaps", WorkloadLow),
            // A user merely named like a kube-system account is matched by
            // name, as the API server's ServiceAccount subject is.
            ("alice", &[authed], "", "pods", GlobalDefault),
            ("system:anonymous", &["system:unauthenticated"], "", "pods", GlobalDefault),
            ("nobody", &[], "", "pods", CatchAll),
        ];
        for (user, groups, group, resource, want) in rows {
            assert_eq!(level(user, groups, group, resource), *want, "{user} {groups:?} {group}/{resource}");
        }
    }

    #[test]
    fn every_limited_level_has_shares_and_a_distinct_name() {
        let mut names: Vec<_> = PriorityLevel::LIMITED.iter().map(|l| l.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PriorityLevel::LIMITED.len());
        assert!(PriorityLevel::LIMITED.iter().all(|l| l.shares() > 0));
        assert!(!PriorityLevel::LIMITED.contains(&PriorityLevel::Exempt));
    }
}
