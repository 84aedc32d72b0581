//! Token authentication without Keystone: the broker's own users, and the answers Keystone and
//! keystonemiddleware give, so that OpenStack clients work unchanged.
//!
//! With [`ZaqarAuth::Tokens`], a client gets a token with Keystone v3's password method
//! (`POST /v3/auth/tokens` on the gateway's own listener, so a client's `auth_url` is
//! `http://<gateway>/v3`) and sends it as `X-Auth-Token` on every `/v2` request. The token
//! names the user and, when the request was scoped to a project, the project: it replaces
//! `X-Project-Id`, as keystonemiddleware replaces it. The user's permissions on the project's
//! vhost decide what it may do (see [`crate::caller`]). Tokens live in memory for an hour, at
//! most [`MAX_TOKENS`] at once; a restart forgets them (clients ask again, as for an expired
//! one).

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;

use crate::Zaqar;
use crate::message::now_ms;

/// How long a token is valid, ms (Keystone's default `[token] expiration`).
const TOKEN_LIFETIME_MS: i64 = 3_600_000;
/// Tokens held at once; past this, issuing first forgets the expired ones, then refuses (503).
pub(crate) const MAX_TOKENS: usize = 100_000;

/// How requests to the gateway authenticate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZaqarAuth {
    /// Zaqar's `noauth`: `X-Project-Id` names the project, nothing is checked.
    #[default]
    NoAuth,
    /// Keystone-free tokens of the broker's users (see the module).
    Tokens,
}

/// What a token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    /// The user it was issued to.
    pub(crate) user: String,
    /// The project it is scoped to, if any.
    pub(crate) project: Option<String>,
    /// When it stops being valid, ms since the epoch.
    expires_at: i64,
}

/// The tokens issued and still remembered.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    by_id: Mutex<HashMap<String, Token>>,
}

