//! Token authentication through the router: Keystone's password method against the broker's
//! users, keystonemiddleware's 401, and the broker's permissions on each request.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use charon_engine::{Account, Broker, BrokerConfig, PasswordHash, Permission, Tags};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{Zaqar, ZaqarAuth, ZaqarConfig};

const CLIENT: &str = "0123456789abcdef0123456789abcdef";

/// A gateway with token authentication; user `ops` (password `pw`) may, in vhost `p1`,
/// configure nothing, write and read everything; vhost `p2` exists and `ops` has nothing there.
async fn gateway() -> Arc<Zaqar> {
    let broker = Broker::new(BrokerConfig::default());
    let config = ZaqarConfig { auth: ZaqarAuth::Tokens, create_vhosts: true, ..ZaqarConfig::default() };
    let zaqar = Zaqar::new(Arc::clone(&broker), config).unwrap();
    for vhost in ["p1", "p2"] {
        broker.add_vhost(vhost, charon_engine::access::VhostInfo::default()).await.unwrap();
    }
    let access = broker.access();
    access.put_user(Account::new("ops".into(), Some(PasswordHash::new("pw")), Tags::default())).await.unwrap();
    access.set_permission("p1", "ops", Permission::new("^$", ".*", ".*").unwrap()).await.unwrap();
    access.set_permission("p1", "guest", Permission::full()).await.unwrap();
    zaqar
}

async fn send(z: &Arc<Zaqar>, request: Request<Body>) -> (StatusCode, Value, Option<String>) {
    let response = crate::router(Arc::clone(z)).oneshot(request).await.unwrap();
    let status = response.status();
    let subject = response.headers().get("x-subject-token").map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), subject)
}

fn password_request(user: &str, password: &str, project: Option<&str>) -> String {
    let mut body = json!({"auth": {"identity": {"methods": ["password"],
        "password": {"user": {"name": user, "password": password, "domain": {"id": "default"}}}}}});
    if let Some(project) = project {
        body["auth"]["scope"] = json!({"project": {"id": project}});
    }
    body.to_string()
}

async fn issue(z: &Arc<Zaqar>, body: String) -> (StatusCode, Value, Option<String>) {
    let request = Request::post("/v3/auth/tokens").header("host", "zaqar.test:8888").body(Body::from(body));
    send(z, request.unwrap()).await
}

async fn token(z: &Arc<Zaqar>, user: &str, password: &str, project: &str) -> String {
    let (status, _, token) = issue(z, password_request(user, password, Some(project))).await;
    assert_eq!(status, StatusCode::CREATED);
    token.unwrap()
}

async fn call(z: &Arc<Zaqar>, token: Option<&str>, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri).header("client-id", CLIENT);
    request = request.header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("x-auth-token", token);
    }
    let (status, body, _) = send(z, request.body(Body::from(body.to_owned())).unwrap()).await;
    (status, body)
}

