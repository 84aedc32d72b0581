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
use axum::http::{HeaderName, HeaderValue, StatusCode};
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
    let headers = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect();
    let forward = HttpForward {
        service: SERVICE.to_owned(),
        context: serde_json::to_string(&(&caller.project, &caller.client_id)).unwrap_or_default(),
        method: parts.method.as_str().to_owned(),
        uri: parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers,
        body: body.to_vec(),
    };
    match cluster.forward_http(&home, forward).await {
        Ok(answer) => response(answer),
        Err(error) => {
            tracing::debug!(%error, queue, home, "a Zaqar request for another node's queue got no answer");
            ZaqarError::unavailable(format!("Queue {queue} lives on node {home}, which is down or inaccessible."))
                .into_response()
        }
    }
}

/// The HTTP response of `answer`.
fn response(answer: HttpAnswer) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in answer.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// What a node whose gateway stopped answers.
pub(crate) fn stopped() -> HttpAnswer {
    HttpAnswer { status: StatusCode::SERVICE_UNAVAILABLE.as_u16(), headers: Vec::new(), body: Vec::new() }
}

/// Answers a request another node forwarded, as the gateway answers one of its own clients
/// (with the caller that node identified).
pub(crate) async fn answer(zaqar: Arc<Zaqar>, forward: HttpForward) -> HttpAnswer {
    let refused = |status: StatusCode| HttpAnswer { status: status.as_u16(), headers: Vec::new(), body: Vec::new() };
    let Ok((project, client_id)) = serde_json::from_str::<(String, String)>(&forward.context) else {
        return refused(StatusCode::BAD_REQUEST);
    };
    let mut request = Request::new(Body::from(forward.body));
    let (Ok(method), Ok(uri)) = (forward.method.parse(), forward.uri.parse()) else {
        return refused(StatusCode::BAD_REQUEST);
    };
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    for (name, value) in forward.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            request.headers_mut().append(name, value);
        }
    }
    request.extensions_mut().insert(Forwarded(Caller { project, client_id }));
    let Ok(response) = crate::router(zaqar).oneshot(request).await;
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY).await.map(|b| b.to_vec()).unwrap_or_default();
    let headers = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
        .collect();
    HttpAnswer { status: parts.status.as_u16(), headers, body }
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
