//! The dead-letter browser over an in-process broker.

use std::sync::Arc;

use axum::http::StatusCode;
use charon_engine::Broker;
use serde_json::{Value as Json, json};

use crate::access_tests::call_as;
use crate::redrives_tests::with_dead_letters;

async fn call(broker: &Arc<Broker>, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    call_as(broker, ("guest", "guest"), method, uri, body).await
}

fn payloads(page: &Json) -> Vec<String> {
    page["items"].as_array().unwrap().iter().map(|i| i["payload"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_follow_cursors_in_both_orders_and_filters_apply() {
    let (broker, _vhost) = with_dead_letters(5).await;
    let uri = "/api/charon/queues/%2F/dlq/messages";
    let (status, first) = call(&broker, "GET", &format!("{uri}?page_size=2"), "").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(
        (first["page"].clone(), first["page_size"].clone(), first["has_more"].clone()),
        (json!(1), json!(2), json!(true))
    );
    assert_eq!(payloads(&first), ["m0", "m1"]);
    let item = &first["items"][0];
    assert_eq!(item["payload_encoding"], "string");
    assert_eq!(item["payload_bytes"], 2);
    assert_eq!(item["properties"]["headers"]["n"], 0);
    let death = &item["deaths"][0];
    assert_eq!(
        (death["reason"].clone(), death["queue"].clone(), death["count"].clone()),
        (json!("rejected"), json!("orders"), json!(1))
    );
    assert_eq!(death["routing_keys"], json!(["orders"]));
    assert_eq!(death["error_condition"], Json::Null);
    assert!(
        death["first_time"].as_i64().unwrap() > 1_700_000_000
            && death["first_time"].as_i64().unwrap() < 1_000_000_000_000
    );
    // The cursor: the last id of the page.
    let last = first["items"][1]["id"].as_str().unwrap();
    let (_, next) = call(&broker, "GET", &format!("{uri}?page_size=2&after={last}"), "").await;
    assert_eq!(payloads(&next), ["m2", "m3"]);
    // Page numbers skip the pages before.
    let (_, third) = call(&broker, "GET", &format!("{uri}?page=3&page_size=2"), "").await;
    assert_eq!((payloads(&third), third["has_more"].clone()), (vec!["m4".to_owned()], json!(false)));
    let (_, newest) = call(&broker, "GET", &format!("{uri}?order=newest&page_size=3"), "").await;
    assert_eq!(payloads(&newest), ["m4", "m3", "m2"]);
    let before = newest["items"][2]["id"].as_str().unwrap();
    let (_, older) = call(&broker, "GET", &format!("{uri}?order=newest&before={before}"), "").await;
    assert_eq!(payloads(&older), ["m1", "m0"]);
    let (_, filtered) =
        call(&broker, "GET", &format!("{uri}?header.n=3&reason=rejected&source_queue=orders"), "").await;
    assert_eq!(payloads(&filtered), ["m3"]);
    let (_, none) = call(&broker, "GET", &format!("{uri}?reason=expired"), "").await;
    assert_eq!((payloads(&none).len(), none["has_more"].clone()), (0, json!(false)));
    let (_, cut) = call(&broker, "GET", &format!("{uri}?truncate=1&page_size=1"), "").await;
    assert_eq!((cut["items"][0]["payload"].clone(), cut["items"][0]["payload_bytes"].clone()), (json!("m"), json!(2)));
    for bad in ["bogus=1", "order=sideways", "page=0", "page_size=501", "after=1&order=newest", "reason=late"] {
        let (status, got) = call(&broker, "GET", &format!("{uri}?{bad}"), "").await;
        assert_eq!((status, got["error"].clone()), (StatusCode::BAD_REQUEST, json!("bad_request")), "{bad}: {got}");
    }
    assert_eq!(call(&broker, "GET", "/api/charon/queues/%2F/nope/messages", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chosen_messages_are_deleted_or_moved_back() {
    let (broker, vhost) = with_dead_letters(4).await;
    let uri = "/api/charon/queues/%2F/dlq/messages";
    let (_, page) = call(&broker, "GET", uri, "").await;
    let ids: Vec<String> =
        page["items"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect();
    let (status, got) =
        call(&broker, "POST", &format!("{uri}/delete"), &json!({"ids": [ids[0], ids[0]]}).to_string()).await;
    assert_eq!((status, got), (StatusCode::OK, json!({"deleted": 1})));
    let body = json!({"ids": [ids[1], ids[2], "999999"], "destination": {"type": "original", "death": "first"}});
    let (status, got) = call(&broker, "POST", &format!("{uri}/move"), &body.to_string()).await;
    assert_eq!((status, got), (StatusCode::OK, json!({"moved": 2, "failed": 1})));
    let (_, left) = call(&broker, "GET", uri, "").await;
    assert_eq!(payloads(&left), ["m3"]);
    let orders = vhost.queue("orders", 1).unwrap();
    let owner = charon_engine::Owner { session: 1, channel: 1 };
    let mut moved = Vec::new();
    while let Some(got) = orders.get(owner, true).await.unwrap() {
        assert_eq!(got.delivery.message.broker.redrive_count, 1);
        moved.push(String::from_utf8(got.delivery.message.body.bytes().to_vec()).unwrap());
    }
    assert_eq!(moved, ["m1", "m2"]);
    let (status, _) = call(&broker, "POST", &format!("{uri}/delete"), r#"{"ids":["x"]}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) =
        call(&broker, "POST", &format!("{uri}/move"), r#"{"ids":[],"destination":{"type":"nowhere"}}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_lists_queues_that_dead_letter_and_receive_dead_letters() {
    let (broker, vhost) = with_dead_letters(3).await;
    let (status, got) = call(&broker, "GET", "/api/charon/dead-letters/%2F", "").await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let names: Vec<&str> = got.as_array().unwrap().iter().map(|q| q["queue"].as_str().unwrap()).collect();
    assert_eq!(names, ["amq.charon.dead-letters", "dlq", "orders"]);
    let orders = &got[2];
    assert_eq!(orders["dead_lettered"], json!({"rejected":3,"expired":0,"maxlen":0,"delivery_limit":0}));
    assert_eq!(orders["rates"], json!({"rejected":0.0,"expired":0.0,"maxlen":0.0,"delivery_limit":0.0}));
    let dlq = &got[1];
    assert_eq!(dlq["dead_lettered"]["rejected"], 0);
    // The gauges are those of the queue's last pass.
    let dlq_queue = vhost.queue("dlq", 1).unwrap();
    dlq_queue.stats().await.unwrap();
    let (_, got) = call(&broker, "GET", "/api/charon/dead-letters/%2F", "").await;
    assert_eq!(got[1]["messages"], 3);
    assert!(got[1]["oldest_message_age_seconds"].as_u64().unwrap() < 5);
    assert_eq!(call(&broker, "GET", "/api/charon/dead-letters/nohost", "").await.0, StatusCode::NOT_FOUND);
}
