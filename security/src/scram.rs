//! SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka use them): the
//! keys a server keeps, and the server side of the exchange.
//!
//! The server never holds a password: a user's credential is a salt, an iteration
//! count, `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`, where
//! `SaltedPassword = PBKDF2-HMAC(password, salt, iterations)`. A client proves it
//! knows the password without sending it; the server proves it knows the credential.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2};

/// Kafka's bounds on a SCRAM credential's iteration count.
pub const MIN_ITERATIONS: i32 = 4096;
pub const MAX_ITERATIONS: i32 = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [Self; 2] = [Self::Sha256, Self::Sha512];

    /// Kafka's (and SASL's) name: `SCRAM-SHA-256`, `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mechanism's number in Kafka's ScramCredential APIs (1 and 2).
    pub fn kafka_type(self) -> i8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha512 => 2,
        }
    }

    pub fn from_kafka_type(t: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Sha256 => hmac::HMAC_SHA256,
            Self::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Self::Sha256 => &digest::SHA256,
            Self::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Self::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Self::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// The length of the hash, and so of a salted password and of both keys.
    pub fn output_len(self) -> usize {
        self.digest().output_len()
    }

    /// `SaltedPassword`: PBKDF2 of the password (CPU-heavy by design: run it off the
    /// async runtime).
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.output_len()];
        let iterations = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
        pbkdf2::derive(self.pbkdf2(), iterations, salt, password, &mut out);
        out
    }

    /// (StoredKey, ServerKey) of a salted password.
    pub fn keys(self, salted_password: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let key = hmac::Key::new(self.hmac(), salted_password);
        let client_key = hmac::sign(&key, b"Client Key");
        let stored_key = digest::digest(self.digest(), client_key.as_ref());
        let server_key = hmac::sign(&key, b"Server Key");
        (stored_key.as_ref().to_vec(), server_key.as_ref().to_vec())
    }

    fn sign(self, key: &[u8], message: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), message)
            .as_ref()
            .to_vec()
    }
}

/// What a broker keeps of one user's password for one mechanism.
#[derive(Debug, Clone)]
pub struct StoredCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl StoredCredential {
    /// Whether `password` is the one this credential was made from (PLAIN logins).
    pub fn matches_password(&self, mechanism: ScramMechanism, password: &[u8]) -> bool {
        let salted = mechanism.salted_password(password, &self.salt, self.iterations.max(1) as u32);
        let (stored_key, _) = mechanism.keys(&salted);
        constant_time_eq(&stored_key, &self.stored_key)
    }
}

/// Compares in time independent of where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a SCRAM message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("SCRAM channel binding is not supported")]
    ChannelBinding,
    #[error("SCRAM delegation tokens are not supported")]
    TokenAuth,
    #[error("the SCRAM authorization id differs from the user name")]
    AuthzId,
    #[error("the SCRAM nonce does not match")]
    Nonce,
    #[error("invalid credentials")]
    BadProof,
}

/// The client's first message, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub user: String,
    pub nonce: String,
    /// `n,,` (or `y,,`): repeated, base64-encoded, in the final message.
    pub gs2_header: String,
    pub bare: String,
}

impl ClientFirst {
    pub fn parse(msg: &[u8]) -> Result<Self, ScramError> {
        let msg = std::str::from_utf8(msg).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let mut parts = msg.splitn(3, ',');
        let (Some(cbind), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(ScramError::Malformed("no GS2 header"));
        };
        match cbind {
            "n" | "y" => {}
            c if c.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("bad channel binding flag")),
        }
        let mut user = None;
        let mut nonce = None;
        for (i, attr) in bare.split(',').enumerate() {
            let (key, value) = attr
                .split_once('=')
                .ok_or(ScramError::Malformed("attribute without '='"))?;
            match (i, key) {
                (0, "m") => return Err(ScramError::Malformed("mandatory extension")),
                (0, "n") => user = Some(decode_saslname(value)?),
                (1, "r") if !value.is_empty() => nonce = Some(value.to_string()),
                (0 | 1, _) => return Err(ScramError::Malformed("expected n= then r=")),
                (_, "tokenauth") if value.eq_ignore_ascii_case("true") => {
                    return Err(ScramError::TokenAuth);
                }
                // Other extensions are ignored, as Kafka does.
                _ => {}
            }
        }
        let (Some(user), Some(nonce)) = (user, nonce) else {
            return Err(ScramError::Malformed("missing user or nonce"));
        };
        if user.is_empty() {
            return Err(ScramError::Malformed("empty user name"));
        }
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if decode_saslname(authzid)? != user {
                return Err(ScramError::AuthzId);
            }
        } else if !authzid.is_empty() {
            return Err(ScramError::Malformed("bad authorization id"));
        }
        Ok(Self {
            user,
            nonce,
            gs2_header: format!("{cbind},{authzid},"),
            bare: bare.to_string(),
        })
    }
}

