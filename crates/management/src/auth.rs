//! HTTP basic authentication against the broker's users, under the broker's login policy, and
//! RabbitMQ's management authorisation rules (`rabbit_web_dispatch_access_control`): every
//! request needs a user with a management tag; endpoints then ask for an administrator, a
//! monitor, a user who may use the vhost named, or a policymaker there.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use charon_engine::{Broker, User};

use crate::error::ApiError;

/// The mechanism named in the login policy's log line.
const MECHANISM: &str = "HTTP basic";

/// A user the embedding program already authenticated (the web UI's session), put in a
/// request's extensions before it calls the router in-process. Requests from the network never
/// carry extensions, so only code linked into the broker can vouch for a user this way; the
/// management-tag rule still applies to it.
#[derive(Clone, Debug)]
pub struct Authenticated(User);

impl Authenticated {
    /// Vouches for `user`.
    #[must_use]
    pub fn new(user: User) -> Self {
        Self(user)
    }
}

/// Why a management login was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Unknown user, wrong password, or refused by the login policy (`loopback_users`).
    #[error("Not_Authorized")]
    Credentials,
    /// The user has no management tag.
    #[error("Not management user")]
    NotManagement,
}

/// A management login as the API applies it to basic auth, for anything that logs users in
/// over the management port (the web UI's login form too).
///
/// With a `peer` the login goes through the broker's login policy: it first waits out the
/// throttle's delay for that address (whatever the outcome, so a slow answer says nothing),
/// then `loopback_users` applies, and a refusal is logged and counted under `mechanism`.
/// Without one (in-process callers, the unit tests) only the users are checked. A user without
/// a management tag is refused as RabbitMQ refuses it.
///
/// # Errors
/// [`Refusal`] says why.
pub async fn log_in(
    broker: &Broker,
    peer: Option<SocketAddr>,
    mechanism: &str,
    name: &str,
    password: &str,
) -> Result<User, Refusal> {
    let user = match peer {
        None => broker.authenticate(name, password),
        Some(peer) => {
            let policy = broker.login();
            let delay = policy.delay(peer);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            policy.admit(peer, mechanism, name, broker.authenticate(name, password))
        }
    };
    management(user.ok_or(Refusal::Credentials)?)
}

/// `user` if it has a management tag.
///
/// # Errors
/// [`Refusal::NotManagement`], logged as RabbitMQ logs it.
pub fn management(user: User) -> Result<User, Refusal> {
    if user.tags().is_management() {
        Ok(user)
    } else {
        tracing::warn!(user = user.name, "HTTP access denied: Not management user");
        Err(Refusal::NotManagement)
    }
}

/// Rejects requests without valid credentials or from users without a management tag;
/// passes the [`User`] on to the handlers.
///
/// Credentials go through [`log_in`]. A request carrying [`Authenticated`] (only in-process
/// callers can) is taken as that user, still subject to the management-tag rule.
pub(crate) async fn require_user(State(broker): State<Arc<Broker>>, mut request: Request, next: Next) -> Response {
    if let Some(Authenticated(user)) = request.extensions_mut().remove::<Authenticated>() {
        return match management(user) {
            Ok(user) => {
                request.extensions_mut().insert::<User>(user);
                next.run(request).await
            }
            Err(refusal) => refused(refusal),
        };
    }
    let credentials = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Basic "))
        .map(|encoded| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()
                .and_then(|decoded| String::from_utf8(decoded).ok())
                .and_then(|text| text.split_once(':').map(|(n, p)| (n.to_owned(), p.to_owned())))
        });
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
    let user = match credentials {
        None => Err(Refusal::Credentials),
        Some(Some((name, password))) => log_in(&broker, peer, MECHANISM, &name, &password).await,
        Some(None) => {
            if let Some(peer) = peer {
                let policy = broker.login();
                let delay = policy.delay(peer);
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                policy.refuse(peer, MECHANISM, "", "malformed credentials");
            }
            Err(Refusal::Credentials)
        }
    };
    match user {
        Ok(user) => {
            request.extensions_mut().insert::<User>(user);
            next.run(request).await
        }
        Err(refusal) => refused(refusal),
    }
}

