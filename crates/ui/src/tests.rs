//! The UI over an in-process broker: log-in, sessions, CSRF, and pages that show what the API
//! answers.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use charon_engine::{Broker, BrokerConfig};
use serde_json::Value as Json;
use tower::ServiceExt;

const GUEST: &str = "Basic Z3Vlc3Q6Z3Vlc3Q=";

struct Reply {
    status: StatusCode,
    location: String,
    cookie: String,
    body: String,
}

fn app() -> (Arc<Broker>, Router) {
    let broker = Broker::new(BrokerConfig::default());
    let app = crate::app(Arc::clone(&broker), charon_management::router(Arc::clone(&broker)));
    (broker, app)
}

async fn send(app: &Router, method: &str, uri: &str, cookie: Option<&str>, form: Option<&str>) -> Reply {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, format!("charon_session={cookie}"));
    }
    let body = match form {
        Some(form) => {
            request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            Body::from(form.to_owned())
        }
        None => Body::empty(),
    };
    let response = app.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let header = |name| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let (location, cookie) = (header(header::LOCATION), header(header::SET_COOKIE));
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    Reply { status, location, cookie, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// The management API with guest's basic auth.
async fn api(app: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, GUEST)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Json::Null))
}

async fn log_in(app: &Router, user: &str, password: &str) -> String {
    let reply = send(app, "POST", "/login", None, Some(&format!("username={user}&password={password}&next=%2F"))).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let token = reply.cookie.strip_prefix("charon_session=").unwrap().split(';').next().unwrap().to_owned();
    assert_eq!(token.len(), 64);
    token
}