/// `=2C` is a comma and `=3D` an equals sign in a SCRAM user name; any other `=` is
/// malformed.
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The server's side after its first message: what it needs to check the client's
/// proof and sign its answer.
#[derive(Debug)]
pub struct ServerFirst {
    pub mechanism: ScramMechanism,
    pub first: ClientFirst,
    pub message: String,
    nonce: String,
    credential: StoredCredential,
}

impl ServerFirst {
    /// Answers `first` for a user holding `credential`; `server_nonce` is random and
    /// printable (no comma).
    pub fn new(
        mechanism: ScramMechanism,
        first: ClientFirst,
        credential: StoredCredential,
        server_nonce: &str,
    ) -> Self {
        let nonce = format!("{}{server_nonce}", first.nonce);
        let message = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        Self {
            mechanism,
            first,
            message,
            nonce,
            credential,
        }
    }

    /// Checks the client's final message; on success, the server's final message
    /// (`v=` and its signature).
    pub fn finish(&self, client_final: &[u8]) -> Result<String, ScramError> {
        let msg =
            std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut attrs = without_proof.split(',');
        let channel = attrs
            .next()
            .and_then(|a| a.strip_prefix("c="))
            .ok_or(ScramError::Malformed("no channel binding"))?;
        let nonce = attrs
            .next()
            .and_then(|a| a.strip_prefix("r="))
            .ok_or(ScramError::Malformed("no nonce"))?;
        if B64.decode(channel).ok().as_deref() != Some(self.first.gs2_header.as_bytes()) {
            return Err(ScramError::ChannelBinding);
        }
        // librdkafka (2.0) repeats its own nonce in front of the whole one; Kafka
        // accepts a nonce that ends with the server's, and so does Shale. The proof
        // covers the message as sent either way.
        if !nonce.ends_with(&self.nonce) {
            return Err(ScramError::Nonce);
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let m = self.mechanism;
        if proof.len() != m.output_len() {
            return Err(ScramError::BadProof);
        }
        let auth_message = format!("{},{},{without_proof}", self.first.bare, self.message);
        let signature = m.sign(&self.credential.stored_key, auth_message.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let stored_key = digest::digest(m.digest(), &client_key);
        if !constant_time_eq(stored_key.as_ref(), &self.credential.stored_key) {
            return Err(ScramError::BadProof);
        }
        let server_signature = m.sign(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's side, as RFC 5802 describes it.
    fn client_final(
        m: ScramMechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        client_final_with(m, password, client_first_bare, server_first, "")
    }

    /// `repeat`: sent in front of the nonce in the final message (librdkafka's form).
    fn client_final_with(
        m: ScramMechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        repeat: &str,
    ) -> (String, Vec<u8>) {
        let mut salt = None;
        let mut iterations = 0;
        let mut nonce = "";
        for attr in server_first.split(',') {
            match attr.split_at(2) {
                ("r=", v) => nonce = v,
                ("s=", v) => salt = Some(B64.decode(v).unwrap()),
                ("i=", v) => iterations = v.parse().unwrap(),
                _ => {}
            }
        }
        let salted = m.salted_password(password.as_bytes(), &salt.unwrap(), iterations);
        let client_key = m.sign(&salted, b"Client Key");
        let stored_key = digest::digest(m.digest(), &client_key);
        let without_proof = format!("c=biws,r={repeat}{nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let sig = m.sign(stored_key.as_ref(), auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        let server_key = m.sign(&salted, b"Server Key");
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            m.sign(&server_key, auth.as_bytes()),
        )
    }

    fn credential(m: ScramMechanism, password: &str) -> StoredCredential {
        let salt = b"some salt".to_vec();
        let (stored_key, server_key) = m.keys(&m.salted_password(password.as_bytes(), &salt, 4096));
        StoredCredential {
            salt,
            stored_key,
            server_key,
            iterations: 4096,
        }
    }

    #[test]
    fn rfc_7677_example_proves_and_signs() {
        // RFC 7677 section 3: user "user", password "pencil".
        let m = ScramMechanism::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let (stored_key, server_key) = m.keys(&m.salted_password(b"pencil", &salt, 4096));
        let cred = StoredCredential {
            salt,
            stored_key,
            server_key,
            iterations: 4096,
        };
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let server = ServerFirst::new(m, first, cred, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(
            server.message,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let answer = server
            .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(answer, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn both_mechanisms_accept_the_password_and_refuse_another() {
        for m in ScramMechanism::ALL {
            let cred = credential(m, "secret");
            assert!(cred.matches_password(m, b"secret"));
            assert!(!cred.matches_password(m, b"Secret"));
            let bare = "n=alice,r=abc";
            let server = ServerFirst::new(
                m,
                ClientFirst::parse(format!("n,,{bare}").as_bytes()).unwrap(),
                cred.clone(),
                "xyz",
            );
            let (good, signature) = client_final(m, "secret", bare, &server.message);
            let answer = server.finish(good.as_bytes()).unwrap();
            assert_eq!(answer, format!("v={}", B64.encode(signature)));
            let (bad, _) = client_final(m, "wrong", bare, &server.message);
            assert_eq!(server.finish(bad.as_bytes()), Err(ScramError::BadProof));
            let replayed = good.replace("r=abcxyz", "r=abcxyq");
            assert_eq!(server.finish(replayed.as_bytes()), Err(ScramError::Nonce));
            // librdkafka's form: its nonce again in front (the proof then covers it).
            let (doubled, _) = client_final_with(m, "secret", bare, &server.message, "abc");
            assert!(server.finish(doubled.as_bytes()).is_ok());
        }
    }

    #[test]
    fn client_first_messages_are_checked() {
        let ok = ClientFirst::parse(b"n,,n=a=2Cb=3Dc,r=nonce,tokenauth=false").unwrap();
        assert_eq!((ok.user.as_str(), ok.nonce.as_str()), ("a,b=c", "nonce"));
        assert_eq!(ok.gs2_header, "n,,");
        let authz = ClientFirst::parse(b"n,a=bob,n=bob,r=x").unwrap();
        assert_eq!(authz.gs2_header, "n,a=bob,");
        for (msg, err) in [
            (&b"p=tls-unique,,n=a,r=x"[..], ScramError::ChannelBinding),
            (b"n,a=eve,n=bob,r=x", ScramError::AuthzId),
            (b"n,,n=bob,r=x,tokenauth=true", ScramError::TokenAuth),
            (
                b"n,,r=x,n=bob",
                ScramError::Malformed("expected n= then r="),
            ),
            (
                b"n,,n=b=ob,r=x",
                ScramError::Malformed("bad escape in user name"),
            ),
            (b"n,,n=,r=x", ScramError::Malformed("empty user name")),
            (b"n,,n=bob", ScramError::Malformed("missing user or nonce")),
            (b"n=bob,r=x", ScramError::Malformed("no GS2 header")),
            (b"\xff,,n=a,r=b", ScramError::Malformed("not UTF-8")),
        ] {
            assert_eq!(
                ClientFirst::parse(msg),
                Err(err),
                "{:?}",
                String::from_utf8_lossy(msg)
            );
        }
    }
}
