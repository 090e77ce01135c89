//! Who calls the HTTP listener. On a listener whose `security_protocol` is
//! `SASL_PLAINTEXT` or `SASL_SSL` every API call (and `/metrics`) needs a user: the
//! console logs in (`POST /api/v1/login` with the user's password, checked against
//! the user's SCRAM credential) and then carries a session cookie; scripts may send
//! `Authorization: Basic` instead. Without a user such a call is answered 401. On
//! other listeners the caller is the client certificate's subject (`SSL` with
//! `tls_client_ca`), else anonymous.
//!
//! The cookie is `HttpOnly` and `SameSite=Strict` (and `Secure` over TLS), so a page
//! of another site can neither read it nor make a browser send it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{FromRef, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use serde_json::json;
use shale_security::{Users, user_principal};
use shale_service::RequestContext;

use crate::{ApiError, AppState};

/// How long a console session lasts after its login.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most: beyond, the oldest is dropped.
const MAX_SESSIONS: usize = 10_000;
/// How long a refused login waits before its answer.
const FAILURE_DELAY: Duration = Duration::from_millis(100);

/// The connection a request came on: the client's address, and its certificate's
/// subject if it showed one.
#[derive(Debug, Clone)]
pub(crate) struct PeerInfo {
    pub addr: SocketAddr,
    pub principal: Option<String>,
}

/// A logged-in console session.
struct Session {
    user: String,
    /// The StoredKey of the credential the login matched: the session ends when the
    /// user's credential changes or goes.
    key: Vec<u8>,
    expires: Instant,
}

/// Logged-in console sessions, by random token.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn create(&self, user: String, key: Vec<u8>) -> String {
        let mut token = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut token)
            .expect("the system's random source failed");
        let token = token.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(t, _)| t.clone())
        {
            map.remove(&oldest);
        }
        let session = Session {
            user,
            key,
            expires: now + SESSION_LIFETIME,
        };
        map.insert(token.clone(), session);
        token
    }

    /// The principal of a live session whose user still has the credential it
    /// logged in with.
    fn principal(&self, token: &str, users: &Users) -> Option<String> {
        let mut map = self.lock();
        let s = map.get(token)?;
        if s.expires > Instant::now() && users.credential_key(&s.user).as_ref() == Some(&s.key) {
            return Some(user_principal(&s.user));
        }
        map.remove(token);
        None
    }

    fn remove(&self, token: &str) {
        self.lock().remove(token);
    }
}

/// Who a request comes from, as the middleware established it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    pub principal: Option<String>,
    pub peer: Option<SocketAddr>,
}

/// The state of a handler and its caller: what `ctx()` needs.
pub(crate) struct Call {
    pub state: AppState,
    pub caller: Caller,
}

impl Call {
    pub(crate) fn ctx(&self) -> RequestContext {
        let mut ctx = RequestContext::new(self.state.listener.clone()).with_peer(self.caller.peer);
        ctx.principal = self.caller.principal.clone();
        ctx
    }
}

impl std::ops::Deref for Call {
    type Target = AppState;
    fn deref(&self) -> &AppState {
        &self.state
    }
}

impl<S> FromRequestParts<S> for Call
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            state: AppState::from_ref(state),
            caller: parts
                .extensions
                .get::<Caller>()
                .cloned()
                .unwrap_or_default(),
        })
    }
}

/// The session cookie's name: over TLS with the `__Host-` prefix, which browsers
/// accept only from this host, over HTTPS and for every path (so another service on
/// the same host cannot plant one).
fn cookie_name(tls: bool) -> &'static str {
    if tls {
        "__Host-shale_session"
    } else {
        "shale_session"
    }
}

/// The session token of the cookie `name`; none when the request carries that cookie
/// twice (one may have been planted by another service of the same site).
fn cookie_token(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .filter(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string());
    let token = found.next()?;
    found.next().is_none().then_some(token)
}

fn basic(headers: &HeaderMap) -> Option<(String, String)> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(v.strip_prefix("Basic ")?.trim())
        .ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_string(), p.to_string()))?;
    (!user.is_empty()).then_some((user, password))
}

fn unauthenticated(message: &str) -> Response {
    ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", message).into_response()
}

/// Paths served to anyone: the health check, the console's assets (its login form
/// among them), logging in, and who the caller is.
fn open_path(path: &str) -> bool {
    matches!(
        path,
        "/health"
            | "/"
            | "/api/v1/login"
            | "/api/v1/logout"
            | "/api/v1/whoami"
            | "/api/v1/openapi.json"
    ) || path.starts_with("/console/")
}

