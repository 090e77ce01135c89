//! Who a client is. This module owns the parts of authentication that no wire protocol
//! owns: the SASL mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) as exchanges of
//! opaque tokens, the users' SCRAM credentials as every broker caches them from the
//! metastore, and TLS server configurations that reload their files. A front end
//! frames the tokens (Kafka's SaslHandshake and SaslAuthenticate), wraps its sockets
//! with [`tls::TlsServer`], and puts the principal it established into the request's
//! context. And who may do what: the ACLs every broker caches, checked by the
//! `Service` for every front end (`acl`).
//!
//! A broker keeps what it has read of its cluster's security in one [`Security`]: the
//! users' credentials and the ACLs, both refreshed with the metadata.
//!
//! Principals are written as Kafka writes them: `User:alice` for a SASL user,
//! `User:CN=client,O=Org` for a TLS client certificate's subject.

pub mod acl;
pub mod listener;
pub mod sasl;
pub mod scram;
pub mod secrets;
pub mod tls;
mod users;

pub use acl::{Authorizer, Operation, ResourceType};
pub use listener::{ListenerSecurity, SecurityProtocol};
pub use sasl::{SaslError, SaslExchange, SaslMechanism, SaslStep};
pub use scram::ScramMechanism;
pub use users::Users;

/// The principal of a SASL user.
pub fn user_principal(user: &str) -> String {
    format!("User:{user}")
}

/// The users' SCRAM credentials and the ACLs with `[authorization]`, as this broker
/// last read them from the metastore.
pub struct Security {
    users: Users,
    authorizer: Authorizer,
}

impl Security {
    pub fn new(authorization: acl::AuthorizationSection) -> Self {
        Self {
            users: Users::default(),
            authorizer: Authorizer::new(authorization),
        }
    }

    /// The users' credentials, for SASL exchanges.
    pub fn users(&self) -> &Users {
        &self.users
    }

    /// The ACLs, for every authorization check.
    pub fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }
}
