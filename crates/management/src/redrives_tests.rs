//! `/api/charon/redrives` over an in-process broker.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use charon_engine::{Broker, BrokerConfig, Enqueue, Owner, QueueDeclare, Settle, VHost};
use charon_model::{Body, Message, Routing, Table, Value};
use serde_json::{Value as Json, json};

use crate::access_tests::call_as;

const GUEST: (&str, &str) = ("guest", "guest");

async fn call(broker: &Arc<Broker>, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    call_as(broker, GUEST, method, uri, body).await
}

/// A broker whose queue `orders` dead-letters into `dlq`, which holds `n` rejected messages.
pub(crate) async fn with_dead_letters(n: usize) -> (Arc<Broker>, Arc<VHost>) {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let declare = |name: &str, arguments: Table| QueueDeclare {
        name: name.into(),
        durable: true,
        arguments,
        ..QueueDeclare::default()
    };
    let mut to_dlq = Table::new();
    to_dlq.insert("x-dead-letter-exchange", Value::long_str(""));
    to_dlq.insert("x-dead-letter-routing-key", Value::long_str("dlq"));
    vhost.declare_queue(&declare("dlq", Table::new()), 1).await.unwrap();
    vhost.declare_queue(&declare("orders", to_dlq), 1).await.unwrap();
    let orders = vhost.queue("orders", 1).unwrap();
    let owner = Owner { session: 1, channel: 1 };
    for i in 0..n {
        let routing = Routing { routing_key: "orders".into(), ..Routing::default() };
        let mut m = Message::new(routing, Body::Data(format!("m{i}").into()));
        m.headers.insert("n", Value::I64(i64::try_from(i).unwrap()));
        assert!(orders.publish(vec![Enqueue { message: Arc::new(m), confirm: None }], None).await);
        let got = orders.get(owner, false).await.unwrap().unwrap();
        orders.settle(vec![got.delivery.seq], Settle::Discard).await;
    }
    let dlq = vhost.queue("dlq", 1).unwrap();
    for _ in 0..500 {
        if dlq.stats().await.unwrap().ready as usize == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (broker, vhost)
}

async fn until_state(broker: &Arc<Broker>, id: &str, state: &str) -> Json {
    let uri = format!("/api/charon/redrives/%2F/{id}");
    for _ in 0..1000 {
        let (_, job) = call(broker, "GET", &uri, "").await;
        if job["state"] == state {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call(broker, "GET", &uri, "").await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_job_has_the_contracts_json_and_counts() {
    let (broker, _vhost) = with_dead_letters(3).await;
    let body = r#"{"source":"dlq","destination":{"type":"original","death":"first"},"dry_run":true}"#;
    let (status, job) = call(&broker, "POST", "/api/charon/redrives/%2F", body).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    let done = until_state(&broker, &id, "completed").await;
    let keys: Vec<&str> = done.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = vec![
        "id",
        "vhost",
        "source",
        "destination",
        "filter",
        "dry_run",
        "rate",
        "max_messages",
        "state",
        "reason",
        "created_at",
        "updated_at",
        "progress",
        "dry_run_result",
        "node",
    ];
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(sorted, expected);
    assert_eq!(done["destination"], json!({"type":"original","death":"first"}));
    assert_eq!(
        (done["rate"].clone(), done["max_messages"].clone(), done["reason"].clone()),
        (Json::Null, Json::Null, Json::Null)
    );
    assert_eq!(done["dry_run_result"], json!({"total":3,"by_reason":{"rejected":3},"by_source":{"orders":3}}));
    assert_eq!(done["progress"]["moved"], 0);
    assert_eq!(done["node"], charon_model::node_name().as_str());
    let progress: Vec<&str> = done["progress"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(progress.len(), 6, "{progress:?}");
    assert!(done["created_at"].as_i64().unwrap() > 1_700_000_000_000);
    // Listed, globally and per vhost.
    assert_eq!(call(&broker, "GET", "/api/charon/redrives", "").await.1[0]["id"], id.as_str());
    assert_eq!(call(&broker, "GET", "/api/charon/redrives/%2F", "").await.1[0]["id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_missing_queues_and_conflicts_get_their_statuses() {
    let (broker, _vhost) = with_dead_letters(30).await;
    let uri = "/api/charon/redrives/%2F";
    let (status, got) =
        call(&broker, "POST", uri, r#"{"source":"dlq","destination":{"type":"queue","queue":"orders"},"bogus":1}"#)
            .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(got["error"], "bad_request");
    assert!(got["reason"].as_str().unwrap().contains("unknown field `bogus`"), "{got}");
    let (status, got) = call(
        &broker,
        "POST",
        uri,
        r#"{"source":"dlq","destination":{"type":"queue","queue":"orders"},"filter":{"reasons":["late"]}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
    let (status, got) =
        call(&broker, "POST", uri, r#"{"source":"nope","destination":{"type":"queue","queue":"orders"}}"#).await;
    assert_eq!((status, got["error"].clone()), (StatusCode::NOT_FOUND, json!("not_found")));
    let (status, _) = call(
        &broker,
        "POST",
        "/api/charon/redrives/nohost",
        r#"{"source":"dlq","destination":{"type":"queue","queue":"orders"}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let slow = r#"{"source":"dlq","destination":{"type":"queue","queue":"orders"},"rate":20}"#;
    let (status, job) = call(&broker, "POST", uri, slow).await;
    assert_eq!(status, StatusCode::CREATED);
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["state"], "running");
    let (status, got) = call(&broker, "POST", uri, slow).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(got["error"], "conflict");
    assert!(got["reason"].as_str().unwrap().contains(&id));
    let job_uri = format!("{uri}/{id}");
    assert_eq!(call(&broker, "DELETE", &job_uri, "").await.0, StatusCode::CONFLICT);
    let (status, paused) = call(&broker, "POST", &format!("{job_uri}/pause"), "").await;
    assert_eq!((status, paused["state"].clone()), (StatusCode::OK, json!("paused")));
    let (status, resumed) = call(&broker, "POST", &format!("{job_uri}/resume"), "").await;
    assert_eq!((status, resumed["state"].clone()), (StatusCode::OK, json!("running")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, running) = call(&broker, "GET", &job_uri, "").await;
    assert!(running["progress"]["moved"].as_u64().unwrap() > 0, "{running}");
    assert!(running["progress"]["remaining"].as_u64().unwrap() < 30, "{running}");
    let (status, cancelled) = call(&broker, "POST", &format!("{job_uri}/cancel"), "").await;
    assert_eq!((status, cancelled["state"].clone()), (StatusCode::OK, json!("cancelled")));
    assert_eq!(call(&broker, "POST", &format!("{job_uri}/resume"), "").await.0, StatusCode::CONFLICT);
    assert_eq!(call(&broker, "DELETE", &job_uri, "").await.0, StatusCode::NO_CONTENT);
    let (status, got) = call(&broker, "GET", &job_uri, "").await;
    assert_eq!((status, got["error"].clone()), (StatusCode::NOT_FOUND, json!("not_found")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acting_on_a_job_needs_read_on_the_source() {
    let (broker, _vhost) = with_dead_letters(1).await;
    let put = |uri: &'static str, body: &'static str| {
        let broker = Arc::clone(&broker);
        async move { assert!(call(&broker, "PUT", uri, body).await.0.is_success()) }
    };
    put("/api/users/ops", r#"{"password":"ops","tags":"management"}"#).await;
    put("/api/permissions/%2F/ops", r#"{"configure":".*","write":".*","read":"^orders$"}"#).await;
    let body = r#"{"source":"dlq","destination":{"type":"queue","queue":"orders"}}"#;
    let (status, got) = call_as(&broker, ("ops", "ops"), "POST", "/api/charon/redrives/%2F", body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{got}");
    assert_eq!(got, json!({"error":"not_authorised","reason":"Access refused."}));
    put("/api/permissions/%2F/ops", r#"{"configure":".*","write":".*","read":".*"}"#).await;
    let (status, _) = call_as(&broker, ("ops", "ops"), "POST", "/api/charon/redrives/%2F", body).await;
    assert_eq!(status, StatusCode::CREATED);
}
