//! The gateway over an in-process broker, without sockets: every error path Zaqar defines,
//! and the claim-count dead-letter move.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use charon_engine::{Broker, BrokerConfig};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::{Zaqar, ZaqarConfig};

const CLIENT: &str = "0123456789abcdef0123456789abcdef";

fn gateway() -> Arc<Zaqar> {
    Zaqar::new(
        Broker::new(BrokerConfig::default()),
        ZaqarConfig { data_dir: None, create_vhosts: true, ..ZaqarConfig::default() },
    )
    .unwrap()
}

async fn send(z: &Arc<Zaqar>, request: Request<Body>) -> (StatusCode, Value, Option<String>) {
    let response = crate::router(Arc::clone(z)).oneshot(request).await.unwrap();
    let status = response.status();
    let location = response.headers().get("location").map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    (status, body, location)
}

fn request(method: &str, uri: &str, body: &str) -> axum::http::request::Builder {
    let _ = body;
    Request::builder().method(method).uri(uri).header("content-type", "application/json")
}

async fn call(z: &Arc<Zaqar>, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let r = request(method, uri, body).header("client-id", CLIENT).header("x-project-id", "p1");
    let (status, body, _) = send(z, r.body(Body::from(body.to_owned())).unwrap()).await;
    (status, body)
}

async fn patch(z: &Arc<Zaqar>, uri: &str, body: &str) -> (StatusCode, Value) {
    let r = Request::builder()
        .method("PATCH")
        .uri(uri)
        .header("content-type", "application/openstack-messaging-v2.0-json-patch")
        .header("client-id", CLIENT)
        .header("x-project-id", "p1");
    let (status, body, _) = send(z, r.body(Body::from(body.to_owned())).unwrap()).await;
    (status, body)
}

fn error(title: &str, description: &str) -> Value {
    json!({ "title": title, "description": description })
}

