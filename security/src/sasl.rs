//! SASL mechanisms as exchanges of opaque tokens, whatever protocol carries them:
//! PLAIN (RFC 4616), checked against the user's SCRAM credential, and SCRAM-SHA-256
//! and SCRAM-SHA-512 (two round trips).

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use ring::rand::{SecureRandom, SystemRandom};

use super::scram::{ClientFirst, ScramError, ScramMechanism, ServerFirst};
use super::users::Users;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    Scram(ScramMechanism),
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::Scram(m) => m.name(),
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Self::Plain),
            other => ScramMechanism::from_name(other).map(Self::Scram),
        }
    }
}

/// What a step of the exchange answers.
#[derive(Debug, PartialEq, Eq)]
pub enum SaslStep {
    /// Send this challenge; the client answers with its next token.
    Continue(Vec<u8>),
    /// Authenticated as `principal`; send `token` (empty for PLAIN) as the last answer.
    Done { principal: String, token: Vec<u8> },
}

/// Why an exchange failed. The client is told only that its credentials were not
/// accepted (the text of `Display`); the reason goes to the log and the audit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    #[error("Authentication failed: invalid credentials with SASL mechanism {mechanism}")]
    Failed {
        mechanism: &'static str,
        /// Who the client said it was, if it said.
        user: Option<String>,
        reason: String,
    },
    #[error("the SASL exchange is already complete")]
    Complete,
}

enum State {
    Start,
    /// SCRAM: the server's first message was sent.
    ScramFinal(Box<ServerFirst>),
    Done,
}

/// One client's authentication with one mechanism.
pub struct SaslExchange {
    mechanism: SaslMechanism,
    state: State,
}

impl SaslExchange {
    pub fn new(mechanism: SaslMechanism) -> Self {
        Self {
            mechanism,
            state: State::Start,
        }
    }

    pub fn mechanism(&self) -> SaslMechanism {
        self.mechanism
    }

    /// Takes the client's next token.
    pub async fn step(&mut self, users: &Users, token: &[u8]) -> Result<SaslStep, SaslError> {
        let name = self.mechanism.name();
        let fail = |user: Option<&str>, reason: String| SaslError::Failed {
            mechanism: name,
            user: user.map(str::to_string),
            reason,
        };
        match std::mem::replace(&mut self.state, State::Done) {
            State::Done => Err(SaslError::Complete),
            State::Start => match self.mechanism {
                SaslMechanism::Plain => {
                    let (user, password) =
                        parse_plain(token).map_err(|r| fail(None, r.to_string()))?;
                    if users.verify_password(&user, password).await {
                        Ok(SaslStep::Done {
                            principal: super::user_principal(&user),
                            token: Vec::new(),
                        })
                    } else {
                        Err(fail(Some(&user), "wrong password or unknown user".into()))
                    }
                }
                SaslMechanism::Scram(m) => {
                    let first = ClientFirst::parse(token).map_err(|e| fail(None, e.to_string()))?;
                    // An unknown user gets a made-up challenge and fails at the proof.
                    let credential = users.scram_or_decoy(&first.user, m);
                    let nonce = server_nonce().map_err(|r| fail(Some(&first.user), r))?;
                    let server = ServerFirst::new(m, first, credential, &nonce);
                    let challenge = server.message.clone().into_bytes();
                    self.state = State::ScramFinal(Box::new(server));
                    Ok(SaslStep::Continue(challenge))
                }
            },
            State::ScramFinal(server) => {
                let user = &server.first.user;
                match server.finish(token) {
                    Ok(last) => Ok(SaslStep::Done {
                        principal: super::user_principal(user),
                        token: last.into_bytes(),
                    }),
                    Err(e @ ScramError::BadProof) => Err(fail(
                        Some(user),
                        format!("{e}: wrong password or unknown user"),
                    )),
                    Err(e) => Err(fail(Some(user), e.to_string())),
                }
            }
        }
    }
}