/// The API's answer to a refused login.
fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::Credentials => ApiError::not_authorized().into_response(),
        Refusal::NotManagement => ApiError::not_authorised("Not management user").into_response(),
    }
}

/// `is_authorized_admin`.
pub(crate) fn admin(user: &User) -> Result<(), ApiError> {
    if user.tags().is_administrator() { Ok(()) } else { Err(ApiError::not_authorised("Not administrator user")) }
}

/// Whether `user` sees `vhost` in lists: administrators and monitors see every vhost, others
/// those they may open.
pub(crate) fn sees(broker: &Broker, user: &User, vhost: &str) -> bool {
    user.tags().is_monitor() || broker.access().can_open(user, vhost)
}

/// `is_authorized_vhost`: an administrator, or a user who may open the vhost (a vhost that
/// does not exist passes, and the endpoint answers 404).
pub(crate) fn vhost(broker: &Broker, user: &User, vhost: &str) -> Result<(), ApiError> {
    let exists = broker.vhosts().iter().any(|v| v.name() == vhost);
    if user.tags().is_administrator() || !exists || broker.access().can_open(user, vhost) {
        Ok(())
    } else {
        Err(ApiError::not_authorised("User not authorised to access virtual host"))
    }
}

/// `is_authorized_vhost_visible_for_monitoring`: as [`vhost`], or a monitor.
pub(crate) fn vhost_visible(broker: &Broker, user: &User, name: &str) -> Result<(), ApiError> {
    if user.tags().is_monitor() { Ok(()) } else { vhost(broker, user, name) }
}

/// `is_authorized_policies`: an administrator, or a policymaker who may open the vhost.
pub(crate) fn policies(broker: &Broker, user: &User, vhost: &str) -> Result<(), ApiError> {
    let exists = broker.vhosts().iter().any(|v| v.name() == vhost);
    let policymaker = user.tags().is_policymaker() && (!exists || broker.access().can_open(user, vhost));
    if user.tags().is_administrator() || policymaker {
        Ok(())
    } else {
        Err(ApiError::not_authorised("User not authorised to access object"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::{Request, StatusCode};
    use charon_engine::{Broker, BrokerConfig};
    use tower::ServiceExt;

    const GUEST: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";
    const BAD: &str = "Basic Z3Vlc3Q6YmFk";

    async fn get_from(broker: &std::sync::Arc<Broker>, peer: &str, authorization: &str) -> StatusCode {
        let mut request =
            Request::builder().uri("/api/policies").header("authorization", authorization).body(Body::empty()).unwrap();
        request.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
        crate::router(std::sync::Arc::clone(broker)).oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn guest_is_refused_from_a_remote_address_like_a_wrong_password() {
        let broker = Broker::new(BrokerConfig::default());
        assert_eq!(get_from(&broker, "127.0.0.1:5000", GUEST).await, StatusCode::OK);
        assert_eq!(get_from(&broker, "192.0.2.1:5000", GUEST).await, StatusCode::UNAUTHORIZED);
        let open = BrokerConfig {
            login: charon_engine::login::LoginConfig { loopback_users: vec![], ..Default::default() },
            ..BrokerConfig::default()
        };
        assert_eq!(get_from(&Broker::new(open), "192.0.2.1:5000", GUEST).await, StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_slow_every_later_request_from_that_address() {
        let broker = Broker::new(BrokerConfig::default());
        for _ in 0..5 {
            assert_eq!(get_from(&broker, "127.0.0.1:5000", BAD).await, StatusCode::UNAUTHORIZED);
        }
        // Two failures beyond the free three: 2 x 250 ms.
        let started = tokio::time::Instant::now();
        assert_eq!(get_from(&broker, "127.0.0.1:5001", GUEST).await, StatusCode::OK);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(490), "a good login waited only {waited:?}");
        let started = tokio::time::Instant::now();
        assert_eq!(get_from(&broker, "127.0.0.9:5001", GUEST).await, StatusCode::OK);
        assert!(started.elapsed() < Duration::from_millis(10), "another address is not slowed");
    }
}
