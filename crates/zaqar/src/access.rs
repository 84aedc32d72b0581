//! What a token's user may do (token authentication, see [`crate::auth`]): the broker's
//! permissions, read as an AMQP client's are.
//!
//! - The project's vhost must be one the user has permissions in (RabbitMQ's vhost access);
//!   listing queues, a queue's metadata and its stats need nothing more.
//! - On a queue: creating it, changing its metadata or deleting it needs `configure`; posting
//!   needs `write` (and `configure` when the post creates the queue, as Zaqar's lazy creation
//!   does); listing, reading, claiming and deleting messages, and purging, need `read` (taking
//!   messages is consuming them, and RabbitMQ's purge needs `read`).
//! - A claim that moves messages to the queue's dead-letter queue needs nothing on that queue,
//!   as an AMQP queue's dead lettering needs nothing of its publisher.
//!
//! No token, an unknown or expired one, or a user deleted since: 401, as keystonemiddleware
//! answers. A permission missing: 403, as Zaqar's policy check answers.

use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use charon_engine::Resource;
use charon_engine::access::Action;

use crate::Zaqar;
use crate::auth::{Token, unauthorized};
use crate::caller::Caller;
use crate::error::ZaqarError;
use crate::message::now_ms;

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// No valid token (keystonemiddleware's 401).
    #[error("no valid token")]
    Unauthorized,
    /// A permission is missing (Zaqar's policy 403).
    #[error("not authorized")]
    Forbidden,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Self::Unauthorized => unauthorized(),
            Self::Forbidden => ZaqarError::new(
                StatusCode::FORBIDDEN,
                "Not authorized",
                "You are not authorized to complete this action.",
            )
            .into_response(),
        }
    }
}

/// The valid token the request carries in `X-Auth-Token`.
///
/// # Errors
/// [`Refused::Unauthorized`] when there is none.
pub(crate) fn token(zaqar: &Zaqar, headers: &HeaderMap) -> Result<Token, Refused> {
    let id = headers.get("x-auth-token").and_then(|v| v.to_str().ok()).ok_or(Refused::Unauthorized)?;
    zaqar.tokens.check(id, now_ms()).ok_or(Refused::Unauthorized)
}

/// The permissions a request on one queue needs, by its method and the path after
/// `/v2/queues/{queue}`.
fn needed(method: &Method, rest: &[&str]) -> &'static [Action] {
    match (rest, method.as_str()) {
        ([], "PUT" | "PATCH" | "DELETE") => &[Action::Configure],
        (["messages"], "POST") => &[Action::Write],
        (["messages", ..] | ["claims", ..] | ["purge"], _) => &[Action::Read],
        _ => &[],
    }
}

/// Checks that the token's user may make this request in `caller`'s project.
///
/// # Errors
/// [`Refused::Unauthorized`] when the user is gone; [`Refused::Forbidden`] when a permission
/// is missing.
pub(crate) fn authorize(
    zaqar: &Zaqar,
    token: &Token,
    caller: &Caller,
    method: &Method,
    uri: &Uri,
) -> Result<(), Refused> {
    let access = zaqar.broker.access();
    let user = access.user(&token.user).ok_or(Refused::Unauthorized)?;
    if !access.can_open(&user, &caller.project) {
        return Err(Refused::Forbidden);
    }
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let ["v2", "queues", queue, rest @ ..] = segments.as_slice() else {
        return Ok(());
    };
    let mut actions = needed(method, rest).to_vec();
    let creates = rest == ["messages"]
        && method == Method::POST
        && zaqar.broker.vhost(&caller.project).is_none_or(|vhost| crate::engine::queue(&vhost, queue).is_none());
    if creates {
        actions.push(Action::Configure);
    }
    let resource = Resource::queue(&caller.project, queue);
    for action in actions {
        access.authorize(&user, action, &resource).map_err(|_| Refused::Forbidden)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_needs_what_its_amqp_counterpart_needs() {
        let needs = |method: Method, rest: &[&str]| needed(&method, rest).to_vec();
        assert_eq!(needs(Method::PUT, &[]), [Action::Configure]);
        assert_eq!(needs(Method::PATCH, &[]), [Action::Configure]);
        assert_eq!(needs(Method::DELETE, &[]), [Action::Configure]);
        assert_eq!(needs(Method::GET, &[]), []);
        assert_eq!(needs(Method::GET, &["stats"]), []);
        assert_eq!(needs(Method::POST, &["messages"]), [Action::Write]);
        assert_eq!(needs(Method::GET, &["messages"]), [Action::Read]);
        assert_eq!(needs(Method::DELETE, &["messages", "id"]), [Action::Read]);
        assert_eq!(needs(Method::POST, &["claims"]), [Action::Read]);
        assert_eq!(needs(Method::PATCH, &["claims", "cid"]), [Action::Read]);
        assert_eq!(needs(Method::POST, &["purge"]), [Action::Read]);
    }
}
