//! `GET /` (the versions document), `/v2/ping` and `/v2/health`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

/// `GET /`: the API versions, 300 Multiple Choices as Zaqar answers.
pub(crate) async fn versions() -> impl IntoResponse {
    let v2 = json!({
        "id": "2",
        "status": "CURRENT",
        "updated": "2014-9-24T04:06:47Z",
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.messaging-v2+json"}],
        "links": [{"href": "/v2/", "rel": "self"}],
    });
    (StatusCode::MULTIPLE_CHOICES, Json(json!({ "versions": [v2] })))
}

/// `GET|HEAD /v2/ping` (and `HEAD /v2/health`): 204, the engine being in-process.
pub(crate) async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// `GET /v2/health`: the storage is the engine of this process, so it is reachable whenever
/// the gateway answers.
pub(crate) async fn health() -> impl IntoResponse {
    Json(json!({ "storage_reachable": true, "operation_status": {} }))
}