/// PLAIN's message: `[authzid] NUL authcid NUL password`; an authorization id must
/// be the user itself.
fn parse_plain(token: &[u8]) -> Result<(String, &[u8]), &'static str> {
    let mut parts = token.splitn(3, |&b| b == 0);
    let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed PLAIN message");
    };
    let user = std::str::from_utf8(user).map_err(|_| "user name is not UTF-8")?;
    if user.is_empty() {
        return Err("empty user name");
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err("the authorization id differs from the user name");
    }
    Ok((user.to_string(), password))
}

fn server_nonce() -> Result<String, String> {
    let mut bytes = [0u8; 24];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no randomness for a nonce".to_string())?;
    // Base64 has no comma, so the nonce is a valid SCRAM attribute value.
    Ok(B64.encode(bytes))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use shale_records::fuzzing::{apply, cases, mutation};

    use super::*;

    /// Alice's credentials (made once: PBKDF2 is slow in a debug build).
    static USERS: std::sync::LazyLock<Users> = std::sync::LazyLock::new(|| {
        let users = Users::default();
        let mut rows = Vec::new();
        for m in ScramMechanism::ALL {
            let salt = b"fuzz salt".to_vec();
            let (stored_key, server_key) = m.keys(&m.salted_password(b"pw", &salt, 4096));
            rows.push(shale_metastore::ScramCredential {
                user: "alice".into(),
                mechanism: m.name().into(),
                salt,
                stored_key,
                server_key,
                iterations: 4096,
            });
        }
        users.replace(rows);
        users
    });

    fn mechanisms() -> [SaslMechanism; 3] {
        [
            SaslMechanism::Plain,
            SaslMechanism::Scram(ScramMechanism::Sha256),
            SaslMechanism::Scram(ScramMechanism::Sha512),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases(1_000)))]

        /// Mutated client messages, first and final, of every mechanism: an exchange
        /// goes on, fails with an error, or (by chance) succeeds only as `alice`;
        /// never a panic. The final message mutated is a well-formed one for the
        /// server's real challenge, so the mutations reach the proof check.
        #[test]
        fn mutated_sasl_exchanges_fail_cleanly(
            pick in 0usize..3,
            first in proptest::collection::vec(mutation(), 0..4),
            last in proptest::collection::vec(mutation(), 0..4),
            garbage in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let users = &*USERS;
                let m = mechanisms()[pick];
                let mut exchange = SaslExchange::new(m);
                let mut msg = match m {
                    SaslMechanism::Plain => b"\0alice\0pw".to_vec(),
                    SaslMechanism::Scram(_) => b"n,,n=alice,r=nonce".to_vec(),
                };
                for x in &first {
                    apply(&mut msg, 0, x);
                }
                match exchange.step(users, &msg).await {
                    Ok(SaslStep::Done { principal, .. }) => assert_eq!(principal, "User:alice"),
                    Err(_) => {}
                    Ok(SaslStep::Continue(challenge)) => {
                        let challenge = String::from_utf8(challenge).unwrap();
                        let nonce = challenge.split(',').next().unwrap().to_string();
                        let mut fin = format!("c=biws,{nonce},p=").into_bytes();
                        fin.extend_from_slice(&garbage);
                        for x in &last {
                            apply(&mut fin, 0, x);
                        }
                        if let Ok(SaslStep::Done { principal, .. }) = exchange.step(users, &fin).await {
                            assert_eq!(principal, "User:alice");
                        }
                        // A finished or failed exchange takes nothing more.
                        assert!(exchange.step(users, b"more").await.is_err());
                    }
                }
            });
        }
    }

    #[test]
    fn plain_messages_are_parsed() {
        assert_eq!(
            parse_plain(b"\0alice\0pw").unwrap(),
            ("alice".into(), &b"pw"[..])
        );
        assert_eq!(
            parse_plain(b"alice\0alice\0p\0w").unwrap(),
            ("alice".into(), &b"p\0w"[..])
        );
        assert!(parse_plain(b"bob\0alice\0pw").is_err());
        assert!(parse_plain(b"\0\0pw").is_err());
        assert!(parse_plain(b"alice").is_err());
    }

    #[test]
    fn mechanism_names_round_trip() {
        for name in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            assert_eq!(SaslMechanism::from_name(name).unwrap().name(), name);
        }
        assert_eq!(SaslMechanism::from_name("GSSAPI"), None);
    }
}
