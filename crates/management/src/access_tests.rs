//! Users, vhosts, permissions and the tag rules over the API, in process.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use charon_engine::{Broker, BrokerConfig};
use serde_json::{Value as Json, json};
use tower::ServiceExt;

/// One request through the router, with basic auth as `who`.
pub(crate) async fn call_as(
    broker: &Arc<Broker>,
    who: (&str, &str),
    method: &str,
    uri: &str,
    body: &str,
) -> (StatusCode, Json) {
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", who.0, who.1));
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Basic {credentials}"))
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    // As served: the router behind the trailing-slash rewrite.
    let response = crate::with_trailing_slashes(crate::router(Arc::clone(broker))).oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Json::Null))
}

const GUEST: (&str, &str) = ("guest", "guest");

#[tokio::test]
async fn users_are_created_listed_updated_and_deleted_as_rabbitmq_s() {
    let broker = Broker::new(BrokerConfig::default());
    let (status, _) =
        call_as(&broker, GUEST, "PUT", "/api/users/ann", r#"{"password":"pw","tags":"monitoring"}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, got) = call_as(&broker, GUEST, "GET", "/api/users/ann", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["tags"], json!(["monitoring"]));
    assert_eq!(got["hashing_algorithm"], "rabbit_password_hashing_sha256");
    let hash = base64::engine::general_purpose::STANDARD.decode(got["password_hash"].as_str().unwrap()).unwrap();
    assert_eq!(hash.len(), 36, "4-byte salt and a SHA-256 digest");
    assert!(broker.authenticate("ann", "pw").is_some());
    // Tags are required, as RabbitMQ's put_user requires them.
    let (status, got) = call_as(&broker, GUEST, "PUT", "/api/users/bob", r#"{"password":"pw"}"#).await;
    assert_eq!((status, got["reason"].as_str()), (StatusCode::BAD_REQUEST, Some("tags_not_present")));
    let body = r#"{"password":"a","password_hash":"b","tags":""}"#;
    let (status, got) = call_as(&broker, GUEST, "PUT", "/api/users/bob", body).await;
    assert_eq!(
        (status, got["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("both_password_and_password_hash_are_provided"))
    );
    // An exported RabbitMQ hash ("test12", RabbitMQ's documentation example) logs in.
    let body = r#"{"password_hash":"kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
                   "hashing_algorithm":"rabbit_password_hashing_sha256","tags":["management","custom"]}"#;
    assert_eq!(call_as(&broker, GUEST, "PUT", "/api/users/imported", body).await.0, StatusCode::CREATED);
    assert!(broker.authenticate("imported", "test12").is_some());
    assert!(broker.authenticate("imported", "test13").is_none());
    // An update with neither password nor hash clears the password, as RabbitMQ's does.
    assert_eq!(
        call_as(&broker, GUEST, "PUT", "/api/users/ann", r#"{"tags":"monitoring"}"#).await.0,
        StatusCode::NO_CONTENT
    );
    assert!(broker.authenticate("ann", "pw").is_none());
    let (_, list) = call_as(&broker, GUEST, "GET", "/api/users", "").await;
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ann", "guest", "imported"]);
    assert_eq!(call_as(&broker, GUEST, "DELETE", "/api/users/ann", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call_as(&broker, GUEST, "DELETE", "/api/users/ann", "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(call_as(&broker, GUEST, "GET", "/api/users/ann", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tags_decide_what_a_user_may_do_over_http() {
    let broker = Broker::new(BrokerConfig::default());
    for (name, tags) in [("plain", ""), ("mgmt", "management"), ("policy", "policymaker"), ("watch", "monitoring")] {
        let body = format!(r#"{{"password":"pw","tags":"{tags}"}}"#);
        assert_eq!(call_as(&broker, GUEST, "PUT", &format!("/api/users/{name}"), &body).await.0, StatusCode::CREATED);
    }
    let perms = r#"{"configure":".*","write":".*","read":".*"}"#;
    for name in ["mgmt", "policy"] {
        assert_eq!(
            call_as(&broker, GUEST, "PUT", &format!("/api/permissions/%2F/{name}"), perms).await.0,
            StatusCode::CREATED
        );
    }
    let (status, got) = call_as(&broker, ("plain", "pw"), "GET", "/api/whoami", "").await;
    assert_eq!(
        (status, got["error"].as_str(), got["reason"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("not_authorised"), Some("Not management user"))
    );
    let (status, got) = call_as(&broker, ("mgmt", "pw"), "GET", "/api/whoami", "").await;
    assert_eq!((status, got), (StatusCode::OK, json!({"name": "mgmt", "tags": ["management"]})));
    let (status, got) = call_as(&broker, ("mgmt", "pw"), "GET", "/api/users", "").await;
    assert_eq!((status, got["reason"].as_str()), (StatusCode::UNAUTHORIZED, Some("Not administrator user")));
    let policy = r#"{"pattern":"^q","definition":{"max-length":3}}"#;
    let (status, got) = call_as(&broker, ("mgmt", "pw"), "PUT", "/api/policies/%2F/p", policy).await;
    assert_eq!(
        (status, got["reason"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("User not authorised to access object"))
    );
    assert_eq!(call_as(&broker, ("policy", "pw"), "PUT", "/api/policies/%2F/p", policy).await.0, StatusCode::CREATED);
    // A monitor sees every vhost; a management user only those it has permissions in.
    assert_eq!(call_as(&broker, GUEST, "PUT", "/api/vhosts/other", "").await.0, StatusCode::CREATED);
    let names = |list: Json| -> Vec<String> {
        list.as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(names(call_as(&broker, ("mgmt", "pw"), "GET", "/api/vhosts", "").await.1), ["/"]);
    assert_eq!(names(call_as(&broker, ("watch", "pw"), "GET", "/api/vhosts", "").await.1), ["/", "other"]);
    let (status, _) = call_as(&broker, ("mgmt", "pw"), "GET", "/api/queues/other", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn vhosts_and_permissions_change_at_runtime() {
    let broker = Broker::new(BrokerConfig::default());
    let body = r#"{"description":"for tests","tags":"a,b"}"#;
    assert_eq!(call_as(&broker, GUEST, "PUT", "/api/vhosts/dev", body).await.0, StatusCode::CREATED);
    assert_eq!(call_as(&broker, GUEST, "PUT", "/api/vhosts/dev", body).await.0, StatusCode::NO_CONTENT);
    let (_, got) = call_as(&broker, GUEST, "GET", "/api/vhosts/dev", "").await;
    assert_eq!((got["description"].as_str(), got["tags"].clone()), (Some("for tests"), json!(["a", "b"])));
    let (status, _) = call_as(&broker, GUEST, "PUT", "/api/vhosts/q", r#"{"default_queue_type":"quorum"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "accepted-and-ignored is refused");
    assert!(broker.vhosts().iter().all(|v| v.name() != "q"));
    // The creator gets full permissions there, as RabbitMQ's put_vhost grants them.
    let (_, got) = call_as(&broker, GUEST, "GET", "/api/permissions/dev/guest", "").await;
    assert_eq!(got["configure"], ".*");
    let perms = r#"{"configure":"^c","write":"^w","read":"^r"}"#;
    assert_eq!(call_as(&broker, GUEST, "PUT", "/api/permissions/dev/guest", perms).await.0, StatusCode::NO_CONTENT);
    assert!(broker.open_vhost(&broker.user("guest").unwrap(), "dev").is_ok());
    let (_, got) = call_as(&broker, GUEST, "GET", "/api/permissions/dev/guest", "").await;
    assert_eq!(got, json!({"user":"guest","vhost":"dev","configure":"^c","write":"^w","read":"^r"}));
    let (status, got) = call_as(&broker, GUEST, "PUT", "/api/permissions/nope/guest", perms).await;
    assert_eq!((status, got["reason"].as_str()), (StatusCode::BAD_REQUEST, Some("vhost_or_user_not_found")));
    let (status, got) = call_as(&broker, GUEST, "PUT", "/api/permissions/dev/guest", r#"{"configure":"("}"#).await;
    assert_eq!(
        (status, got["reason"].as_str()),
        (StatusCode::BAD_REQUEST, Some("[{key_missing,write},{key_missing,read}]"))
    );
    let bad = r#"{"configure":"(","write":"","read":""}"#;
    assert_eq!(call_as(&broker, GUEST, "PUT", "/api/permissions/dev/guest", bad).await.0, StatusCode::BAD_REQUEST);
    let (_, mine) = call_as(&broker, GUEST, "GET", "/api/users/guest/permissions", "").await;
    assert_eq!(mine.as_array().unwrap().len(), 2);
    let (_, dev) = call_as(&broker, GUEST, "GET", "/api/vhosts/dev/permissions", "").await;
    assert_eq!(dev.as_array().unwrap().len(), 1);
    assert_eq!(call_as(&broker, GUEST, "DELETE", "/api/vhosts/dev", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call_as(&broker, GUEST, "DELETE", "/api/vhosts/dev", "").await.0, StatusCode::NOT_FOUND);
    assert!(broker.vhosts().iter().all(|v| v.name() != "dev"));
    let (_, all) = call_as(&broker, GUEST, "GET", "/api/permissions", "").await;
    assert_eq!(all, json!([{"user":"guest","vhost":"/","configure":".*","write":".*","read":".*"}]));
    assert_eq!(call_as(&broker, GUEST, "DELETE", "/api/permissions/%2F/guest", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call_as(&broker, GUEST, "DELETE", "/api/permissions/%2F/guest", "").await.0, StatusCode::NOT_FOUND);
}
