//! The dead-letter browser in a cluster: browsing, deleting and moving the messages of a queue
//! of another node is done by that node, as if asked there. This node authenticates the user;
//! the request goes through the cluster ([`charon_engine::cluster::forward`]) with the user's
//! name, which the queue's node takes as authenticated (the sender is a member, authenticated
//! by the cluster's secret) and checks its rights on as for its own clients. A forwarded
//! request is never forwarded again.

use std::sync::{Arc, Weak};

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use charon_engine::cluster::forward::{HttpAnswer, HttpForward, MAX_BODY};
use charon_engine::{Broker, User};
use tower::ServiceExt as _;

use crate::auth::Authenticated;
use crate::error::ApiError;

/// The service's name among a node's forwarded services.
const SERVICE: &str = "management";

/// Marks a request another node forwarded.
#[derive(Clone, Copy, Debug)]
struct Forwarded;

/// The middleware of the browser's routes (`{vhost}/{name}` in their paths): a queue of
/// another node is browsed there.
pub(crate) async fn to_home(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, queue)): Path<(String, String)>,
    request: Request,
    next: Next,
) -> Response {
    let home = broker.vhost(&vhost).and_then(|v| v.queue(&queue, 0).ok()).and_then(|q| q.home.clone());
    let (Some(cluster), Some(home)) = (broker.cluster(), home) else { return next.run(request).await };
    if request.extensions().get::<Forwarded>().is_some() {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return ApiError::bad_request_verbatim(format!("the body is larger than {MAX_BODY} bytes")).into_response();
    };
    let forward = HttpForward::new(SERVICE, user.name.clone(), &parts, body.to_vec());
    match cluster.forward_http(&home, forward).await {
        Ok(answer) => answer.into_response().map(Body::from),
        Err(error) => {
            tracing::debug!(%error, queue, home, "a browser request for another node's queue got no answer");
            ApiError::unavailable(format!(
                "node '{home}' of queue '{queue}' in vhost '{vhost}' is down or inaccessible"
            ))
            .into_response()
        }
    }
}

/// Has `broker`'s node answer the browser requests other nodes forward to it, for as long as
/// the broker lives.
pub fn answer_forwarded(broker: &Arc<Broker>) {
    let weak = Arc::downgrade(broker);
    let service: charon_engine::cluster::forward::Service =
        Arc::new(move |request| Box::pin(answer(Weak::clone(&weak), request)));
    broker.services().serve(SERVICE, service);
}

/// Answers a forwarded request as this node's API answers its own clients, as the user the
/// asking node authenticated.
async fn answer(broker: Weak<Broker>, forward: HttpForward) -> HttpAnswer {
    let Some(broker) = broker.upgrade() else { return HttpAnswer::status(StatusCode::SERVICE_UNAVAILABLE) };
    let Some(user) = broker.access().user(&forward.context) else {
        return HttpAnswer::status(StatusCode::UNAUTHORIZED);
    };
    let Ok(request) = forward.into_request() else { return HttpAnswer::status(StatusCode::BAD_REQUEST) };
    let mut request = request.map(Body::from);
    request.extensions_mut().insert(Forwarded);
    request.extensions_mut().insert(Authenticated::new(user));
    let Ok(response) = crate::router(broker).oneshot(request).await;
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => HttpAnswer::new(&parts, body.to_vec()),
        Err(_) => HttpAnswer::status(StatusCode::INTERNAL_SERVER_ERROR),
    }
}