impl Tokens {
    /// Issues a token; `None` when [`MAX_TOKENS`] unexpired ones exist.
    fn issue(&self, user: String, project: Option<String>, now: i64) -> Option<(String, Token)> {
        let mut by_id = self.by_id.lock();
        if by_id.len() >= MAX_TOKENS {
            by_id.retain(|_, token| token.expires_at > now);
            if by_id.len() >= MAX_TOKENS {
                return None;
            }
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let token = Token { user, project, expires_at: now + TOKEN_LIFETIME_MS };
        by_id.insert(id.clone(), token.clone());
        Some((id, token))
    }

    /// The valid token `id`, if it is one.
    pub(crate) fn check(&self, id: &str, now: i64) -> Option<Token> {
        let mut by_id = self.by_id.lock();
        match by_id.get(id) {
            Some(token) if token.expires_at > now => Some(token.clone()),
            Some(_) => {
                by_id.remove(id);
                None
            }
            None => None,
        }
    }
}

/// Keystone's error body, `{"error": {"code", "title", "message"}}`.
fn keystone_error(status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or_default();
    (status, axum::Json(json!({"error": {"code": status.as_u16(), "title": title, "message": message}})))
        .into_response()
}

/// keystonemiddleware's answer to a `/v2` request without a valid token.
pub(crate) fn unauthorized() -> Response {
    let mut response = keystone_error(StatusCode::UNAUTHORIZED, "The request you have made requires authentication.");
    response.headers_mut().insert("www-authenticate", HeaderValue::from_static("Keystone uri=\"/v3\""));
    response
}

/// The user name and password of Keystone v3's password method, and the project scope (by id
/// or name: both name the vhost here).
fn credentials(body: &Value) -> Option<(String, String, Option<String>)> {
    let identity = body.pointer("/auth/identity")?;
    let methods = identity.get("methods")?.as_array()?;
    if methods.len() != 1 || methods.first()?.as_str()? != "password" {
        return None;
    }
    let user = identity.pointer("/password/user")?;
    let name = user.get("name").or_else(|| user.get("id"))?.as_str()?.to_owned();
    let password = user.get("password")?.as_str()?.to_owned();
    let project = body.pointer("/auth/scope/project").map(|p| p.get("id").or_else(|| p.get("name")));
    let project = match project {
        None => None,
        Some(named) => Some(named?.as_str()?.to_owned()),
    };
    Some((name, password, project))
}

/// `POST /v3/auth/tokens`: Keystone v3's password method against the broker's users. 201 with
/// `X-Subject-Token` and the token's description (its catalog lists this gateway as the
/// `messaging` service); 401 for wrong credentials, a method other than `password`, or a
/// project the user has no permissions in; 400 for a body that is not such a request.
pub(crate) async fn issue(State(zaqar): State<Arc<Zaqar>>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if zaqar.config.auth != ZaqarAuth::Tokens {
        return keystone_error(StatusCode::NOT_FOUND, "Token authentication is off on this gateway.");
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return keystone_error(StatusCode::BAD_REQUEST, "The request body is not JSON.");
    };
    if body.pointer("/auth/identity/methods").is_none() {
        return keystone_error(StatusCode::BAD_REQUEST, "'identity' with 'methods' is a required property.");
    }
    let Some((name, password, project)) = credentials(&body) else {
        return unauthorized();
    };
    let access = zaqar.broker.access();
    let Some(user) = access.authenticate(&name, &password) else {
        return unauthorized();
    };
    if project.as_deref().is_some_and(|vhost| !access.can_open(&user, vhost)) {
        return unauthorized();
    }
    let now = now_ms();
    let Some((id, token)) = zaqar.tokens.issue(user.name.clone(), project, now) else {
        return keystone_error(StatusCode::SERVICE_UNAVAILABLE, "Too many tokens are in use.");
    };
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let time = |ms: i64| format!("{}.000000Z", charon_model::calendar::UtcTime::from_epoch(ms / 1000).format('T'));
    let domain = json!({"id": "default", "name": "Default"});
    let mut description = json!({
        "methods": ["password"],
        "user": {"id": token.user, "name": token.user, "domain": domain},
        "issued_at": time(now),
        "expires_at": time(token.expires_at),
        "roles": [],
        "catalog": [{
            "type": "messaging",
            "name": "zaqar",
            "id": "charon-zaqar",
            "endpoints": [{"id": "charon-zaqar-public", "interface": "public", "region": "RegionOne",
                           "region_id": "RegionOne", "url": format!("http://{host}")}],
        }],
    });
    if let (Some(project), Some(fields)) = (&token.project, description.as_object_mut()) {
        fields.insert("project".to_owned(), json!({"id": project, "name": project, "domain": domain}));
    }
    let mut response = (StatusCode::CREATED, axum::Json(json!({"token": description}))).into_response();
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-subject-token", value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_and_are_bounded() {
        let tokens = Tokens::default();
        let (id, token) = tokens.issue("u".into(), Some("p".into()), 1_000).unwrap();
        assert_eq!(id.len(), 32);
        assert_eq!(tokens.check(&id, 1_000 + TOKEN_LIFETIME_MS - 1), Some(token));
        assert_eq!(tokens.check(&id, 1_000 + TOKEN_LIFETIME_MS), None, "expired");
        assert_eq!(tokens.check(&id, 0), None, "and forgotten");
        assert_eq!(tokens.check("nope", 0), None);
        for _ in 0..MAX_TOKENS {
            tokens.issue("u".into(), None, 0).unwrap();
        }
        assert!(tokens.issue("u".into(), None, 1).is_none(), "full of valid tokens");
        assert!(tokens.issue("u".into(), None, TOKEN_LIFETIME_MS).is_some(), "the expired ones make room");
        assert_eq!(tokens.by_id.lock().len(), 1);
    }

    #[test]
    fn only_the_password_method_gives_credentials() {
        let request = |methods: Value, scope: Value| {
            json!({"auth": {"identity": {"methods": methods, "password": {"user": {"name": "u", "password": "p",
                "domain": {"id": "default"}}}}, "scope": scope}})
        };
        assert_eq!(
            credentials(&request(json!(["password"]), json!({"project": {"id": "p1"}}))),
            Some(("u".into(), "p".into(), Some("p1".into())))
        );
        assert_eq!(
            credentials(&request(json!(["password"]), json!({"project": {"name": "n", "domain": {"id": "d"}}}))),
            Some(("u".into(), "p".into(), Some("n".into())))
        );
        assert_eq!(credentials(&request(json!(["token"]), Value::Null)), None);
        assert_eq!(credentials(&request(json!(["password", "totp"]), Value::Null)), None);
        assert_eq!(credentials(&request(json!(["password"]), json!({"project": {"id": 7}}))), None);
    }
}