#[tokio::test]
async fn client_id_and_project_are_required_as_zaqar_requires_them() {
    let z = gateway();
    let without = Request::builder().uri("/v2/queues").header("x-project-id", "p1").body(Body::empty()).unwrap();
    assert_eq!(send(&z, without).await.1, error("Missing header value", "The Client-ID header is required."));
    let bad = Request::builder()
        .uri("/v2/queues")
        .header("client-id", "nope")
        .header("x-project-id", "p")
        .body(Body::empty());
    let (status, body, _) = send(&z, bad.unwrap()).await;
    assert_eq!((status, body), (StatusCode::BAD_REQUEST, error("Wrong UUID value", "Malformed hexadecimal UUID.")));
    let no_project = Request::builder().uri("/v2/queues").header("client-id", CLIENT).body(Body::empty()).unwrap();
    assert_eq!(send(&z, no_project).await.1, error("Project-Id Missing", "The header X-PROJECT-ID was missing"));
    let empty = Request::builder().uri("/v2/queues").header("client-id", CLIENT).header("x-project-id", "");
    assert_eq!(send(&z, empty.body(Body::empty()).unwrap()).await.1["title"], "Empty project header not allowed");
    let dashed = Request::builder()
        .uri("/v2/queues")
        .header("client-id", "01234567-89ab-cdef-0123-456789abcdef")
        .header("x-project-id", "p1");
    assert_eq!(send(&z, dashed.body(Body::empty()).unwrap()).await.0, StatusCode::OK);
    // The versions document needs neither.
    let (status, body, _) = send(&z, Request::builder().uri("/").body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["versions"][0]["id"].clone()), (StatusCode::MULTIPLE_CHOICES, json!("2")));
    assert_eq!(call(&z, "GET", "/v2/ping", "").await.0, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn queue_names_and_long_projects_are_refused() {
    let z = gateway();
    let refused =
        error("Invalid queue identification", "The format of the submitted queue name or project id is not valid.");
    assert_eq!(call(&z, "PUT", "/v2/queues/bad%20name", "").await, (StatusCode::BAD_REQUEST, refused.clone()));
    let long = "q".repeat(65);
    assert_eq!(call(&z, "PUT", &format!("/v2/queues/{long}"), "").await.1, refused);
    assert_eq!(call(&z, "PUT", &format!("/v2/queues/{}", "q".repeat(64)), "").await.0, StatusCode::CREATED);
    let r = request("PUT", "/v2/queues/ok", "").header("client-id", CLIENT).header("x-project-id", "p".repeat(257));
    assert_eq!(send(&z, r.body(Body::empty()).unwrap()).await.1, refused);
}

#[tokio::test]
async fn a_refused_project_gets_400_when_vhosts_are_not_created() {
    let broker = Broker::new(BrokerConfig::default());
    let z = Zaqar::new(broker, ZaqarConfig { data_dir: None, create_vhosts: false, ..ZaqarConfig::default() }).unwrap();
    let (status, body) = call(&z, "PUT", "/v2/queues/q", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["description"].as_str().unwrap().contains("Project p1 has no virtual host"));
}

#[tokio::test]
async fn queues_metadata_and_json_patch() {
    let z = gateway();
    assert_eq!(call(&z, "PUT", "/v2/queues/orders", r#"{"a": 1}"#).await.0, StatusCode::CREATED);
    assert_eq!(call(&z, "PUT", "/v2/queues/orders", r#"{"a": 2}"#).await.0, StatusCode::NO_CONTENT);
    let (status, meta) = call(&z, "GET", "/v2/queues/orders", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (meta["a"].clone(), meta["_default_message_ttl"].clone(), meta["_max_claim_count"].clone()),
        (json!(2), json!(3600), Value::Null)
    );
    let ops = r#"[{"op":"add","path":"/metadata/_max_claim_count","value":2},
                 {"op":"replace","path":"/metadata/_dead_letter_queue","value":"dlq"},
                 {"op":"remove","path":"/metadata/_default_message_ttl"},
                 {"op":"remove","path":"/metadata/a"}]"#;
    let (status, meta) = patch(&z, "/v2/queues/orders", ops).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((meta["_max_claim_count"].clone(), meta["_dead_letter_queue"].clone()), (json!(2), json!("dlq")));
    assert_eq!(meta.get("a"), None);
    // Malformed JSON and JSON-patch.
    assert_eq!(
        patch(&z, "/v2/queues/orders", "[{").await.1,
        error("Invalid request body", "Request body could not be parsed.")
    );
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"{"op":"add"}"#).await.1,
        error("Invalid request body", "Request body must be a JSON array of operation objects.")
    );
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"[{"op":"remove","path":"/metadata/nothing"}]"#).await,
        (StatusCode::CONFLICT, error("Resource conflict", "Can't remove non-existent object nothing."))
    );
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"[{"op":"replace","path":"/metadata/nothing","value":1}]"#).await.0,
        StatusCode::CONFLICT
    );
    assert_eq!(patch(&z, "/v2/queues/orders", "").await.1["description"], "PATCH body could not be empty for update.");
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"[{"op":"move","path":"/metadata/a","value":1}]"#).await.1["description"],
        "Invalid operation: `move`. It must be one of the following: add, remove, replace."
    );
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"[{"op":"add","path":"/x/a","value":1}]"#).await.1["description"],
        "The root of path must be metadata, e.g /metadata/key."
    );
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"[{"op":"add","path":"/metadata/a"}]"#).await.1["description"],
        "Operation \"add\" requires a member named \"value\"."
    );
    assert_eq!(
        patch(&z, "/v2/queues/orders", r#"[{"op":"add","path":"metadata/a","value":1}]"#).await.1["description"],
        "Pointer `metadata/a` does not start with \"/\"."
    );
    let (status, body) = call(&z, "PATCH", "/v2/queues/orders", "[]").await;
    assert_eq!((status, body["title"].clone()), (StatusCode::UNSUPPORTED_MEDIA_TYPE, json!("Unsupported media type")));
    // Reserved values are checked; the queue itself may not be its DLQ; no chains.
    let (status, body) =
        patch(&z, "/v2/queues/orders", r#"[{"op":"add","path":"/metadata/_default_message_ttl","value":"x"}]"#).await;
    assert_eq!(
        (status, body),
        (StatusCode::BAD_REQUEST, error("Invalid request body", "_default_message_ttl must be integer."))
    );
    assert_eq!(
        call(&z, "PUT", "/v2/queues/dlq", r#"{"_max_claim_count": 1, "_dead_letter_queue": "other"}"#).await.1["description"],
        "Queue dlq is the dead letter queue of orders: chaining dead letter queues is not supported."
    );
    assert_eq!(
        call(&z, "PUT", "/v2/queues/self", r#"{"_max_claim_count": 1, "_dead_letter_queue": "self"}"#).await.1["description"],
        "_dead_letter_queue can not be the queue itself."
    );
    // Listing, paging by marker.
    call(&z, "PUT", "/v2/queues/zeta", "").await;
    let (_, page) = call(&z, "GET", "/v2/queues?limit=1&with_count=true&detailed=true", "").await;
    assert_eq!(page["queues"][0]["name"], "orders");
    assert_eq!(page["queues"][0]["metadata"]["_max_claim_count"], 2);
    assert_eq!(page["count"], 2);
    let next = page["links"][0]["href"].as_str().unwrap().to_owned();
    assert_eq!(call(&z, "GET", &next, "").await.1["queues"][0]["name"], "zeta");
    assert_eq!(
        call(&z, "GET", "/v2/queues?limit=21", "").await.1["description"],
        "Limit must be at least 1 and no greater than 20."
    );
    assert_eq!(call(&z, "DELETE", "/v2/queues/zeta", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", "/v2/queues/zeta", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn posts_are_checked_as_zaqar_checks_them() {
    let z = gateway();
    let uri = "/v2/queues/q/messages";
    let big = format!(r#"{{"messages":[{{"body":"{}"}}]}}"#, "x".repeat(262_145));
    assert_eq!(
        call(&z, "POST", uri, &big).await,
        (
            StatusCode::BAD_REQUEST,
            error("Invalid API request", "Message collection size is too large. Max size 262144")
        )
    );
    assert_eq!(call(&z, "POST", uri, "{").await.1, error("Invalid request body", "Request body could not be parsed."));
    assert_eq!(
        call(&z, "POST", uri, r#"{"x":1}"#).await.1["description"],
        "No messages were found in the request body."
    );
    assert_eq!(call(&z, "POST", uri, r#"{"messages":[]}"#).await.1["description"], "No messages to enqueu.");
    assert_eq!(
        call(&z, "POST", uri, r#"{"messages":[{"ttl":300}]}"#).await.1,
        error("Invalid request body", "Missing \"body\" field.")
    );
    assert_eq!(
        call(&z, "POST", uri, r#"{"messages":[{"ttl":"x","body":1}]}"#).await.1["description"],
        "The value of the \"ttl\" field must be a int."
    );
    assert_eq!(
        call(&z, "POST", uri, r#"{"messages":[{"ttl":10,"body":1}]}"#).await.1["description"],
        "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 seconds long."
    );
    // The queue's own post limit.
    call(&z, "PUT", "/v2/queues/small", r#"{"_max_messages_post_size": 40}"#).await;
    let (status, body) =
        call(&z, "POST", "/v2/queues/small/messages", r#"{"messages":[{"body":"0123456789012345678901234567890"}]}"#)
            .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .starts_with("Message collection size is too large. The max size for current queue is 40.")
    );
}

/// A post answers the ids the queue gave its messages, even when a consumer took them at
/// once: they are not looked for afterwards.
#[tokio::test]
async fn a_post_answers_its_messages_ids_even_when_a_consumer_took_them_at_once() {
    let z = gateway();
    let (status, first) = call(&z, "POST", "/v2/queues/q/messages", r#"{"messages":[{"body":1}]}"#).await;
    assert_eq!(
        (status, first["resources"].clone()),
        (StatusCode::CREATED, json!(["/v2/queues/q/messages/000000000000000000000001"]))
    );
    let queue = crate::engine::queue(&crate::engine::vhost(&z.broker, "p1").unwrap(), "q").unwrap();
    let (session, mut deliveries) = charon_engine::SessionSink::new(z.broker.next_id(), u32::MAX);
    let spec = charon_engine::ConsumeSpec {
        id: z.broker.next_id(),
        tag: "taker".to_owned(),
        owner: charon_engine::Owner { session: session.id, channel: 1 },
        session,
        no_ack: true,
        prefetch: 0,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments: charon_model::Table::new(),
    };
    queue.consume(spec).await.unwrap();
    let (status, posted) = call(&z, "POST", "/v2/queues/q/messages", r#"{"messages":[{"body":2},{"body":3}]}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    let hrefs: Vec<&str> = posted["resources"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
    assert_eq!(
        hrefs,
        ["/v2/queues/q/messages/000000000000000000000002", "/v2/queues/q/messages/000000000000000000000003"]
    );
    let mut taken = 0;
    while taken < 3 {
        if let Some(charon_engine::SessionEvent::Deliveries { items, .. }) = deliveries.recv().await {
            taken += items.len();
        }
    }
    assert_eq!(call(&z, "GET", hrefs[1], "").await.0, StatusCode::NOT_FOUND, "taken, so gone");
}

#[tokio::test]
async fn post_list_get_and_delete_by_id() {
    let z = gateway();
    let (status, posted) =
        call(&z, "POST", "/v2/queues/q/messages", r#"{"messages":[{"ttl":300,"body":{"n":1}},{"body":"two"}]}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    let hrefs: Vec<String> =
        posted["resources"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_owned()).collect();
    assert_eq!(hrefs.len(), 2);
    assert!(hrefs[0].starts_with("/v2/queues/q/messages/"));
    let (status, one) = call(&z, "GET", &hrefs[0], "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (one["body"].clone(), one["ttl"].clone(), one["href"].clone()),
        (json!({"n":1}), json!(300), json!(hrefs[0]))
    );
    assert_eq!(call(&z, "GET", &hrefs[1], "").await.1["ttl"], 3600);
    // echo=false (the default) hides the caller's own messages.
    assert_eq!(call(&z, "GET", "/v2/queues/q/messages", "").await.1["messages"], json!([]));
    let (_, page) = call(&z, "GET", "/v2/queues/q/messages?echo=true&limit=1", "").await;
    assert_eq!(page["messages"][0]["body"], json!({"n":1}));
    let next = page["links"][0]["href"].as_str().unwrap().to_owned();
    assert_eq!(call(&z, "GET", &next, "").await.1["messages"][0]["body"], "two");
    let id1 = hrefs[1].rsplit('/').next().unwrap();
    let (_, by_ids) = call(&z, "GET", &format!("/v2/queues/q/messages?ids={id1}"), "").await;
    assert_eq!(by_ids["messages"][0]["body"], "two");
    assert_eq!(
        call(&z, "GET", "/v2/queues/q/messages?limit=0", "").await.1["description"],
        "Limit must be at least 1 and may not be greater than 20."
    );
    assert_eq!(call(&z, "DELETE", &hrefs[0], "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", &hrefs[0], "").await.0, StatusCode::NOT_FOUND);
    let (_, stats) = call(&z, "GET", "/v2/queues/q/stats", "").await;
    let m = &stats["messages"];
    assert_eq!((m["free"].clone(), m["claimed"].clone(), m["total"].clone()), (json!(1), json!(0), json!(1)));
    assert_eq!((m["oldest"]["href"].clone(), m["newest"]["href"].clone()), (json!(hrefs[1]), json!(hrefs[1])));
    // ids= and pop= rules, then pop.
    assert_eq!(
        call(&z, "DELETE", "/v2/queues/q/messages", "").await.1["description"],
        "The request should have either \"ids\" or \"pop\" parameter in the request, to be able to delete."
    );
    assert_eq!(
        call(&z, "DELETE", "/v2/queues/q/messages?pop=1&ids=a", "").await.1["description"],
        "pop and id params cannot be present together in the delete request."
    );
    assert_eq!(
        call(&z, "DELETE", "/v2/queues/q/messages?pop=21", "").await.1["description"],
        "Pop value must be at least 1 and may not be greater than 20."
    );
    let (status, popped) = call(&z, "DELETE", "/v2/queues/q/messages?pop=5", "").await;
    assert_eq!((status, popped["messages"][0]["body"].clone()), (StatusCode::OK, json!("two")));
    assert_eq!(call(&z, "GET", "/v2/queues/q/stats", "").await.1["messages"]["total"], 0);
}

#[tokio::test]
async fn claims_their_errors_and_the_403_on_mismatch() {
    let z = gateway();
    call(&z, "POST", "/v2/queues/q/messages", r#"{"messages":[{"body":1},{"body":2},{"body":3}]}"#).await;
    let claims = "/v2/queues/q/claims";
    assert_eq!(
        call(&z, "POST", claims, r#"{"ttl":59}"#).await.1["description"],
        "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long."
    );
    assert_eq!(
        call(&z, "POST", claims, r#"{"ttl":60,"grace":43201}"#).await.1["description"],
        "The grace for a claim may not exceed 43200 seconds, and must be at least 60 seconds long."
    );
    assert_eq!(
        call(&z, "POST", &format!("{claims}?limit=21"), "").await.1["description"],
        "Limit must be at least 1 and may not be greater than 20."
    );
    assert_eq!(call(&z, "POST", claims, "{").await.1["title"], "Invalid request body");
    let r = request("POST", &format!("{claims}?limit=2"), "").header("client-id", CLIENT).header("x-project-id", "p1");
    let (status, claim, location) = send(&z, r.body(Body::from(r#"{"ttl":60,"grace":60}"#)).unwrap()).await;
    assert_eq!(status, StatusCode::CREATED);
    let messages = claim["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    let href = messages[0]["href"].as_str().unwrap().to_owned();
    let cid = href.split('=').next_back().unwrap().to_owned();
    assert_eq!(location.unwrap(), format!("{claims}/{cid}"));
    assert_eq!((messages[0]["body"].clone(), messages[0]["claim_count"].clone()), (json!(1), json!(1)));
    let (_, shown) = call(&z, "GET", &format!("{claims}/{cid}"), "").await;
    assert_eq!((shown["ttl"].clone(), shown["messages"].as_array().unwrap().len()), (json!(60), 2));
    let (_, stats) = call(&z, "GET", "/v2/queues/q/stats", "").await;
    let m = &stats["messages"];
    assert_eq!((m["free"].clone(), m["claimed"].clone(), m["total"].clone()), (json!(1), json!(2), json!(3)));
    // Deleting a claimed message: without the claim 403, with another claim id 400/403.
    let plain = href.split('?').next().unwrap().to_owned();
    let unable = |d: &str| error("Unable to delete", d);
    assert_eq!(
        call(&z, "DELETE", &plain, "").await,
        (StatusCode::FORBIDDEN, unable("This message is claimed; it cannot be deleted without a valid claim ID."))
    );
    assert_eq!(
        call(&z, "DELETE", &format!("{plain}?claim_id=000000000000000000000000"), "").await,
        (StatusCode::BAD_REQUEST, unable("The specified claim does not exist or has expired."))
    );
    let (_, other) = call(&z, "POST", claims, "").await;
    let other_href = other["messages"][0]["href"].as_str().unwrap().to_owned();
    let other_cid = other_href.split('=').next_back().unwrap().to_owned();
    assert_eq!(call(&z, "DELETE", &format!("{plain}?claim_id={other_cid}"), "").await.0, StatusCode::FORBIDDEN);
    let unclaimed_plain = other_href.split('?').next().unwrap().to_owned();
    assert_eq!(call(&z, "DELETE", &format!("{claims}/{other_cid}"), "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(
        call(&z, "DELETE", &format!("{unclaimed_plain}?claim_id={cid}"), "").await.1,
        unable("A claim was specified, but the message is not currently claimed.")
    );
    assert_eq!(call(&z, "DELETE", &href, "").await.0, StatusCode::NO_CONTENT);
    // Renew, then release: the released message comes back with its claim counted.
    assert_eq!(call(&z, "PATCH", &format!("{claims}/{cid}"), r#"{"ttl":120}"#).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", &format!("{claims}/{cid}"), "").await.1["ttl"], 120);
    assert_eq!(call(&z, "PATCH", &format!("{claims}/{cid}"), r#"{"ttl":1}"#).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(call(&z, "DELETE", &format!("{claims}/{cid}"), "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", &format!("{claims}/{cid}"), "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&z, "PATCH", &format!("{claims}/{cid}"), r#"{"ttl":60}"#).await.0, StatusCode::NOT_FOUND);
    let (_, again) = call(&z, "POST", &format!("{claims}?limit=5"), "").await;
    let counts: Vec<Value> = again["messages"].as_array().unwrap().iter().map(|m| m["claim_count"].clone()).collect();
    assert_eq!(counts, vec![json!(2), json!(2)]);
    assert_eq!(call(&z, "POST", claims, "").await.0, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_message_claimed_max_times_moves_to_the_dead_letter_queue_with_a_death() {
    let z = gateway();
    let meta = r#"{"_max_claim_count": 2, "_dead_letter_queue": "dlq", "_dead_letter_queue_messages_ttl": 600}"#;
    call(&z, "PUT", "/v2/queues/src", meta).await;
    call(&z, "POST", "/v2/queues/src/messages", r#"{"messages":[{"ttl":300,"body":{"k":"v"}}]}"#).await;
    for round in 1..=2 {
        let (status, claim) = call(&z, "POST", "/v2/queues/src/claims", "").await;
        assert_eq!((status, claim["messages"][0]["claim_count"].clone()), (StatusCode::CREATED, json!(round)));
        let cid = claim["messages"][0]["href"].as_str().unwrap().split('=').next_back().unwrap().to_owned();
        call(&z, "DELETE", &format!("/v2/queues/src/claims/{cid}"), "").await;
    }
    // The third claim finds it claimed twice: it moves, and the claim comes back empty.
    assert_eq!(call(&z, "POST", "/v2/queues/src/claims", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", "/v2/queues/src/stats", "").await.1["messages"]["total"], 0);
    let (_, listed) = call(&z, "GET", "/v2/queues/dlq/messages?echo=true", "").await;
    assert_eq!(
        (listed["messages"][0]["body"].clone(), listed["messages"][0]["ttl"].clone()),
        (json!({"k":"v"}), json!(600))
    );
    let vhost = z.broker.vhost("p1").unwrap();
    let source = vhost.queue("src", 0).unwrap();
    use charon_engine::dead_letter::DeadLetterStrategy;
    use charon_model::DeathReason;
    assert_eq!(source.dead_lettered.get(DeadLetterStrategy::AtLeastOnce, DeathReason::DeliveryLimit), 1);
    let dlq = vhost.queue("dlq", 0).unwrap();
    let page = dlq.browse(charon_engine::queue::BrowseRequest::oldest(10)).await.unwrap();
    let message = &page.items[0].message;
    let death = &message.broker.deaths.as_ref().unwrap().entries[0];
    assert_eq!((death.queue.as_str(), death.reason), ("src", DeathReason::DeliveryLimit));
    assert_eq!(message.broker.delivery_count, 2);
    assert_eq!(message.properties().ttl, Some(600_000));
}

/// A DLQ with no room refuses the move, even one that dead-letters what it refuses (a classic
/// `reject-publish-dlx` queue): the message stays in its source, not also in the DLQ's dead
/// letters, and the claim does not return it.
#[tokio::test]
async fn a_full_dead_letter_queue_refuses_the_move_and_the_message_stays() {
    let z = gateway();
    call(&z, "PUT", "/v2/queues/src", r#"{"_max_claim_count": 1, "_dead_letter_queue": "dlq"}"#).await;
    let vhost = z.broker.vhost("p1").unwrap();
    let mut arguments = charon_model::Table::new();
    arguments.insert("x-max-length", charon_model::Value::I64(0));
    arguments.insert("x-overflow", charon_model::Value::long_str("reject-publish-dlx"));
    arguments.insert("x-dead-letter-exchange", charon_model::Value::long_str(""));
    arguments.insert("x-dead-letter-routing-key", charon_model::Value::long_str("dlq-dead"));
    let declare = charon_engine::QueueDeclare { name: "dlq".into(), durable: true, arguments, ..Default::default() };
    vhost.declare_queue(&declare, 0).await.unwrap();
    let declare = charon_engine::QueueDeclare { name: "dlq-dead".into(), durable: true, ..Default::default() };
    vhost.declare_queue(&declare, 0).await.unwrap();
    call(&z, "POST", "/v2/queues/src/messages", r#"{"messages":[{"body":1}]}"#).await;
    let (_, claim) = call(&z, "POST", "/v2/queues/src/claims", "").await;
    let cid = claim["messages"][0]["href"].as_str().unwrap().split('=').next_back().unwrap().to_owned();
    call(&z, "DELETE", &format!("/v2/queues/src/claims/{cid}"), "").await;
    assert_eq!(call(&z, "POST", "/v2/queues/src/claims", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", "/v2/queues/src/stats", "").await.1["messages"]["total"], 1);
    for queue in ["dlq", "dlq-dead"] {
        assert_eq!(vhost.queue(queue, 0).unwrap().stats().await.unwrap().ready, 0, "{queue}");
    }
}

#[tokio::test]
async fn an_expired_claim_returns_its_messages_counted() {
    let z = gateway();
    call(&z, "POST", "/v2/queues/q/messages", r#"{"messages":[{"body":1}]}"#).await;
    let (_, claim) = call(&z, "POST", "/v2/queues/q/claims", r#"{"ttl":60}"#).await;
    let href = claim["messages"][0]["href"].as_str().unwrap().to_owned();
    let cid = href.split('=').next_back().unwrap().to_owned();
    let now = crate::message::now_ms();
    assert_eq!(z.claims.release_expired(now).await, 0, "not before its TTL");
    assert_eq!(z.claims.release_expired(now + 61_000).await, 1);
    assert_eq!(call(&z, "GET", &format!("/v2/queues/q/claims/{cid}"), "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&z, "DELETE", &href, "").await.0, StatusCode::BAD_REQUEST, "the claim id is no longer valid");
    let (_, again) = call(&z, "POST", "/v2/queues/q/claims", "").await;
    assert_eq!(again["messages"][0]["claim_count"], 2);
}

#[tokio::test]
async fn a_classic_queue_declared_over_amqp_can_not_get_a_claim_count_dlq() {
    let z = gateway();
    call(&z, "PUT", "/v2/queues/zaqar-made", "").await;
    let vhost = z.broker.vhost("p1").unwrap();
    let declare = charon_engine::QueueDeclare {
        name: "classic".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: charon_model::Table::new(),
    };
    vhost.declare_queue(&declare, 0).await.unwrap();
    let meta = r#"{"_max_claim_count": 1, "_dead_letter_queue": "d"}"#;
    let (status, body) = call(&z, "PUT", "/v2/queues/classic", meta).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["description"].as_str().unwrap().starts_with("Queue classic is not a quorum queue"));
    assert_eq!(call(&z, "PUT", "/v2/queues/zaqar-made", meta).await.0, StatusCode::NO_CONTENT);
    // Its messages are Zaqar messages all the same.
    assert_eq!(
        call(&z, "POST", "/v2/queues/classic/messages", r#"{"messages":[{"body":1}]}"#).await.0,
        StatusCode::CREATED
    );
    assert_eq!(call(&z, "POST", "/v2/queues/classic/claims", "").await.0, StatusCode::CREATED);
}

#[tokio::test]
async fn non_json_accept_and_form_bodies_are_refused() {
    let z = gateway();
    let html = Request::builder()
        .uri("/v2/queues")
        .header("accept", "text/html")
        .header("client-id", CLIENT)
        .header("x-project-id", "p1");
    let (status, body, _) = send(&z, html.body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["title"].clone()), (StatusCode::NOT_ACCEPTABLE, json!("Media type not acceptable")));
    let form = Request::builder()
        .method("PUT")
        .uri("/v2/queues/q")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("content-length", "3")
        .header("client-id", CLIENT)
        .header("x-project-id", "p1");
    let (status, body, _) = send(&z, form.body(Body::from("a=b")).unwrap()).await;
    assert_eq!((status, body["title"].clone()), (StatusCode::BAD_REQUEST, json!("Invalid Content-Type")));
    let json_ok = Request::builder()
        .uri("/v2/queues")
        .header("accept", "application/json")
        .header("client-id", CLIENT)
        .header("x-project-id", "p1");
    assert_eq!(send(&z, json_ok.body(Body::empty()).unwrap()).await.0, StatusCode::OK);
}

/// `{"age": 0, "created": "YYYY-MM-DDTHH:MM:SSZ", "href": ...}` of a message just posted (its
/// age may have reached a second).
fn assert_stat(stat: &Value, href: &str) {
    assert_eq!(stat["href"].as_str(), Some(href), "{stat}");
    assert!(matches!(stat["age"].as_i64(), Some(0 | 1)), "whole seconds since the post: {stat}");
    let created = stat["created"].as_str().unwrap();
    let shape: String = created.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
    assert_eq!(shape, "9999-99-99T99:99:99Z");
    assert_eq!(stat.as_object().unwrap().len(), 3);
}

#[tokio::test]
async fn stats_show_the_oldest_and_newest_message_only_when_there_are_messages() {
    let z = gateway();
    call(&z, "PUT", "/v2/queues/s", "").await;
    let (_, empty) = call(&z, "GET", "/v2/queues/s/stats", "").await;
    assert_eq!(empty, json!({"messages": {"claimed": 0, "free": 0, "total": 0}}));
    // A queue that does not exist reads as an empty one (Zaqar's v2 stats resource), not 404.
    let (status, missing) = call(&z, "GET", "/v2/queues/never-made/stats", "").await;
    assert_eq!((status, missing), (StatusCode::OK, json!({"messages": {"claimed": 0, "free": 0, "total": 0}})));
    let (_, posted) =
        call(&z, "POST", "/v2/queues/s/messages", r#"{"messages":[{"body":1},{"body":2},{"body":3}]}"#).await;
    let hrefs: Vec<&str> = posted["resources"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
    // The oldest claimed still counts as the oldest.
    assert_eq!(call(&z, "POST", "/v2/queues/s/claims?limit=1", "").await.0, StatusCode::CREATED);
    let (status, stats) = call(&z, "GET", "/v2/queues/s/stats", "").await;
    assert_eq!(status, StatusCode::OK);
    let m = &stats["messages"];
    assert_eq!((m["free"].clone(), m["claimed"].clone(), m["total"].clone()), (json!(2), json!(1), json!(3)));
    assert_stat(&m["oldest"], hrefs[0]);
    assert_stat(&m["newest"], hrefs[2]);
}

#[tokio::test]
async fn a_delay_is_honoured_only_on_a_queue_with_a_default_delay_as_zaqar_does() {
    let z = gateway();
    // No `_default_message_delay`: Zaqar's post spec drops `delay`, unchecked; the message is
    // claimable at once.
    let (status, _) = call(&z, "POST", "/v2/queues/plain/messages", r#"{"messages":[{"body":1,"delay":"x"}]}"#).await;
    assert_eq!(status, StatusCode::CREATED);
    call(&z, "POST", "/v2/queues/plain/messages", r#"{"messages":[{"body":2,"delay":600}]}"#).await;
    let (status, claim) = call(&z, "POST", "/v2/queues/plain/claims?limit=5", "").await;
    assert_eq!((status, claim["messages"].as_array().unwrap().len()), (StatusCode::CREATED, 2));
    // The queue's delay is checked as Zaqar checks it.
    let range = "The TTL can not exceed 900 seconds, and must be at least 0 seconds long.";
    assert_eq!(
        call(&z, "PUT", "/v2/queues/slow", r#"{"_default_message_delay": 901}"#).await,
        (StatusCode::BAD_REQUEST, error("Invalid API request", range))
    );
    let (status, body) =
        patch(&z, "/v2/queues/plain", r#"[{"op":"add","path":"/metadata/_default_message_delay","value":-1}]"#).await;
    assert_eq!((status, body["description"].clone()), (StatusCode::BAD_REQUEST, json!(range)));
    assert_eq!(call(&z, "PUT", "/v2/queues/slow", r#"{"_default_message_delay": 900}"#).await.0, StatusCode::CREATED);
    // A message's delay: an int from 0 to 900.
    let uri = "/v2/queues/slow/messages";
    let delay_range = "The Delay TTL for a message may not exceed 900 seconds,and must be at least 0 seconds long.";
    for bad in ["901", "-1"] {
        let body = format!(r#"{{"messages":[{{"body":1,"delay":{bad}}}]}}"#);
        assert_eq!(
            call(&z, "POST", uri, &body).await,
            (StatusCode::BAD_REQUEST, error("Invalid API request", delay_range))
        );
    }
    assert_eq!(
        call(&z, "POST", uri, r#"{"messages":[{"body":1,"delay":"x"}]}"#).await,
        (StatusCode::BAD_REQUEST, error("Invalid request body", "The value of the \"delay\" field must be a int."))
    );
    // One due in a second, one with the queue's 900 s, one not delayed.
    let posted = r#"{"messages":[{"body":"soon","delay":1},{"body":"default"},{"body":"now","delay":0}]}"#;
    let (status, posted) = call(&z, "POST", uri, posted).await;
    assert_eq!(status, StatusCode::CREATED);
    let hrefs: Vec<String> =
        posted["resources"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_owned()).collect();
    assert_eq!(hrefs.len(), 3);
    let bodies = |page: &Value| -> Vec<Value> {
        page["messages"].as_array().unwrap().iter().map(|m| m["body"].clone()).collect()
    };
    let (_, listed) = call(&z, "GET", "/v2/queues/slow/messages?echo=true", "").await;
    assert_eq!(bodies(&listed), [json!("now")], "delayed messages are not listed");
    let (_, listed) = call(&z, "GET", "/v2/queues/slow/messages?echo=true&include_delayed=true", "").await;
    assert_eq!(bodies(&listed), [json!("soon"), json!("default"), json!("now")]);
    assert!(listed["links"][0]["href"].as_str().unwrap().ends_with("&echo=true&include_delayed=true"));
    assert_eq!(call(&z, "GET", &hrefs[0], "").await.1["body"], "soon", "shown by id while delayed");
    // Stats: delayed messages are free; the oldest and newest are the one not delayed.
    let (_, stats) = call(&z, "GET", "/v2/queues/slow/stats", "").await;
    let m = &stats["messages"];
    assert_eq!((m["free"].clone(), m["claimed"].clone(), m["total"].clone()), (json!(3), json!(0), json!(3)));
    assert_stat(&m["oldest"], &hrefs[2]);
    assert_stat(&m["newest"], &hrefs[2]);
    // Claims see only what is due.
    let (_, claim) = call(&z, "POST", "/v2/queues/slow/claims?limit=5", "").await;
    assert_eq!(bodies(&claim), [json!("now")]);
    assert_eq!(call(&z, "POST", "/v2/queues/slow/claims?limit=5", "").await.0, StatusCode::NO_CONTENT);
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (status, claim) = call(&z, "POST", "/v2/queues/slow/claims?limit=5", "").await;
    assert_eq!((status, bodies(&claim)), (StatusCode::CREATED, vec![json!("soon")]));
    // A delayed message can be deleted by id; the queue's stats count it until then.
    assert_eq!(call(&z, "GET", "/v2/queues/slow/stats", "").await.1["messages"]["free"], 1);
    assert_eq!(call(&z, "DELETE", &hrefs[1], "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&z, "GET", &hrefs[1], "").await.0, StatusCode::NOT_FOUND);
    let (_, stats) = call(&z, "GET", "/v2/queues/slow/stats", "").await;
    assert_eq!((stats["messages"]["free"].clone(), stats["messages"]["total"].clone()), (json!(0), json!(2)));
}

#[tokio::test]
async fn the_default_delay_applies_to_messages_without_one_and_purge_takes_delayed_ones() {
    let z = gateway();
    call(&z, "PUT", "/v2/queues/d", r#"{"_default_message_delay": 1}"#).await;
    call(&z, "POST", "/v2/queues/d/messages", r#"{"messages":[{"body":"a"},{"body":"b","delay":0}]}"#).await;
    let (_, claim) = call(&z, "POST", "/v2/queues/d/claims?limit=5", "").await;
    assert_eq!(claim["messages"].as_array().unwrap().len(), 1);
    assert_eq!(claim["messages"][0]["body"], "b");
    call(&z, "POST", "/v2/queues/d/messages", r#"{"messages":[{"body":"c","delay":900}]}"#).await;
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let (_, claim) = call(&z, "POST", "/v2/queues/d/claims?limit=5", "").await;
    assert_eq!(claim["messages"][0]["body"], "a");
    assert_eq!(
        call(&z, "POST", "/v2/queues/d/purge", r#"{"resource_types":["messages"]}"#).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, stats) = call(&z, "GET", "/v2/queues/d/stats", "").await;
    assert_eq!(stats["messages"]["total"], 0, "the delayed one is purged too");
}