#[tokio::test]
async fn a_token_is_issued_for_a_users_password_as_keystone_issues_it() {
    let z = gateway().await;
    let (status, body, token) = issue(&z, password_request("ops", "pw", Some("p1"))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(token.unwrap().len(), 32);
    let described = &body["token"];
    assert_eq!((described["user"]["name"].clone(), described["project"]["id"].clone()), (json!("ops"), json!("p1")));
    assert_eq!(described["methods"], json!(["password"]));
    assert!(described["expires_at"].as_str().unwrap().ends_with(".000000Z"));
    let endpoint = &described["catalog"][0];
    assert_eq!(
        (endpoint["type"].clone(), endpoint["endpoints"][0]["url"].clone()),
        (json!("messaging"), json!("http://zaqar.test:8888"))
    );
    let unauthorized = json!({"error": {"code": 401, "title": "Unauthorized",
        "message": "The request you have made requires authentication."}});
    assert_eq!(issue(&z, password_request("ops", "wrong", None)).await.1, unauthorized);
    assert_eq!(issue(&z, password_request("nobody", "pw", None)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        issue(&z, password_request("ops", "pw", Some("p2"))).await.0,
        StatusCode::UNAUTHORIZED,
        "no permissions in p2"
    );
    assert_eq!(issue(&z, "{".into()).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(issue(&z, r#"{"auth": {}}"#.into()).await.0, StatusCode::BAD_REQUEST);
    let (status, unscoped, _) = issue(&z, password_request("ops", "pw", None)).await;
    assert_eq!((status, unscoped["token"].get("project")), (StatusCode::CREATED, None));
}

#[tokio::test]
async fn every_v2_request_needs_a_valid_token() {
    let z = gateway().await;
    let response = crate::router(Arc::clone(&z))
        .oneshot(Request::get("/v2/queues").header("client-id", CLIENT).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(response.headers()["www-authenticate"], "Keystone uri=\"/v3\"");
    assert_eq!(
        call(&z, Some("0123456789abcdef0123456789abcdef"), "GET", "/v2/queues", "").await.0,
        StatusCode::UNAUTHORIZED
    );
    let token = token(&z, "ops", "pw", "p1").await;
    assert_eq!(call(&z, Some(&token), "GET", "/v2/queues", "").await.0, StatusCode::OK);
    // A user deleted since: its tokens stop working.
    z.broker.access().delete_user("ops").await.unwrap();
    assert_eq!(call(&z, Some(&token), "GET", "/v2/queues", "").await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_tokens_project_replaces_x_project_id_and_permissions_decide() {
    let z = gateway().await;
    let admin = token(&z, "guest", "guest", "p1").await;
    let ops = token(&z, "ops", "pw", "p1").await;
    let post = r#"{"messages":[{"body":1}]}"#;
    // ops may not configure: no queue creation, no lazy creation by a post, no deletion.
    assert_eq!(call(&z, Some(&ops), "PUT", "/v2/queues/q", "").await.0, StatusCode::FORBIDDEN);
    let (status, refused) = call(&z, Some(&ops), "POST", "/v2/queues/q/messages", post).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        refused,
        json!({"title": "Not authorized", "description": "You are not authorized to complete this action."})
    );
    assert_eq!(call(&z, Some(&admin), "PUT", "/v2/queues/q", "").await.0, StatusCode::CREATED);
    // ops may write and read an existing queue.
    assert_eq!(call(&z, Some(&ops), "POST", "/v2/queues/q/messages", post).await.0, StatusCode::CREATED);
    assert_eq!(call(&z, Some(&ops), "POST", "/v2/queues/q/claims", "").await.0, StatusCode::CREATED);
    assert_eq!(call(&z, Some(&ops), "DELETE", "/v2/queues/q", "").await.0, StatusCode::FORBIDDEN);
    // The message went to vhost p1, the token's project, whatever X-Project-Id says.
    let request = Request::post("/v2/queues/q/messages")
        .header("client-id", CLIENT)
        .header("x-auth-token", &ops)
        .header("x-project-id", "p2")
        .header("content-type", "application/json")
        .body(Body::from(post))
        .unwrap();
    assert_eq!(send(&z, request).await.0, StatusCode::CREATED);
    let queue = z.broker.vhost("p1").unwrap().queue("q", 0).unwrap();
    let stats = queue.stats().await.unwrap();
    assert_eq!(stats.ready + stats.unacked, 2);
    assert!(z.broker.vhost("p2").unwrap().queue("q", 0).is_err());
}

#[tokio::test]
async fn without_token_authentication_there_is_no_token_endpoint() {
    let broker = Broker::new(BrokerConfig::default());
    let z = Zaqar::new(broker, ZaqarConfig::default()).unwrap();
    assert_eq!(issue(&z, password_request("guest", "guest", None)).await.0, StatusCode::NOT_FOUND);
}
