//! Authorization: Kafka's ACL model, and the one check every operation goes through.
//!
//! A binding says that a principal (`User:alice`, or `User:*`) from a host (or `*`)
//! is allowed or denied an operation on the resources a pattern names: a literal
//! name (or `*`, every resource of the type) or a prefix. An operation is allowed when
//! some ALLOW binding matches and no DENY binding does (DENY wins). ALL matches every
//! operation; READ, WRITE, DELETE and ALTER imply DESCRIBE, and ALTER_CONFIGS implies
//! DESCRIBE_CONFIGS, as in Kafka. Super users are allowed everything. A resource that
//! no binding names at all is open to everyone when
//! `allow_everyone_if_no_acl_found` is set, closed otherwise.
//!
//! Every broker keeps the bindings in memory, replaced whole at each metadata refresh
//! (on the metastore's change notification, or polled), so a check never waits.

use std::net::IpAddr;
use std::sync::RwLock;

use serde::Deserialize;

/// `[authorization]`: whether operations are checked, and the exceptions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationSection {
    /// Check every operation against the ACLs (Kafka's `authorizer.class.name`).
    /// Default: false (everyone may do everything).
    #[serde(default)]
    pub enable: bool,
    /// Principals allowed everything (`super.users`), e.g. `["User:admin"]`.
    #[serde(default)]
    pub super_users: Vec<String>,
    /// Resources no ACL names are open to everyone
    /// (`allow.everyone.if.no.acl.found`). Default: false.
    #[serde(default)]
    pub allow_everyone_if_no_acl_found: bool,
}

/// The principal of a client that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &[Self] = &[$(Self::$variant),*];

            /// Kafka's number.
            pub fn code(self) -> i8 {
                match self { $(Self::$variant => $code),* }
            }

            pub fn from_code(code: i8) -> Option<Self> {
                match code { $($code => Some(Self::$variant),)* _ => None }
            }

            /// Kafka's name (`TOPIC`, `PREFIXED`, `DESCRIBE_CONFIGS`, …).
            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => $text),* }
            }

            /// From Kafka's name, in any case, `-` for `_`.
            pub fn parse(s: &str) -> Option<Self> {
                let s = s.to_ascii_uppercase().replace('-', "_");
                Self::ALL.iter().copied().find(|v| v.name() == s)
            }
        }
    };
}

kafka_enum!(
    /// What a binding is about.
    ResourceType {
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
    }
);

