//! HTTP basic authentication against the broker's users, under the broker's login policy.

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

/// Rejects requests without valid credentials; passes the [`User`] on to the handlers.
///
/// Credentials from a served connection go through the login policy: the request first waits
/// out the throttle's delay for its address (whatever the outcome, so a slow answer says
/// nothing), then `loopback_users` applies, and a refusal is logged and counted. A request
/// without an address (the router called in-process, as the unit tests do) is only checked
/// against the users.
pub(crate) async fn require_user(State(broker): State<Arc<Broker>>, mut request: Request, next: Next) -> Response {
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
    let user = match (credentials, peer) {
        (None, _) => None,
        (Some(credentials), None) => credentials.and_then(|(name, password)| broker.authenticate(&name, &password)),
        (Some(credentials), Some(peer)) => {
            let policy = broker.login();
            let delay = policy.delay(peer);
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            match credentials {
                Some((name, password)) => policy.admit(peer, MECHANISM, &name, broker.authenticate(&name, &password)),
                None => {
                    policy.refuse(peer, MECHANISM, "", "malformed credentials");
                    None
                }
            }
        }
    };
    match user {
        Some(user) => {
            request.extensions_mut().insert::<User>(user);
            next.run(request).await
        }
        None => ApiError::not_authorized().into_response(),
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
