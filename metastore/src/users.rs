//! Users: the SCRAM credentials clients authenticate with (Kafka's SASL/SCRAM and
//! PLAIN, and the console and gRPC logins).

/// What the server keeps of one user's password for one SCRAM mechanism (RFC 5802):
/// enough to check a proof or a password, never the password itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub user: String,
    /// Kafka's name of the mechanism: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    pub salt: Vec<u8>,
    /// H(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// One access control entry on a resource pattern, as Kafka writes it. The names are
/// Kafka's: resource type `TOPIC`/`GROUP`/`CLUSTER`, pattern type
/// `LITERAL`/`PREFIXED`, operation `READ`, `WRITE`, …, permission `ALLOW`/`DENY`.
/// The broker gives them their meaning; the metastore keeps each binding once.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource_type: String,
    pub resource_name: String,
    pub pattern_type: String,
    /// `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    pub operation: String,
    pub permission: String,
}
