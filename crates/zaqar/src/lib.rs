//! Charon's OpenStack Zaqar v2 HTTP gateway: queues, messages and claims over HTTP on the same
//! engine queues AMQP 0.9.1 and 1.0 clients use, with Zaqar's claim-count dead-letter queue
//! made crash-safe. Zaqar's `noauth` mode by default; Keystone-free tokens of the broker's
//! users with [`ZaqarAuth::Tokens`] (see `auth.rs` and `access.rs`).
//!
//! A Zaqar project is a vhost (created on first write unless [`ZaqarConfig::create_vhosts`] is
//! off); a Zaqar queue is a durable quorum queue of that vhost; a post is a persistent publish
//! through the default exchange, answered once confirmed; a claim holds deliveries under an
//! engine owner of its own until it is released, expires or its messages are deleted. How each
//! Zaqar field maps to the message model is in docs/zaqar.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post, put};
use charon_engine::Broker;
use tokio::net::TcpListener;
use tokio::sync::watch;

mod access;
mod auth;
mod body;
mod caller;
mod claim_routes;
mod claims;
mod dead_letter;
mod engine;
mod error;
mod forward;
mod message;
mod messages;
mod metadata;
mod queues;
mod reserved;
mod stats;
mod versions;

pub use auth::ZaqarAuth;
pub use error::ZaqarError;
pub use metadata::MetadataError;

/// How the gateway is set up.
#[derive(Clone, Debug, Default)]
pub struct ZaqarConfig {
    /// Where queue metadata is kept (`<dir>/zaqar/metadata.json`); `None`: in memory only.
    pub data_dir: Option<PathBuf>,
    /// Whether a project without a vhost gets one on its first write (else 400). Token
    /// authentication never creates one: a user needs permissions in the vhost first.
    pub create_vhosts: bool,
    /// How requests authenticate.
    pub auth: ZaqarAuth,
}

/// The gateway's state, shared by its handlers.
#[derive(Debug)]
pub struct Zaqar {
    broker: Arc<Broker>,
    config: ZaqarConfig,
    metadata: metadata::MetadataStore,
    claims: Arc<claims::Claims>,
    tokens: auth::Tokens,
}

impl Zaqar {
    /// The gateway over `broker`, with the metadata kept under `config.data_dir`.
    ///
    /// # Errors
    /// When the metadata file exists but cannot be read.
    pub fn new(broker: Arc<Broker>, config: ZaqarConfig) -> Result<Arc<Self>, MetadataError> {
        let metadata = metadata::MetadataStore::open(config.data_dir.clone(), &broker)?;
        Ok(Arc::new(Self { broker, config, metadata, claims: Arc::default(), tokens: auth::Tokens::default() }))
    }

    /// Starts requeueing the messages of expired claims (on the current runtime), for as long as
    /// the gateway lives.
    pub fn start_expiry(self: &Arc<Self>) {
        tokio::spawn(claims::Claims::sweep(Arc::downgrade(&self.claims)));
    }

    /// Answers the requests other nodes of the cluster forward for this node's queues
    /// (`forward.rs`), for as long as the gateway lives.
    pub fn answer_forwarded(self: &Arc<Self>) {
        let zaqar = Arc::downgrade(self);
        let service: charon_engine::cluster::forward::Service =
            Arc::new(move |request| Box::pin(forward::answer(zaqar.upgrade(), request)));
        self.broker.services().serve(forward::SERVICE, service);
    }
}

/// The gateway's routes.
pub fn router(zaqar: Arc<Zaqar>) -> Router {
    let v2 = Router::new()
        .route("/v2/ping", get(versions::ping).head(versions::ping))
        .route("/v2/health", get(versions::health).head(versions::ping))
        .route("/v2/queues", get(queues::list))
        .route("/v2/queues/{queue}", put(queues::create).get(queues::show).delete(queues::delete).patch(queues::patch))
        .route("/v2/queues/{queue}/stats", get(queues::stats))
        .route("/v2/queues/{queue}/purge", post(queues::purge))
        .route("/v2/queues/{queue}/messages", post(messages::post).get(messages::list).delete(messages::delete_many))
        .route("/v2/queues/{queue}/messages/{id}", get(messages::show).delete(messages::delete_one))
        .route("/v2/queues/{queue}/claims", post(claim_routes::create))
        .route(
            "/v2/queues/{queue}/claims/{claim}",
            get(claim_routes::show).patch(claim_routes::renew).delete(claim_routes::release),
        )
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&zaqar), forward::to_home))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&zaqar), caller::identify));
    Router::new()
        .route("/", get(versions::versions))
        .route("/v3/auth/tokens", post(auth::issue))
        .merge(v2)
        .with_state(zaqar)
}

/// Serves the gateway on `listener` until `shutdown` turns true.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: TcpListener,
    zaqar: Arc<Zaqar>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    zaqar.start_expiry();
    zaqar.answer_forwarded();
    axum::serve(listener, router(zaqar).into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod auth_tests;
