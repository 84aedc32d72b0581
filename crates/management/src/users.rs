//! `/api/users`, `/api/whoami`: users, their password hashes and tags, as RabbitMQ 4.0.5's
//! management API shows and changes them (administrators only, except `whoami`).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use charon_engine::{Account, Broker, HashingAlgorithm, PasswordHash, Tags, User};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::error::ApiError;
use crate::listing::{self, Params};
use crate::permissions;

/// `rabbit_mgmt_format:internal_user/1`.
fn render(account: &Account) -> JsonValue {
    let (hash, algorithm) = match account.password() {
        Some(hash) => (hash.to_base64(), hash.algorithm().as_str()),
        None => (String::new(), HashingAlgorithm::Sha256.as_str()),
    };
    json!({
        "name": account.name(),
        "password_hash": hash,
        "hashing_algorithm": algorithm,
        "tags": account.tags().as_slice(),
        "limits": {},
    })
}

/// Tags as the API takes them: a comma-separated string or a list of strings.
fn tags_of(value: &JsonValue) -> Result<Tags, ApiError> {
    match value {
        JsonValue::String(text) => Ok(Tags::parse(text)),
        JsonValue::Array(items) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .map(Tags::new)
            .ok_or_else(|| ApiError::bad_request("tags must be strings")),
        _ => Err(ApiError::bad_request("tags must be a string or a list")),
    }
}

/// `GET /api/users`
pub(crate) async fn list(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Query(params): Query<Params>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    listing::respond(broker.access().accounts().iter().map(render).collect(), &params, &[]).map(Json)
}

/// `GET /api/users/{user}`
pub(crate) async fn get_one(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    broker.access().account(&name).map(|a| Json(render(&a))).ok_or_else(ApiError::not_found)
}

/// `PUT /api/users/{user}` with `tags` and `password` or `password_hash` (+
/// `hashing_algorithm`), as RabbitMQ's `put_user/3`: 201 created, 204 updated. An update
/// with neither password nor hash clears the password, as RabbitMQ's does.
pub(crate) async fn put(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    let request: JsonValue = serde_json::from_slice(&body).map_err(|_| ApiError::bad_request("not_json"))?;
    let tags = match (request.get("tags"), request.get("administrator")) {
        (Some(tags), _) => tags_of(tags)?,
        (None, Some(admin)) if admin.as_bool() == Some(true) || admin.as_str() == Some("true") => {
            Tags::parse("administrator")
        }
        (None, Some(_)) => Tags::default(),
        (None, None) => return Err(ApiError::bad_request("tags_not_present")),
    };
    let password = match (request.get("password"), request.get("password_hash")) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("both_password_and_password_hash_are_provided")),
        (Some(password), None) => {
            let text = password.as_str().ok_or_else(|| ApiError::bad_request("password must be a string"))?;
            // An empty password is no password: nobody logs in with it.
            (!text.is_empty()).then(|| PasswordHash::new(text))
        }
        (None, Some(hash)) => {
            let encoded = hash.as_str().ok_or_else(|| ApiError::bad_request("password_hash must be a string"))?;
            let algorithm = match request.get("hashing_algorithm").and_then(JsonValue::as_str) {
                Some(name) => HashingAlgorithm::parse(name).map_err(|e| ApiError::bad_request(e.to_string()))?,
                None => HashingAlgorithm::Sha256,
            };
            if encoded.is_empty() {
                None
            } else {
                Some(PasswordHash::from_base64(algorithm, encoded).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
        }
        (None, None) => None,
    };
    let created = broker.access().account(&name).is_none();
    let account = Account::new(name, password, tags);
    crate::changes::put_user(&broker, account).await.map_err(crate::changes::api_error)?;
    Ok(if created { StatusCode::CREATED } else { StatusCode::NO_CONTENT })
}

/// `DELETE /api/users/{user}`: 204 (its connections are closed), or 404.
pub(crate) async fn delete(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    auth::admin(&user)?;
    if broker.access().account(&name).is_none() {
        return Err(ApiError::not_found());
    }
    if let Some(cluster) = broker.cluster() {
        cluster.delete_user(&name).await.map_err(ApiError::cluster)?;
    } else {
        broker.delete_user(&name).await.map_err(|e| ApiError::internal(e.to_string()))?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/users/{user}/permissions`
pub(crate) async fn permissions(
    State(broker): State<Arc<Broker>>,
    Extension(user): Extension<User>,
    Path(name): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    auth::admin(&user)?;
    if broker.access().account(&name).is_none() {
        return Err(ApiError::not_found());
    }
    Ok(permissions::list_where(&broker, |_, u| u == name))
}

/// `GET /api/whoami`: the caller's name and tags.
pub(crate) async fn whoami(Extension(user): Extension<User>) -> Json<JsonValue> {
    Json(json!({ "name": user.name, "tags": user.tags().as_slice() }))
}