kafka_enum!(
    /// How a binding's resource name matches.
    PatternType {
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    Operation {
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
    }
);

kafka_enum!(
    Permission {
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

/// The cluster resource's one name.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// One binding, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl Acl {
    /// A metastore row; `None` for one this broker cannot read.
    pub fn from_row(r: &shale_metastore::AclBinding) -> Option<Self> {
        Some(Self {
            resource_type: ResourceType::parse(&r.resource_type)?,
            resource_name: r.resource_name.clone(),
            pattern_type: PatternType::parse(&r.pattern_type)?,
            principal: r.principal.clone(),
            host: r.host.clone(),
            operation: Operation::parse(&r.operation)?,
            permission: Permission::parse(&r.permission)?,
        })
    }

    pub fn to_row(&self) -> shale_metastore::AclBinding {
        shale_metastore::AclBinding {
            resource_type: self.resource_type.name().into(),
            resource_name: self.resource_name.clone(),
            pattern_type: self.pattern_type.name().into(),
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation.name().into(),
            permission: self.permission.name().into(),
        }
    }

    /// Whether the binding's pattern names this resource.
    fn names(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.resource_name == name || self.resource_name == "*",
                PatternType::Prefixed => name.starts_with(&self.resource_name),
            }
    }

    fn applies_to(&self, principal: &str, host: Option<IpAddr>) -> bool {
        (self.principal == principal || self.principal == "User:*")
            && (self.host == "*" || host.is_some_and(|h| self.host.parse() == Ok(h)))
    }
}

/// Which operations a binding's operation grants (ALLOW) for `asked`.
fn allow_covers(granted: Operation, asked: Operation) -> bool {
    use Operation::*;
    granted == All
        || granted == asked
        || (asked == Describe && matches!(granted, Read | Write | Delete | Alter))
        || (asked == DescribeConfigs && granted == AlterConfigs)
}

/// The ACLs and the rules of the broker.
#[derive(Default)]
pub struct Authorizer {
    config: AuthorizationSection,
    acls: RwLock<Vec<Acl>>,
}

impl Authorizer {
    pub fn new(config: AuthorizationSection) -> Self {
        Self {
            config,
            acls: RwLock::new(Vec::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.enable
    }

    /// Replaces the bindings with the metastore's.
    pub fn replace(&self, rows: &[shale_metastore::AclBinding]) {
        let acls = rows.iter().filter_map(Acl::from_row).collect();
        *self.acls.write().unwrap_or_else(|p| p.into_inner()) = acls;
    }

    /// Whether `principal` (`None`: not authenticated) at `host` may do `op` on the
    /// resource.
    pub fn allows(
        &self,
        principal: Option<&str>,
        host: Option<IpAddr>,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.config.enable {
            return true;
        }
        let principal = principal.unwrap_or(ANONYMOUS);
        if self.config.super_users.iter().any(|s| s == principal) {
            return true;
        }
        let acls = self.acls.read().unwrap_or_else(|p| p.into_inner());
        let mut named = false;
        let mut allowed = false;
        for acl in acls.iter().filter(|a| a.names(resource_type, name)) {
            named = true;
            if !acl.applies_to(principal, host) {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation == Operation::All || acl.operation == op => {
                    return false;
                }
                Permission::Deny => {}
                Permission::Allow => allowed |= allow_covers(acl.operation, op),
            }
        }
        allowed || (!named && self.config.allow_everyone_if_no_acl_found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pt: PatternType,
        who: &str,
        op: Operation,
        p: Permission,
    ) -> shale_metastore::AclBinding {
        Acl {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: p,
        }
        .to_row()
    }

    fn authorizer(rows: &[shale_metastore::AclBinding], allow_if_none: bool) -> Authorizer {
        let a = Authorizer::new(AuthorizationSection {
            enable: true,
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: allow_if_none,
        });
        a.replace(rows);
        a
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn prefixes_literals_deny_and_implied_operations() {
        let a = authorizer(
            &[
                acl(Topic, "logs.", Prefixed, "User:alice", Read, Allow),
                acl(Topic, "logs.secret", Literal, "User:alice", All, Deny),
                acl(Topic, "*", Literal, "User:bob", Write, Allow),
                acl(Group, "g", Literal, "User:*", Read, Allow),
                acl(Topic, "billing", Literal, "User:carol", AlterConfigs, Allow),
            ],
            false,
        );
        let can = |who: &str, op, rt, name: &str| a.allows(Some(who), None, op, rt, name);
        assert!(can("User:alice", Read, Topic, "logs.app"));
        assert!(
            can("User:alice", Describe, Topic, "logs.app"),
            "READ implies DESCRIBE"
        );
        assert!(!can("User:alice", Write, Topic, "logs.app"));
        assert!(!can("User:alice", Read, Topic, "billing"));
        assert!(
            !can("User:alice", Read, Topic, "logs.secret"),
            "DENY wins over ALLOW"
        );
        assert!(!can("User:alice", Describe, Topic, "logs.secret"));
        assert!(can("User:bob", Write, Topic, "anything"));
        assert!(!can("User:bob", Read, Topic, "anything"));
        assert!(can("User:dave", Read, Group, "g"), "User:* is everyone");
        assert!(!can("User:dave", Delete, Group, "g"));
        assert!(can("User:carol", DescribeConfigs, Topic, "billing"));
        assert!(!can("User:carol", Describe, Topic, "billing"));
        assert!(
            can("User:admin", Delete, Cluster, CLUSTER_NAME),
            "super users"
        );
        assert!(!a.allows(None, None, Read, Topic, "logs.app"), "anonymous");
        // No ACL names the resource: closed, unless allow_everyone_if_no_acl_found.
        assert!(!can("User:alice", Read, Topic, "unnamed"));
        let open = authorizer(&[acl(Topic, "named", Literal, "User:x", Read, Allow)], true);
        assert!(open.allows(Some("User:y"), None, Read, Topic, "unnamed"));
        assert!(!open.allows(Some("User:y"), None, Read, Topic, "named"));
    }

    #[test]
    fn hosts_are_matched() {
        let mut row = acl(Topic, "t", Literal, "User:alice", Read, Allow);
        row.host = "10.0.0.1".into();
        let a = authorizer(&[row], false);
        let host = |h: &str| Some(h.parse().unwrap());
        assert!(a.allows(Some("User:alice"), host("10.0.0.1"), Read, Topic, "t"));
        assert!(!a.allows(Some("User:alice"), host("10.0.0.2"), Read, Topic, "t"));
        assert!(!a.allows(Some("User:alice"), None, Read, Topic, "t"));
    }

    #[test]
    fn disabled_allows_everything_and_names_round_trip() {
        let a = Authorizer::default();
        assert!(a.allows(None, None, Delete, Cluster, CLUSTER_NAME));
        for op in Operation::ALL {
            assert_eq!(Operation::from_code(op.code()), Some(*op));
            assert_eq!(
                Operation::parse(&op.name().to_lowercase().replace('_', "-")),
                Some(*op)
            );
        }
        assert_eq!(ResourceType::parse("topic"), Some(Topic));
        assert_eq!(ResourceType::parse("broker"), None);
    }
}
