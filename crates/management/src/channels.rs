//! `/api/channels[/{name}]` and `/api/vhosts/{vhost}/channels`: the 0.9.1 channels of the
//! connections the user sees, from each connection's report (asked on demand, so channels cost
//! nothing while nobody looks). RabbitMQ 4.0.5 lists no AMQP 1.0 sessions here (observed).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use charon_engine::{Broker, Connections, Listed, User};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::runtime;

/// Every channel of the connections `user` sees that `keep` selects.
async fn rendered(broker: &Broker, user: &User, keep: impl Fn(&Listed) -> bool) -> Vec<JsonValue> {
    let listed = broker
        .connections()
        .list()
        .into_iter()
        .filter(|l| l.info.protocol == runtime::AMQP_091 && runtime::sees(user, &l.info) && keep(l))
        .collect();
    let mut out = Vec::new();
    for (listed, report) in Connections::reports(listed).await {
        let Some(report) = report else {
            continue;
        };
        out.extend(report.channels.iter().map(|c| runtime::channel(&listed, &report, c)));
    }
    out
}

/// `GET /api/channels`
pub(crate) async fn list_all(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    listing::respond(rendered(&broker, &user, |_| true).await, &params, &[]).map(Json)
}

/// `GET /api/vhosts/{vhost}/channels`
pub(crate) async fn list_vhost(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(vhost): Path<String>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::vhost_visible(&broker, &user, &vhost)?;
    if !broker.vhosts().iter().any(|v| v.name() == vhost) {
        return Err(ApiError::not_found());
    }
    listing::respond(rendered(&broker, &user, |l| l.info.vhost == vhost).await, &params, &[]).map(Json)
}

/// `GET /api/channels/{name}`: the channel with its `consumer_details`.
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    let (connection, number) = parse(&name).ok_or_else(ApiError::not_found)?;
    let listed = broker.connections().find(connection).ok_or_else(ApiError::not_found)?;
    if listed.info.protocol != runtime::AMQP_091 {
        return Err(ApiError::not_found());
    }
    if !runtime::sees(&user, &listed.info) {
        return Err(ApiError::not_authorised("User not authorised to access object"));
    }
    let (listed, report) = Connections::reports(vec![listed]).await.pop().ok_or_else(ApiError::not_found)?;
    let report = report.ok_or_else(ApiError::not_found)?;
    let channel = report.channels.iter().find(|c| c.number == number).ok_or_else(ApiError::not_found)?;
    let mut rendered = runtime::channel(&listed, &report, channel);
    let consumers = crate::consumers::of_channel(&broker, &listed, number).await;
    if let Some(fields) = rendered.as_object_mut() {
        fields.insert("consumer_details".into(), json!(consumers));
    }
    Ok(Json(rendered))
}

/// `"<connection> (<number>)"` split.
fn parse(name: &str) -> Option<(&str, u32)> {
    let (connection, rest) = name.rsplit_once(" (")?;
    Some((connection, rest.strip_suffix(')')?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn channel_names_split_into_connection_and_number() {
        let name = "127.0.0.1:4000 -> 127.0.0.1:5672 (12)";
        assert_eq!(super::parse(name), Some(("127.0.0.1:4000 -> 127.0.0.1:5672", 12)));
        assert_eq!(super::parse("127.0.0.1:4000 -> 127.0.0.1:5672"), None);
        assert_eq!(super::parse("x (y)"), None);
    }
}