fn csrf_of(page: &str) -> String {
    let at = page.find(r#"name="csrf" value=""#).expect("a form with the CSRF token") + r#"name="csrf" value=""#.len();
    page[at..].split('"').next().unwrap().to_owned()
}

async fn queue_with_messages(app: &Router, name: &str, messages: usize) {
    assert_eq!(api(app, "PUT", &format!("/api/queues/%2F/{name}"), r#"{"durable":true}"#).await.0, StatusCode::CREATED);
    for i in 0..messages {
        let body =
            format!(r#"{{"properties":{{}},"routing_key":"{name}","payload":"m{i}","payload_encoding":"string"}}"#);
        assert_eq!(api(app, "POST", "/api/exchanges/%2F/amq.default/publish", &body).await.1["routed"], true);
    }
}

#[tokio::test]
async fn pages_need_a_login_and_the_api_keeps_basic_auth() {
    let (_broker, app) = app();
    let reply = send(&app, "GET", "/queues?page=2", None, None).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert_eq!(reply.location, "/login?next=%2Fqueues%3Fpage%3D2");
    let login = send(&app, "GET", "/login?next=%2Fqueues", None, None).await;
    assert_eq!(login.status, StatusCode::OK);
    assert!(login.body.contains(r#"name="next" value="/queues""#));
    // The API is reached through the UI's router unchanged.
    let reply = send(&app, "GET", "/api/overview", None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.body, r#"{"error":"not_authorized","reason":"Not_Authorized"}"#);
    assert_eq!(api(&app, "GET", "/api/overview", "").await.0, StatusCode::OK);
    // The JSON proxy of the pages' script wants the session, not basic auth.
    assert_eq!(send(&app, "GET", "/ui/api/overview", None, None).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_login_starts_a_strict_http_only_session_and_logout_ends_it() {
    let (_broker, app) = app();
    let reply = send(&app, "POST", "/login", None, Some("username=guest&password=guest&next=%2Fqueues")).await;
    assert_eq!((reply.status, reply.location.as_str()), (StatusCode::SEE_OTHER, "/queues"));
    assert!(reply.cookie.contains("HttpOnly"), "{}", reply.cookie);
    assert!(reply.cookie.contains("SameSite=Strict"), "{}", reply.cookie);
    let token = log_in(&app, "guest", "guest").await;
    let overview = send(&app, "GET", "/", Some(&token), None).await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(overview.body.contains("User <strong>guest</strong>"));
    let proxied = send(&app, "GET", "/ui/api/overview", Some(&token), None).await;
    assert_eq!(proxied.status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Json>(&proxied.body).unwrap()["management_version"], "4.0.5");
    // Log-out without the CSRF token is refused; with it the session is gone.
    assert_eq!(send(&app, "POST", "/logout", Some(&token), Some("")).await.status, StatusCode::FORBIDDEN);
    let csrf = csrf_of(&overview.body);
    let out = send(&app, "POST", "/logout", Some(&token), Some(&format!("csrf={csrf}"))).await;
    assert_eq!((out.status, out.location.as_str()), (StatusCode::SEE_OTHER, "/login"));
    assert!(out.cookie.contains("Max-Age=0"));
    assert_eq!(send(&app, "GET", "/", Some(&token), None).await.status, StatusCode::SEE_OTHER);
    assert_eq!(send(&app, "GET", "/ui/api/overview", Some(&token), None).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bad_passwords_and_users_without_a_management_tag_are_refused() {
    let (_broker, app) = app();
    let bad = send(&app, "POST", "/login", None, Some("username=guest&password=nope")).await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(bad.cookie.is_empty());
    assert!(bad.body.contains("Login failed"));
    assert_eq!(api(&app, "PUT", "/api/users/app", r#"{"password":"secret","tags":""}"#).await.0, StatusCode::CREATED);
    let untagged = send(&app, "POST", "/login", None, Some("username=app&password=secret")).await;
    assert_eq!(untagged.status, StatusCode::FORBIDDEN);
    assert!(untagged.cookie.is_empty());
    assert!(untagged.body.contains("Not management user"));
    // Tagged later: the login works; the tag taken away again: the session ends.
    assert_eq!(
        api(&app, "PUT", "/api/users/app", r#"{"password":"secret","tags":"management"}"#).await.0,
        StatusCode::NO_CONTENT
    );
    let token = log_in(&app, "app", "secret").await;
    assert_eq!(send(&app, "GET", "/queues", Some(&token), None).await.status, StatusCode::OK);
    assert_eq!(
        api(&app, "PUT", "/api/users/app", r#"{"password":"secret","tags":""}"#).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(send(&app, "GET", "/queues", Some(&token), None).await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_next_page_after_a_login_stays_on_this_server() {
    let (_broker, app) = app();
    for next in ["https%3A%2F%2Fevil.example", "%2F%2Fevil.example", "%2F%5Cevil.example"] {
        let reply =
            send(&app, "POST", "/login", None, Some(&format!("username=guest&password=guest&next={next}"))).await;
        assert_eq!(reply.location, "/", "next={next}");
    }
}

#[tokio::test]
async fn the_queues_pages_show_the_apis_numbers_and_escape_names() {
    let (_broker, app) = app();
    queue_with_messages(&app, "orders", 3).await;
    queue_with_messages(&app, "%3Cb%3Ebold%3C%2Fb%3E", 0).await;
    let token = log_in(&app, "guest", "guest").await;
    let list = send(&app, "GET", "/queues", Some(&token), None).await;
    assert_eq!(list.status, StatusCode::OK);
    let row = &list.body[list.body.find(r#"<a href="/queues/%2F/orders">orders</a>"#).expect("orders is listed")..];
    let ready = row.find(r#"data-ptr="/messages_ready" data-fmt="count">"#).unwrap();
    assert!(row[ready..].starts_with(r#"data-ptr="/messages_ready" data-fmt="count">3<"#), "{}", &row[..ready + 60]);
    assert!(list.body.contains("&lt;b&gt;bold&lt;/b&gt;"));
    assert!(!list.body.contains("<b>bold</b>"));
    let filtered = send(&app, "GET", "/queues?name=ord", Some(&token), None).await;
    assert!(filtered.body.contains("orders") && !filtered.body.contains("bold"));
    let one = send(&app, "GET", "/queues/%2F/orders", Some(&token), None).await;
    assert_eq!(one.status, StatusCode::OK);
    assert!(one.body.contains(r#"data-ptr="/messages" data-fmt="count">3<"#));
    assert!(one.body.contains("x-queue-type"), "arguments are shown");
    let missing = send(&app, "GET", "/queues/%2F/nope", Some(&token), None).await;
    assert!(missing.body.contains("404"), "the API's 404 is shown");
}

#[tokio::test]
async fn purge_and_delete_need_the_sessions_csrf_token() {
    let (_broker, app) = app();
    queue_with_messages(&app, "orders", 2).await;
    let token = log_in(&app, "guest", "guest").await;
    let page = send(&app, "GET", "/queues/%2F/orders", Some(&token), None).await;
    let csrf = csrf_of(&page.body);
    let forged = send(&app, "POST", "/queues/%2F/orders/purge", Some(&token), Some("csrf=0000")).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let other = log_in(&app, "guest", "guest").await;
    let other_csrf = csrf_of(&send(&app, "GET", "/", Some(&other), None).await.body);
    let crossed =
        send(&app, "POST", "/queues/%2F/orders/purge", Some(&token), Some(&format!("csrf={other_csrf}"))).await;
    assert_eq!(crossed.status, StatusCode::FORBIDDEN, "another session's token does not do");
    assert_eq!(api(&app, "GET", "/api/queues/%2F/orders", "").await.1["messages"], 2);
    let purged = send(&app, "POST", "/queues/%2F/orders/purge", Some(&token), Some(&format!("csrf={csrf}"))).await;
    assert_eq!((purged.status, purged.location.as_str()), (StatusCode::SEE_OTHER, "/queues/%2F/orders"));
    assert_eq!(api(&app, "GET", "/api/queues/%2F/orders", "").await.1["messages"], 0);
    let after = send(&app, "GET", "/queues/%2F/orders", Some(&token), None).await;
    assert!(after.body.contains("Queue orders purged"), "the outcome is shown once");
    assert!(!send(&app, "GET", "/queues/%2F/orders", Some(&token), None).await.body.contains("purged"));
    let deleted = send(&app, "POST", "/queues/%2F/orders/delete", Some(&token), Some(&format!("csrf={csrf}"))).await;
    assert_eq!(deleted.location, "/queues");
    assert_eq!(api(&app, "GET", "/api/queues/%2F/orders", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn every_tab_renders_for_an_administrator() {
    let (_broker, app) = app();
    queue_with_messages(&app, "orders", 1).await;
    let token = log_in(&app, "guest", "guest").await;
    for (path, expect) in [
        ("/", "Queued messages"),
        ("/connections", "No connections"),
        ("/channels", "No channels"),
        ("/exchanges", "amq.topic"),
        ("/exchanges/%2F/amq.default", "orders"),
        ("/admin", "administrator"),
        ("/dead-letters", "Dead letters"),
        ("/redrives", "Start redrive"),
    ] {
        let page = send(&app, "GET", path, Some(&token), None).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(page.body.contains(expect), "{path} lacks {expect}");
        assert!(page.body.contains(r#"class="tab active""#), "{path} marks its tab");
    }
}

#[tokio::test]
async fn a_monitoring_user_sees_the_apis_refusals_in_place() {
    let (_broker, app) = app();
    assert_eq!(
        api(&app, "PUT", "/api/users/watcher", r#"{"password":"pw","tags":"management"}"#).await.0,
        StatusCode::CREATED
    );
    let token = log_in(&app, "watcher", "pw").await;
    let admin = send(&app, "GET", "/admin", Some(&token), None).await;
    assert_eq!(admin.status, StatusCode::OK);
    assert!(admin.body.contains("Users: 401 Not administrator user"), "{}", admin.body);
}

#[tokio::test]
async fn the_embedded_assets_are_served() {
    let (_broker, app) = app();
    let css = send(&app, "GET", "/static/app.css", None, None).await;
    assert!(css.status == StatusCode::OK && css.body.contains("--accent"));
    let js = send(&app, "GET", "/static/app.js", None, None).await;
    assert!(js.status == StatusCode::OK && js.body.contains("data-src"));
}

#[tokio::test]
async fn policies_are_added_and_deleted_with_the_apis_checks() {
    let (_broker, app) = app();
    let token = log_in(&app, "guest", "guest").await;
    let csrf = csrf_of(&send(&app, "GET", "/admin", Some(&token), None).await.body);
    let form = format!(
        "csrf={csrf}&vhost=%2F&name=dlx&pattern=%5Eorders%24&apply_to=queues&priority=3\
         &definition=%7B%22dead-letter-exchange%22%3A%22dlx%22%7D"
    );
    let saved = send(&app, "POST", "/admin/policies", Some(&token), Some(&form)).await;
    assert_eq!((saved.status, saved.location.as_str()), (StatusCode::SEE_OTHER, "/admin#policies"));
    let (status, policy) = api(&app, "GET", "/api/policies/%2F/dlx", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        policy,
        serde_json::json!({"vhost":"/","name":"dlx","pattern":"^orders$","apply-to":"queues",
            "definition":{"dead-letter-exchange":"dlx"},"priority":3})
    );
    let admin = send(&app, "GET", "/admin", Some(&token), None).await;
    assert!(admin.body.contains("Policy dlx saved") && admin.body.contains("<code>^orders$</code>"));
    // The API's own refusal comes back as it is.
    let bad = form.replace("%7B%22dead-letter-exchange%22%3A%22dlx%22%7D", "%7B%22max-length%22%3A%22x%22%7D");
    send(&app, "POST", "/admin/policies", Some(&token), Some(&bad)).await;
    let refused = send(&app, "GET", "/admin", Some(&token), None).await;
    assert!(refused.body.contains("Policy refused: 400"), "{}", refused.body);
    let not_json = form.replace("%7B%22dead-letter-exchange%22%3A%22dlx%22%7D", "nope");
    send(&app, "POST", "/admin/policies", Some(&token), Some(&not_json)).await;
    assert!(send(&app, "GET", "/admin", Some(&token), None).await.body.contains("Definition is not JSON"));
    // Without the token nothing happens; with it the policy goes.
    let delete = "vhost=%2F&name=dlx";
    assert_eq!(
        send(&app, "POST", "/admin/policies/delete", Some(&token), Some(delete)).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(api(&app, "GET", "/api/policies/%2F/dlx", "").await.0, StatusCode::OK);
    send(&app, "POST", "/admin/policies/delete", Some(&token), Some(&format!("csrf={csrf}&{delete}"))).await;
    assert_eq!(api(&app, "GET", "/api/policies/%2F/dlx", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_cookie_is_secure_over_https() {
    let (_broker, app) = app();
    let https = app.layer(axum::Extension(crate::OverTls));
    let reply = send(&https, "POST", "/login", None, Some("username=guest&password=guest")).await;
    assert!(reply.cookie.ends_with("; Secure"), "{}", reply.cookie);
    let (_broker, plain) = self::app();
    let reply = send(&plain, "POST", "/login", None, Some("username=guest&password=guest")).await;
    assert!(!reply.cookie.contains("Secure"), "{}", reply.cookie);
}

#[tokio::test]
async fn an_administrator_adds_and_deletes_users_vhosts_and_permissions() {
    let (broker, app) = app();
    let token = log_in(&app, "guest", "guest").await;
    let admin = send(&app, "GET", "/admin", Some(&token), None).await;
    for form in [r#"action="/admin/users""#, r#"action="/admin/vhosts""#, r#"action="/admin/permissions""#] {
        assert!(admin.body.contains(form), "an administrator gets {form}");
    }
    let csrf = csrf_of(&admin.body);
    let post = |path: &'static str, form: String| {
        let (app, token) = (app.clone(), token.clone());
        async move { send(&app, "POST", path, Some(&token), Some(&form)).await }
    };
    // A user with tags and a password.
    let mismatch = post("/admin/users", format!("csrf={csrf}&name=ops&password=pw1&password_confirm=pw2&tags=")).await;
    assert_eq!(mismatch.location, "/admin#users");
    assert_eq!(api(&app, "GET", "/api/users/ops", "").await.0, StatusCode::NOT_FOUND);
    let added = post(
        "/admin/users",
        format!("csrf={csrf}&name=ops&password=s3cret&password_confirm=s3cret&tags=monitoring%2C+management"),
    )
    .await;
    assert_eq!((added.status, added.location.as_str()), (StatusCode::SEE_OTHER, "/admin#users"));
    let (status, user) = api(&app, "GET", "/api/users/ops", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user["tags"], serde_json::json!(["monitoring", "management"]));
    assert!(broker.authenticate("ops", "s3cret").is_some(), "the password was set");
    // A vhost, then a permission in it.
    post("/admin/vhosts", format!("csrf={csrf}&name=shop&description=the+shop&tags=eu")).await;
    let (status, vhost) = api(&app, "GET", "/api/vhosts/shop", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((vhost["description"].as_str(), vhost["tags"].clone()), (Some("the shop"), serde_json::json!(["eu"])));
    let granted =
        post("/admin/permissions", format!("csrf={csrf}&user=ops&vhost=shop&configure=%5Eops-.*&write=.*&read=")).await;
    assert_eq!(granted.location, "/admin#permissions");
    let (status, permission) = api(&app, "GET", "/api/permissions/shop/ops", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (permission["configure"].as_str(), permission["write"].as_str(), permission["read"].as_str()),
        (Some("^ops-.*"), Some(".*"), Some(""))
    );
    let page = send(&app, "GET", "/admin", Some(&token), None).await;
    assert!(page.body.contains("Permissions of ops in shop set"), "the outcome is shown");
    assert!(page.body.contains("<code>^ops-.*</code>"));
    // The API's refusals are shown as they are.
    post("/admin/permissions", format!("csrf={csrf}&user=nobody&vhost=shop&configure=&write=&read=")).await;
    assert!(send(&app, "GET", "/admin", Some(&token), None).await.body.contains("Refused: 400"));
    // Without the token nothing happens.
    assert_eq!(post("/admin/users/delete", "name=ops".to_owned()).await.status, StatusCode::FORBIDDEN);
    assert_eq!(api(&app, "GET", "/api/users/ops", "").await.0, StatusCode::OK);
    // Cleared and deleted.
    post("/admin/permissions/delete", format!("csrf={csrf}&user=ops&vhost=shop")).await;
    assert_eq!(api(&app, "GET", "/api/permissions/shop/ops", "").await.0, StatusCode::NOT_FOUND);
    post("/admin/vhosts/delete", format!("csrf={csrf}&name=shop")).await;
    assert_eq!(api(&app, "GET", "/api/vhosts/shop", "").await.0, StatusCode::NOT_FOUND);
    post("/admin/users/delete", format!("csrf={csrf}&name=ops")).await;
    assert_eq!(api(&app, "GET", "/api/users/ops", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_non_administrator_sees_no_access_forms_and_its_posts_are_refused() {
    let (_broker, app) = app();
    assert_eq!(
        api(&app, "PUT", "/api/users/watcher", r#"{"password":"pw","tags":"monitoring"}"#).await.0,
        StatusCode::CREATED
    );
    let token = log_in(&app, "watcher", "pw").await;
    let admin = send(&app, "GET", "/admin", Some(&token), None).await;
    assert_eq!(admin.status, StatusCode::OK);
    assert!(admin.body.contains("Users: 401"), "the users are an administrator's: {}", admin.body);
    for form in ["/admin/users", "/admin/vhosts", "/admin/permissions"] {
        assert!(!admin.body.contains(&format!(r#"action="{form}"#)), "no form posting to {form}");
    }
    let csrf = csrf_of(&admin.body);
    for (path, form) in [
        ("/admin/users", "name=evil&password=x&password_confirm=x&tags=administrator"),
        ("/admin/users/delete", "name=guest"),
        ("/admin/vhosts", "name=evil"),
        ("/admin/vhosts/delete", "name=%2F"),
        ("/admin/permissions", "user=watcher&vhost=%2F&configure=.*&write=.*&read=.*"),
        ("/admin/permissions/delete", "user=guest&vhost=%2F"),
    ] {
        let reply = send(&app, "POST", path, Some(&token), Some(&format!("csrf={csrf}&{form}"))).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{path}");
    }
    assert_eq!(api(&app, "GET", "/api/users/evil", "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(api(&app, "GET", "/api/users/guest", "").await.0, StatusCode::OK);
    assert_eq!(api(&app, "GET", "/api/vhosts/evil", "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(api(&app, "GET", "/api/permissions/%2F/guest", "").await.0, StatusCode::OK);
    assert_eq!(api(&app, "GET", "/api/permissions/%2F/watcher", "").await.0, StatusCode::NOT_FOUND);
}
