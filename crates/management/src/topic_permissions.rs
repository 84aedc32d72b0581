//! `/api/topic-permissions`: users' routing-key patterns per topic exchange (administrators
//! only), as RabbitMQ 4.0.5's `rabbit_mgmt_wm_topic_permission(s)`.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Broker, User};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::permissions::{access_error, require_user_and_vhost};
use crate::request;

/// The topic permissions `keep(vhost, user)` selects.
pub(crate) fn list_where(broker: &Broker, keep: impl Fn(&str, &str) -> bool) -> Vec<JsonValue> {
    broker
        .access()
        .topic_permissions()
        .into_iter()
        .filter(|(vhost, user, ..)| keep(vhost, user))
        .map(|(vhost, user, exchange, write, read)| {
            json!({ "user": user, "vhost": vhost, "exchange": exchange, "write": write, "read": read })
        })
        .collect()
}

/// `GET /api/topic-permissions`
pub(crate) async fn list(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    Ok(Json(JsonValue::Array(list_where(&broker, |_, _| true))))
}

/// `GET /api/topic-permissions/{vhost}/{user}`: 404 when there are none.
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    let found = list_where(&broker, |v, u| v == vhost && u == name);
    if found.is_empty() { Err(ApiError::not_found()) } else { Ok(Json(JsonValue::Array(found))) }
}

/// `PUT /api/topic-permissions/{vhost}/{user}` with `exchange`, `write` and `read`: 201 when
/// the user had none there, else 204.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    require_user_and_vhost(&broker, &vhost, &name)?;
    let request = request::decode(&body, &["exchange", "write", "read"])?;
    let text = |key: &str| request::text(&request, key);
    let created = list_where(&broker, |v, u| v == vhost && u == name).is_empty();
    let (exchange, write, read) = (text("exchange"), text("write"), text("read"));
    let change = crate::changes::set_topic_permission(&broker, (&vhost, &name), &exchange, (&write, &read));
    change.await.map_err(crate::changes::api_error)?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// Query of a delete: one exchange's topic permissions, or all of the user's in the vhost.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ExchangeQuery {
    exchange: Option<String>,
}

/// `DELETE /api/topic-permissions/{vhost}/{user}[?exchange=x]`: 204, or 404 when none.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path((vhost, name)): Path<(String, String)>,
    Query(query): Query<ExchangeQuery>,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    if let Some(cluster) = broker.cluster() {
        let exchange = query.exchange.as_deref();
        let had = broker
            .access()
            .topic_permissions()
            .iter()
            .any(|(v, u, x, ..)| *v == vhost && *u == name && exchange.is_none_or(|e| e == x));
        if !had {
            return Err(ApiError::not_found());
        }
        cluster.clear_topic_permissions(&vhost, &name, exchange).await.map_err(ApiError::cluster)?;
        return Ok(StatusCode::NO_CONTENT);
    }
    match broker.access().clear_topic_permissions(&vhost, &name, query.exchange.as_deref()).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(ApiError::not_found()),
        Err(charon_engine::AccessError::NoSuchUser(_) | charon_engine::AccessError::NoSuchVhost(_)) => {
            Err(ApiError::not_found())
        }
        Err(e) => Err(access_error(e)),
    }
}
