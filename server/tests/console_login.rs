//! The HTTP listener over TLS with logins: the API answers 401 until a user logs in,
//! the session cookie is HttpOnly, SameSite=Strict and Secure, scripts may send
//! Basic credentials, ACLs are managed through the API as the console's ACL page does
//! (and refused to a user who may not), and logging out ends the session. The
//! console in a browser is driven by `compat/console_tests.py`.

mod common;

use std::sync::Arc;

use common::certs::Ca;
use common::{Broker, free_port, write_config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTPS request over a fresh connection: status, head and body.
async fn https(
    port: u16,
    ca: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let e = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {e}")
}

/// The `shale_session=…` pair of a Set-Cookie header in `head`.
fn session_cookie(head: &str) -> String {
    let line = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie set: {head}"));
    line.split_once(':')
        .unwrap()
        .1
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_asks_for_a_login_over_tls_and_manages_acls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Shale console CA");
    let server = ca.sign("console", true);
    let d = dir.path();
    std::fs::write(d.join("server.pem"), &server.cert).unwrap();
    std::fs::write(d.join("server.key"), &server.key).unwrap();
    std::fs::write(d.join("admin-password"), "admin-pw\n").unwrap();
    let (http_port, internal_port) = (free_port(), free_port());
    let dd = d.display();
    // The admin user is the inter-broker user: created at start from its password.
    let config = write_config(
        d,
        &format!(
            "[listeners.http]\nprotocol = \"http\"\nlisten = \"127.0.0.1:{http_port}\"\n\
             security_protocol = \"SASL_SSL\"\ntls_cert = \"{dd}/server.pem\"\ntls_key = \"{dd}/server.key\"\n\
             [listeners.internal]\nprotocol = \"grpc\"\nlisten = \"127.0.0.1:{internal_port}\"\n\
             security_protocol = \"SASL_PLAINTEXT\"\n\
             [cluster]\ninter_broker_listener = \"internal\"\ninter_broker_user = \"admin\"\n\
             inter_broker_password_file = \"{dd}/admin-password\"\n\
             [authorization]\nenable = true\nsuper_users = [\"User:admin\"]\n"
        ),
    );
    let broker = Broker::start(&["--config", config.to_str().unwrap()]).await;
    let ca = ca.pem.cert.as_str();
    let call = async |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        https(http_port, ca, method, path, headers, body).await
    };

    // Before a login: the page and the health check, but no API.
    let (status, _, page) = call("GET", "/", &[], "").await;
    assert_eq!(status, 200);
    assert!(page.contains("/console/app.js"));
    let (_, head, _) = call("GET", "/", &[], "").await;
    assert!(
        head.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{head}"
    );
    assert_eq!(call("GET", "/health", &[], "").await.0, 200);
    let (status, _, body) = call("GET", "/api/v1/topics", &[], "").await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("UNAUTHENTICATED"), "{body}");
    assert_eq!(call("GET", "/metrics", &[], "").await.0, 401);
    let (status, _, body) = call("GET", "/api/v1/whoami", &[], "").await;
    assert_eq!(status, 200);
    assert!(body.contains("\"login_required\":true"), "{body}");

    // A wrong password, an unknown user: refused, no cookie.
    for login in [
        r#"{"user":"admin","password":"guess"}"#,
        r#"{"user":"nobody","password":"admin-pw"}"#,
    ] {
        let (status, head, _) = call("POST", "/api/v1/login", &[], login).await;
        assert_eq!(status, 401);
        assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    }
    // The right one: a cookie scripts cannot read, sent only to this site, over TLS.
    let (status, head, body) = call(
        "POST",
        "/api/v1/login",
        &[],
        r#"{"user":"admin","password":"admin-pw"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("User:admin"));
    let set = head.to_ascii_lowercase();
    for attr in ["httponly", "samesite=strict", "secure"] {
        assert!(set.contains(attr), "cookie without {attr}: {head}");
    }
    let admin = session_cookie(&head);
    let as_admin = [("Cookie", admin.as_str())];
    let (status, _, body) = call(
        "POST",
        "/api/v1/topics",
        &as_admin,
        r#"{"name":"logs.app","partitions":1}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, _, body) = call("GET", "/api/v1/topics", &as_admin, "").await;
    assert_eq!(status, 200);
    assert!(body.contains("logs.app"), "{body}");
    assert_eq!(call("GET", "/metrics", &as_admin, "").await.0, 200);

    // Scripts: Basic credentials, checked the same way.
    let good = basic("admin", "admin-pw");
    let bad = basic("admin", "nope");
    assert_eq!(
        call("GET", "/api/v1/topics", &[("Authorization", &good)], "")
            .await
            .0,
        200
    );
    assert_eq!(
        call("GET", "/api/v1/topics", &[("Authorization", &bad)], "")
            .await
            .0,
        401
    );

    // ACLs, as the console's page manages them.
    let binding = r#"{"resource_type":"TOPIC","resource_name":"logs.","pattern_type":"PREFIXED","principal":"User:alice","operation":"READ"}"#;
    let (status, _, body) = call("POST", "/api/v1/acls", &as_admin, binding).await;
    assert_eq!(status, 201, "{body}");
    let (_, _, body) = call("GET", "/api/v1/acls", &as_admin, "").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["acls"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(v["acls"][0]["host"], "*");
    assert_eq!(v["acls"][0]["permission"], "ALLOW");
    let (status, _, body) = call(
        "POST",
        "/api/v1/acls",
        &as_admin,
        r#"{"resource_type":"TOPIC","resource_name":"x","principal":"User:a","operation":"READ_ALL"}"#,
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // Alice may read logs.*, but not manage ACLs or see other topics' configs.
    // As the admin, over the internal gRPC listener.
    let internal = format!("127.0.0.1:{internal_port}");
    let set_alice_password = |password: &str| {
        std::fs::write(d.join("alice-password"), password).unwrap();
        let out = std::process::Command::new(common::cli_bin())
            .args(["--bootstrap", &internal, "--auth-user", "admin"])
            .arg("--auth-password-file")
            .arg(d.join("admin-password"))
            .args(["user", "create", "alice", "--password-file"])
            .arg(d.join("alice-password"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    set_alice_password("alice-pw");
    let (status, head, _) = call(
        "POST",
        "/api/v1/login",
        &[],
        r#"{"user":"alice","password":"alice-pw"}"#,
    )
    .await;
    assert_eq!(status, 200);
    let alice = session_cookie(&head);
    let as_alice = [("Cookie", alice.as_str())];
    let (status, _, body) = call("GET", "/api/v1/acls", &as_alice, "").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("CLUSTER_AUTHORIZATION_FAILED"), "{body}");
    let (status, _, body) = call("GET", "/api/v1/topics", &as_alice, "").await;
    assert_eq!(status, 200);
    assert!(body.contains("logs.app"), "{body}");

    // Removing the binding; removing it twice is 404.
    let (status, _, body) = call("POST", "/api/v1/acls/delete", &as_admin, binding).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = call("POST", "/api/v1/acls/delete", &as_admin, binding).await;
    assert_eq!(status, 404);
    let (_, _, body) = call("GET", "/api/v1/topics", &as_alice, "").await;
    assert!(!body.contains("logs.app"), "alice still sees it: {body}");

    // A new password ends alice's session (her old credential is gone).
    set_alice_password("alice-new-pw");
    assert_eq!(call("GET", "/api/v1/topics", &as_alice, "").await.0, 401);

    // Logging out ends the session.
    let (status, _, _) = call("POST", "/api/v1/logout", &as_admin, "{}").await;
    assert_eq!(status, 200);
    assert_eq!(call("GET", "/api/v1/topics", &as_admin, "").await.0, 401);

    // Plaintext HTTP on the TLS port gets nothing.
    let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", http_port))
        .await
        .unwrap();
    plain
        .write_all(b"GET /api/v1/topics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        plain.read_to_end(&mut out),
    )
    .await;
    assert!(!String::from_utf8_lossy(&out).contains("200 OK"));
    assert!(
        !broker.log().contains("admin-pw") && !broker.log().contains("alice-pw"),
        "a password reached the log"
    );
}
