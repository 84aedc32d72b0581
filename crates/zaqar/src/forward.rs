//! Zaqar in a cluster: a queue lives on one node (its home), and what Zaqar keeps of it beside
//! the engine — claims, the numbers its messages got — lives there too. A request for a queue
//! of another node is answered by that node: this node identifies the caller (its token is
//! this node's), sends the request with the caller through the cluster
//! ([`charon_engine::cluster::forward`]), and answers what the queue's node answered. The
//! queue's node takes the caller as found (the sender is a member, authenticated by the
//! cluster's secret) and never forwards a forwarded request again.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use charon_engine::cluster::forward::{HttpAnswer, HttpForward, MAX_BODY};
use tower::ServiceExt as _;

use crate::Zaqar;
use crate::caller::Caller;
use crate::error::ZaqarError;

/// The service's name among a node's forwarded services.
pub(crate) const SERVICE: &str = "zaqar";

/// Marks a request another node forwarded, with the caller it identified.
#[derive(Clone, Debug)]
pub(crate) struct Forwarded(pub(crate) Caller);

/// The queue a `/v2/queues/{queue}[/...]` path names.
fn queue_of(path: &str) -> Option<&str> {
    path.strip_prefix("/v2/queues/")?.split('/').next().filter(|name| !name.is_empty())
}

/// The middleware, inside `identify`: a request for a queue of another node is answered by
/// that node; every other request here.
pub(crate) async fn to_home(State(zaqar): State<Arc<Zaqar>>, request: Request, next: Next) -> Response {
    let Some(cluster) = zaqar.broker.cluster() else { return next.run(request).await };
    if request.extensions().get::<Forwarded>().is_some() {
        return next.run(request).await;
    }
    let (Some(caller), Some(queue)) = (request.extensions().get::<Caller>().cloned(), queue_of(request.uri().path()))
    else {
        return next.run(request).await;
    };
    let vhost = crate::engine::vhost(&zaqar.broker, &caller.project);
    let home = vhost.and_then(|vhost| crate::engine::queue(&vhost, queue)).and_then(|queue| queue.home.clone());
    let Some(home) = home else { return next.run(request).await };
    let queue = queue.to_owned();
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return ZaqarError::invalid(format!("Request body is larger than {MAX_BODY} bytes.")).into_response();
    };
    let context = serde_json::to_string(&(&caller.project, &caller.client_id)).unwrap_or_default();
    let forward = HttpForward::new(SERVICE, context, &parts, body.to_vec());
    match cluster.forward_http(&home, forward).await {
        Ok(answer) => answer.into_response().map(Body::from),
        Err(error) => {
            tracing::debug!(%error, queue, home, "a Zaqar request for another node's queue got no answer");
            ZaqarError::unavailable(format!("Queue {queue} lives on node {home}, which is down or inaccessible."))
                .into_response()
        }
    }
}

/// Answers a request another node forwarded, as the gateway answers one of its own clients
/// (with the caller that node identified); 503 once the gateway stopped.
pub(crate) async fn answer(zaqar: Option<Arc<Zaqar>>, forward: HttpForward) -> HttpAnswer {
    let Some(zaqar) = zaqar else { return HttpAnswer::status(StatusCode::SERVICE_UNAVAILABLE) };
    let Ok((project, client_id)) = serde_json::from_str::<(String, String)>(&forward.context) else {
        return HttpAnswer::status(StatusCode::BAD_REQUEST);
    };
    let Ok(request) = forward.into_request() else { return HttpAnswer::status(StatusCode::BAD_REQUEST) };
    let mut request = request.map(Body::from);
    request.extensions_mut().insert(Forwarded(Caller { project, client_id }));
    let Ok(response) = crate::router(zaqar).oneshot(request).await;
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => HttpAnswer::new(&parts, body.to_vec()),
        Err(_) => HttpAnswer::status(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_read_from_the_path() {
        assert_eq!(queue_of("/v2/queues/q1/messages"), Some("q1"));
        assert_eq!(queue_of("/v2/queues/q1"), Some("q1"));
        assert_eq!(queue_of("/v2/queues"), None);
        assert_eq!(queue_of("/v2/queues/"), None);
        assert_eq!(queue_of("/v2/health"), None);
    }
}
