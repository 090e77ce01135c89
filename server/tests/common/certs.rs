//! Test certificates, made with rcgen: a CA, and server and client certificates it
//! signs.

/// A certificate and its key, PEM.
pub(crate) struct Pem {
    pub cert: String,
    pub key: String,
}

/// A CA and what it signs.
pub(crate) struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    pub pem: Pem,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let key_pem = key.serialize_pem();
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).unwrap();
        let cert = issuer.pem();
        Self {
            issuer,
            pem: Pem { cert, key: key_pem },
        }
    }

    /// A leaf certificate: a server's for localhost, or a client's named `cn`.
    pub(crate) fn sign(&self, cn: &str, server: bool) -> Pem {
        let names = if server {
            vec!["localhost".to_string(), "127.0.0.1".to_string()]
        } else {
            Vec::new()
        };
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Shale Tests");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}