/// Establishes the caller of every request (see the module's documentation).
pub(crate) async fn authenticate(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<PeerInfo>>()
        .map(|c| c.0.clone());
    let mut caller = Caller {
        principal: peer.as_ref().and_then(|p| p.principal.clone()),
        peer: peer.map(|p| p.addr),
    };
    if state.login_required {
        caller.principal = None;
        let users = state.service.broker().security.users();
        let cookie = cookie_token(req.headers(), cookie_name(state.tls));
        if let Some(p) = cookie.and_then(|t| state.sessions.principal(&t, users)) {
            caller.principal = Some(p);
        } else if let Some((user, password)) = basic(req.headers()) {
            if !state
                .service
                .broker()
                .security
                .users()
                .verify_password_cached(&user, password.as_bytes())
                .await
            {
                tracing::warn!(target: "audit", listener = %state.listener, peer = ?caller.peer, user,
                    "authentication failed");
                tokio::time::sleep(FAILURE_DELAY).await;
                return unauthenticated("invalid user or password");
            }
            caller.principal = Some(user_principal(&user));
        } else if !open_path(req.uri().path()) {
            return unauthenticated(
                "log in first: POST /api/v1/login, or send Authorization: Basic",
            );
        }
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

#[derive(Deserialize)]
pub(crate) struct Login {
    user: String,
    password: String,
}

/// `POST /api/v1/login`: a session cookie for a user and password.
pub(crate) async fn login(call: Call, Json(login): Json<Login>) -> Response {
    if !call.login_required {
        return ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "this listener does not take logins (its security_protocol has no SASL)",
        )
        .into_response();
    }
    let users = call.service.broker().security.users();
    let key = match login.user.is_empty() {
        true => None,
        false => {
            users
                .verify_password_key(&login.user, login.password.as_bytes())
                .await
        }
    };
    let Some(key) = key else {
        tracing::warn!(target: "audit", listener = %call.listener, peer = ?call.caller.peer,
            user = login.user, "console login failed");
        tokio::time::sleep(FAILURE_DELAY).await;
        return unauthenticated("invalid user or password");
    };
    let principal = user_principal(&login.user);
    let token = call.sessions.create(login.user, key);
    let cookie = format!(
        "{}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        cookie_name(call.tls),
        SESSION_LIFETIME.as_secs(),
        if call.tls { "; Secure" } else { "" }
    );
    (
        [(header::SET_COOKIE, cookie)],
        Json(json!({ "principal": principal })),
    )
        .into_response()
}

/// `POST /api/v1/logout`: ends the session of the cookie.
pub(crate) async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let name = cookie_name(state.tls);
    if let Some(t) = cookie_token(&headers, name) {
        state.sessions.remove(&t);
    }
    let secure = if state.tls { "; Secure" } else { "" };
    let expired = format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}");
    ([(header::SET_COOKIE, expired)], Json(json!({}))).into_response()
}

/// `GET /api/v1/whoami`: the caller's principal, and whether this listener needs a
/// login.
pub(crate) async fn whoami(call: Call) -> Response {
    Json(json!({
        "principal": call.caller.principal,
        "login_required": call.login_required,
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_and_basic_credentials_are_read_and_sessions_expire_on_removal() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; shale_session=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_token(&h, "shale_session").as_deref(), Some("abc"));
        assert_eq!(cookie_token(&h, "__Host-shale_session"), None);
        let mut twice = h.clone();
        twice.append(header::COOKIE, "shale_session=planted".parse().unwrap());
        assert_eq!(cookie_token(&twice, "shale_session"), None, "two copies");
        let e = base64::engine::general_purpose::STANDARD.encode("alice:p:w");
        h.insert(header::AUTHORIZATION, format!("Basic {e}").parse().unwrap());
        assert_eq!(basic(&h), Some(("alice".into(), "p:w".into())));
        h.insert(header::AUTHORIZATION, "Basic ???".parse().unwrap());
        assert_eq!(basic(&h), None);
        // A session lives while its user keeps the credential it logged in with.
        let users = Users::default();
        let m = shale_security::ScramMechanism::Sha512;
        let row = |password: &str| {
            let (stored_key, server_key) =
                m.keys(&m.salted_password(password.as_bytes(), b"s", 4096));
            shale_metastore::ScramCredential {
                user: "alice".into(),
                mechanism: m.name().into(),
                salt: b"s".to_vec(),
                stored_key,
                server_key,
                iterations: 4096,
            }
        };
        users.replace(vec![row("first")]);
        let s = Sessions::default();
        let t = s.create("alice".into(), users.credential_key("alice").unwrap());
        assert_eq!(t.len(), 64);
        assert_eq!(s.principal(&t, &users).as_deref(), Some("User:alice"));
        assert_eq!(s.principal("nope", &users), None);
        users.replace(vec![row("second")]);
        assert_eq!(s.principal(&t, &users), None, "the password changed");
        let t = s.create("alice".into(), users.credential_key("alice").unwrap());
        s.remove(&t);
        assert_eq!(s.principal(&t, &users), None, "logged out");
    }
}
