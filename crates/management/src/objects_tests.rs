//! Queues, exchanges and bindings over the API, in process: the answers 4.0.5 gives.

use std::sync::Arc;

use axum::http::StatusCode;
use charon_engine::{Broker, BrokerConfig};
use serde_json::{Value as Json, json};

use crate::access_tests::call_as;

const GUEST: (&str, &str) = ("guest", "guest");

async fn call(broker: &Arc<Broker>, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    call_as(broker, GUEST, method, uri, body).await
}

#[tokio::test]
async fn queues_are_declared_checked_and_deleted_with_rabbitmqs_answers() {
    let broker = Broker::new(BrokerConfig::default());
    let uri = "/api/queues/%2F/q1";
    let body = r#"{"durable":true,"arguments":{"x-max-length":10}}"#;
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::NO_CONTENT);
    let (status, got) = call(&broker, "PUT", uri, r#"{"durable":false,"arguments":{"x-max-length":10}}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        got["reason"],
        "inequivalent arg 'durable' for queue 'q1' in vhost '/': received 'false' but current is 'true'"
    );
    let (_, got) = call(&broker, "PUT", uri, r#"{"durable":"yes"}"#).await;
    assert_eq!(got["reason"], json!(["not_boolean", "yes"]));
    let (status, got) =
        call(&broker, "PUT", "/api/queues/%2F/qq", r#"{"arguments":{"x-queue-type":"quorum"},"auto_delete":true}"#)
            .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(got["reason"], "invalid property 'auto-delete' for queue 'qq' in vhost '/'");
    let (status, got) = call(&broker, "PUT", "/api/queues/%2F/amq.q", "{}").await;
    assert_eq!((status, got["reason"].as_str()), (StatusCode::UNAUTHORIZED, Some("Access refused.")));
    let (_, got) = call(&broker, "PUT", "/api/queues/%2F/n", r#"{"node":"elsewhere@nohost"}"#).await;
    assert_eq!(got["reason"], "Node elsewhere@nohost could not be contacted");
    let here = format!(r#"{{"node":"{}"}}"#, charon_engine::broker::node_name());
    assert_eq!(call(&broker, "PUT", "/api/queues/%2F/n", &here).await.0, StatusCode::CREATED);
    let (status, got) = call(&broker, "PUT", "/api/queues/nowhere/q", "{}").await;
    assert_eq!((status, got), (StatusCode::NOT_FOUND, json!({"error": "not_found", "reason": "vhost_not_found"})));
    let (_, got) = call(&broker, "GET", uri, "").await;
    assert_eq!((got["durable"].clone(), got["arguments"]["x-max-length"].clone()), (json!(true), json!(10)));
    // A message makes if-empty refuse; purging empties the queue.
    let publish = r#"{"properties":{},"routing_key":"q1","payload":"hi","payload_encoding":"string"}"#;
    assert_eq!(
        call(&broker, "POST", "/api/exchanges/%2F/amq.default/publish", publish).await.1,
        json!({"routed": true})
    );
    let (status, got) = call(&broker, "DELETE", "/api/queues/%2F/q1?if-empty=true", "").await;
    assert_eq!((status, got["reason"].as_str()), (StatusCode::BAD_REQUEST, Some("queue 'q1' in vhost '/' not empty")));
    assert_eq!(call(&broker, "DELETE", "/api/queues/%2F/q1/contents", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&broker, "GET", uri, "").await.1["messages"], 0);
    assert_eq!(call(&broker, "DELETE", "/api/queues/%2F/q1?if-empty=true", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(
        call(&broker, "DELETE", uri, "").await,
        (StatusCode::NOT_FOUND, json!({"error": "Object Not Found", "reason": "Not Found"}))
    );
    assert_eq!(call(&broker, "DELETE", "/api/queues/%2F/q1/contents", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn get_fetches_renders_and_settles_by_ackmode() {
    let broker = Broker::new(BrokerConfig::default());
    assert_eq!(call(&broker, "PUT", "/api/queues/%2F/g", "{}").await.0, StatusCode::CREATED);
    let publish = r#"{"properties":{"headers":{"h":1},"content_type":"text/plain","delivery_mode":2,"timestamp":1700000000},
        "routing_key":"g","payload":"aGVsbG8=","payload_encoding":"base64"}"#;
    assert_eq!(
        call(&broker, "POST", "/api/exchanges/%2F/amq.default/publish", publish).await.1,
        json!({"routed": true})
    );
    let get = "/api/queues/%2F/g/get";
    let (status, got) =
        call(&broker, "POST", get, r#"{"count":5,"ackmode":"ack_requeue_true","encoding":"auto"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        got,
        json!([{"payload_bytes": 5, "redelivered": false, "exchange": "", "routing_key": "g", "message_count": 0,
                "properties": {"timestamp": 1700000000, "delivery_mode": 2, "headers": {"h": 1}, "content_type": "text/plain"},
                "payload": "hello", "payload_encoding": "string"}])
    );
    let (_, got) =
        call(&broker, "POST", get, r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"base64","truncate":2}"#)
            .await;
    assert_eq!((got[0]["payload"].clone(), got[0]["redelivered"].clone()), (json!("aGU="), json!(true)));
    let (_, got) = call(&broker, "POST", get, r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}"#).await;
    assert_eq!(got[0]["payload_bytes"], 5);
    assert_eq!(
        call(&broker, "POST", get, r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}"#).await.1,
        json!([])
    );
    let (_, got) = call(&broker, "POST", get, "{}").await;
    assert_eq!(got["reason"], "[{key_missing,ackmode},{key_missing,count},{key_missing,encoding}]");
    let (_, got) = call(&broker, "POST", get, r#"{"count":"x","ackmode":"ack_requeue_true","encoding":"auto"}"#).await;
    assert_eq!(got["reason"], json!(["not_integer", "x"]));
    let (_, got) = call(&broker, "POST", get, r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"x"}"#).await;
    assert_eq!(got["reason"], "Unsupported encoding. Please use auto or base64.");
    let (status, got) = call(
        &broker,
        "POST",
        "/api/queues/%2F/none/get",
        r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}"#,
    )
    .await;
    assert_eq!((status, got), (StatusCode::NOT_FOUND, json!({"error": "not_found", "reason": "queue_not_found"})));
}

#[tokio::test]
async fn publish_answers_routed_and_refuses_as_rabbitmq() {
    let broker = Broker::new(BrokerConfig::default());
    let uri = "/api/exchanges/%2F/amq.default/publish";
    let body = |extra: &str| {
        format!(r#"{{"properties":{{{extra}}},"routing_key":"nowhere","payload":"x","payload_encoding":"string"}}"#)
    };
    assert_eq!(call(&broker, "POST", uri, &body("")).await.1, json!({"routed": false}));
    let (_, got) = call(&broker, "POST", uri, r#"{"routing_key":"k","payload":"x","payload_encoding":"string"}"#).await;
    assert_eq!(got["reason"], "[{key_missing,properties}]");
    let (_, got) = call(&broker, "POST", uri, &body(r#""delivery_mode":"x""#)).await;
    assert_eq!(got["reason"], json!(["not_int", "delivery_mode"]));
    let (_, got) = call(&broker, "POST", uri, &body(r#""user_id":"other""#)).await;
    assert_eq!(
        got["reason"],
        "406 PRECONDITION_FAILED - user_id property set to 'other' but authenticated user was 'guest'"
    );
    let bad = r#"{"properties":{},"routing_key":"k","payload":"x!","payload_encoding":"base64"}"#;
    assert_eq!(call(&broker, "POST", uri, bad).await.1["reason"], json!(["not_base64", "x!"]));
    let (status, got) = call(&broker, "POST", "/api/exchanges/%2F/none/publish", &body("")).await;
    assert_eq!((status, got), (StatusCode::NOT_FOUND, json!({"error": "not_found", "reason": "exchange_not_found"})));
}

#[tokio::test]
async fn exchanges_are_listed_declared_and_deleted() {
    let broker = Broker::new(BrokerConfig::default());
    let uri = "/api/exchanges/%2F/x1";
    let body = r#"{"type":"topic","durable":true,"arguments":{"alternate-exchange":"ae"}}"#;
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::NO_CONTENT);
    let (status, got) = call(&broker, "PUT", uri, r#"{"type":"direct"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        got["reason"],
        "inequivalent arg 'type' for exchange 'x1' in vhost '/': received 'direct' but current is 'topic'"
    );
    let (_, got) = call(&broker, "PUT", "/api/exchanges/%2F/x2", r#"{"type":"fanuot"}"#).await;
    assert_eq!(got["reason"], "unknown exchange type 'fanuot'");
    assert_eq!(call(&broker, "PUT", "/api/exchanges/%2F/amq.x", "{}").await.0, StatusCode::UNAUTHORIZED);
    let (_, got) = call(&broker, "GET", uri, "").await;
    assert_eq!(
        got,
        json!({"arguments": {"alternate-exchange": "ae"}, "auto_delete": false, "durable": true, "internal": false,
               "name": "x1", "type": "topic", "vhost": "/"})
    );
    assert_eq!(
        call(&broker, "GET", "/api/exchanges/%2F/amq.default?columns=name,type", "").await.1,
        json!({"name": "", "type": "direct"})
    );
    let (_, got) = call(&broker, "GET", "/api/exchanges/%2F?page=1&page_size=2&columns=name&name=AMQ.", "").await;
    assert_eq!(got["items"], json!([{"name": "amq.charon.dead-letter-events"}, {"name": "amq.direct"}]));
    assert_eq!((got["page_count"].clone(), got["item_count"].clone()), (json!(3), json!(2)));
    assert_eq!(call(&broker, "DELETE", "/api/exchanges/%2F/amq.direct", "").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&broker, "DELETE", uri, "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&broker, "DELETE", uri, "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bindings_are_created_listed_and_deleted_by_properties_key() {
    let broker = Broker::new(BrokerConfig::default());
    assert_eq!(call(&broker, "PUT", "/api/exchanges/%2F/x", r#"{"type":"topic"}"#).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", "/api/exchanges/%2F/y", "{}").await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", "/api/queues/%2F/q", "{}").await.0, StatusCode::CREATED);
    let base = "/api/bindings/%2F/e/x/q/q";
    assert_eq!(call(&broker, "POST", base, r#"{"routing_key":"a.b"}"#).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "POST", base, "{}").await.0, StatusCode::CREATED);
    assert_eq!(
        call(&broker, "POST", "/api/bindings/%2F/e/x/e/y", r#"{"routing_key":"k"}"#).await.0,
        StatusCode::CREATED
    );
    assert_eq!(call(&broker, "POST", "/api/bindings/%2F/e/x/q/none", "{}").await.0, StatusCode::NOT_FOUND);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/q/bindings", "").await;
    let keys: Vec<_> =
        got.as_array().unwrap().iter().map(|b| (b["source"].clone(), b["properties_key"].clone())).collect();
    assert_eq!(keys, [(json!(""), json!("q")), (json!("x"), json!("~")), (json!("x"), json!("a.b"))]);
    assert_eq!(
        got[2],
        json!({"source": "x", "vhost": "/", "destination": "q", "destination_type": "queue", "routing_key": "a.b",
               "arguments": {}, "properties_key": "a.b"})
    );
    assert_eq!(call(&broker, "GET", "/api/exchanges/%2F/x/bindings/source", "").await.1.as_array().unwrap().len(), 3);
    assert_eq!(call(&broker, "GET", "/api/exchanges/%2F/y/bindings/destination", "").await.1[0]["properties_key"], "k");
    assert_eq!(call(&broker, "GET", &format!("{base}/a.b"), "").await.1["routing_key"], "a.b");
    assert_eq!(call(&broker, "DELETE", &format!("{base}/a.b"), "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&broker, "DELETE", &format!("{base}/a.b"), "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&broker, "GET", base, "").await.1.as_array().unwrap().len(), 1);
    let (_, got) = call(&broker, "GET", "/api/bindings/%2F", "").await;
    let from_x: Vec<_> =
        got.as_array().unwrap().iter().filter(|b| b["source"] == "x").map(|b| b["destination"].clone()).collect();
    assert_eq!(from_x, [json!("q"), json!("y")]);
}

#[tokio::test]
async fn permissions_are_checked_as_rabbitmqs_management_checks_them() {
    let broker = Broker::new(BrokerConfig::default());
    let user = ("u", "p");
    assert_eq!(
        call(&broker, "PUT", "/api/users/u", r#"{"password":"p","tags":"management"}"#).await.0,
        StatusCode::CREATED
    );
    let perms = r#"{"configure":"^c","write":"^w","read":"^r"}"#;
    assert_eq!(call(&broker, "PUT", "/api/permissions/%2F/u", perms).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", "/api/queues/%2F/q", "{}").await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", "/api/exchanges/%2F/x", "{}").await.0, StatusCode::CREATED);
    let refused = (StatusCode::UNAUTHORIZED, json!({"error": "not_authorised", "reason": "Access refused."}));
    assert_eq!(call_as(&broker, user, "PUT", "/api/queues/%2F/nope", "{}").await, refused);
    assert_eq!(call_as(&broker, user, "PUT", "/api/queues/%2F/c1", "{}").await.0, StatusCode::CREATED);
    assert_eq!(call_as(&broker, user, "DELETE", "/api/queues/%2F/q", "").await, refused);
    assert_eq!(call_as(&broker, user, "DELETE", "/api/queues/%2F/q/contents", "").await, refused);
    assert_eq!(call_as(&broker, user, "PUT", "/api/exchanges/%2F/nope", "{}").await, refused);
    assert_eq!(call_as(&broker, user, "POST", "/api/bindings/%2F/e/x/q/q", "{}").await, refused);
    let (status, got) = call_as(
        &broker,
        user,
        "POST",
        "/api/queues/%2F/q/get",
        r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(got["reason"], "ACCESS_REFUSED - read access to queue 'q' in vhost '/' refused for user 'u'");
    let publish = r#"{"properties":{},"routing_key":"q","payload":"x","payload_encoding":"string"}"#;
    let (status, got) = call_as(&broker, user, "POST", "/api/exchanges/%2F/x/publish", publish).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(got["reason"], "403 ACCESS_REFUSED - write access to exchange 'x' in vhost '/' refused for user 'u'");
    // Reading is vhost access only.
    assert_eq!(call_as(&broker, user, "GET", "/api/queues/%2F/q", "").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_queue_reports_its_bytes_node_and_message_stats() {
    let broker = Broker::new(BrokerConfig::default());
    assert_eq!(call(&broker, "PUT", "/api/queues/%2F/s", "{}").await.0, StatusCode::CREATED);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/s", "").await;
    assert_eq!(got["node"], charon_engine::broker::node_name());
    assert_eq!(got.get("message_stats"), None, "a fresh queue has counted nothing");
    assert_eq!(got["exclusive_consumer_tag"], Json::Null);
    for payload in ["abc", "defgh"] {
        let body =
            format!(r#"{{"properties":{{}},"routing_key":"s","payload":"{payload}","payload_encoding":"string"}}"#);
        call(&broker, "POST", "/api/exchanges/%2F/amq.default/publish", &body).await;
    }
    let get = r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}"#;
    call(&broker, "POST", "/api/queues/%2F/s/get", get).await;
    let get = r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}"#;
    call(&broker, "POST", "/api/queues/%2F/s/get", get).await;
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/s", "").await;
    assert_eq!(
        (got["message_bytes"].clone(), got["message_bytes_ready"].clone(), got["message_bytes_unacknowledged"].clone()),
        (json!(5), json!(5), json!(0))
    );
    let stats = &got["message_stats"];
    assert_eq!(
        (stats["publish"].clone(), stats["deliver_get"].clone(), stats["redeliver"].clone(), stats["ack"].clone()),
        (json!(2), json!(2), json!(1), json!(0)),
        "ack_requeue_false fetches with no_ack, as 4.0.5 does: {stats}"
    );
    assert_eq!(stats["publish_details"], json!({"rate": 0.0}), "one sample has no rate yet");
}
