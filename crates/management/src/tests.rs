//! The API over an in-process broker, without sockets.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use charon_engine::{Broker, BrokerConfig, Enqueue, QueueDeclare};
use charon_model::{Message, Table};
use serde_json::Value as Json;
use tower::ServiceExt;

async fn call(broker: &Arc<Broker>, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    crate::access_tests::call_as(broker, ("guest", "guest"), method, uri, body).await
}

#[tokio::test]
async fn requests_without_valid_credentials_get_401() {
    let broker = Broker::new(BrokerConfig::default());
    let request =
        Request::builder().uri("/api/policies").header("authorization", "Basic Z3Vlc3Q6YmFk").body(Body::empty());
    let response = crate::router(broker).oneshot(request.unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let bytes = axum::body::to_bytes(response.into_body(), 1024).await.unwrap();
    assert_eq!(&bytes[..], br#"{"error":"not_authorized","reason":"Not_Authorized"}"#);
}

#[tokio::test]
async fn a_trailing_slash_is_ignored_as_rabbitmq_s_http_server_ignores_it() {
    let broker = Broker::new(BrokerConfig::default());
    for uri in ["/api/overview/", "/api/connections/", "/api/queues/", "/api/queues/%2F/", "/api/vhosts/%2F/"] {
        assert_eq!(call(&broker, "GET", uri, "").await.0, StatusCode::OK, "{uri}");
    }
    assert_eq!(call(&broker, "GET", "/api/queues/?page=1&page_size=5", "").await.0, StatusCode::OK);
    assert_eq!(call(&broker, "PUT", "/api/vhosts/slashed/", "{}").await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "DELETE", "/api/vhosts/slashed/", "").await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&broker, "GET", "/api/vhosts/slashed", "").await.0, StatusCode::NOT_FOUND);
    // One slash only, as an empty last name is still a name: RabbitMQ answers 404 too.
    assert_eq!(call(&broker, "GET", "/api/queues//", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn policy_lifecycle_and_rabbitmq_errors() {
    let broker = Broker::new(BrokerConfig::default());
    let uri = "/api/policies/%2F/dlx";
    let body = r#"{"pattern":"^q","definition":{"dead-letter-exchange":"dlx","max-length":3},"priority":2}"#;
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::NO_CONTENT);
    let (status, got) = call(&broker, "GET", uri, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        got,
        serde_json::json!({"vhost":"/","name":"dlx","pattern":"^q","apply-to":"all",
            "definition":{"dead-letter-exchange":"dlx","max-length":3},"priority":2})
    );
    let (status, got) = call(&broker, "PUT", uri, r#"{"pattern":"^q","definition":{"max-length":-1}}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(got["reason"], "Validation failed\n\n-1 is not a valid maximum length\n");
    let (_, got) = call(&broker, "PUT", uri, r#"{"pattern":"^q","definition":{"overflow":"x"}}"#).await;
    assert_eq!(got["reason"], "Validation failed\n\n&lt;&lt;\"x\"&gt;&gt; is not a valid overflow value\n");
    let (_, got) = call(&broker, "PUT", uri, r#"{"definition":{}}"#).await;
    assert_eq!(got["reason"], "[{key_missing,pattern}]");
    // The invalid requests changed nothing.
    assert_eq!(call(&broker, "GET", uri, "").await.1["definition"]["max-length"], 3);
    assert_eq!(call(&broker, "GET", "/api/policies", "").await.1.as_array().map(Vec::len), Some(1));
    assert_eq!(call(&broker, "DELETE", uri, "").await.0, StatusCode::NO_CONTENT);
    let (status, got) = call(&broker, "DELETE", uri, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(got, serde_json::json!({"error":"Object Not Found","reason":"Not Found"}));
}

#[tokio::test]
async fn a_policy_applies_to_an_existing_queue_and_counts_show_in_the_queue() {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let declare = QueueDeclare {
        name: "q1".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: Table::new(),
    };
    vhost.declare_queue(&declare, 1).await.unwrap();
    let queue = vhost.queue("q1", 1).unwrap();
    let items = (0..5).map(|_| Enqueue { message: Arc::new(Message::default()), confirm: None }).collect();
    assert!(queue.publish(items, None).await);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/q1", "").await;
    assert_eq!((got["messages"].clone(), got["messages_ready"].clone()), (5.into(), 5.into()));
    assert_eq!(got["policy"], Json::Null);
    let body = r#"{"pattern":"^q1$","apply-to":"queues","definition":{"max-length":2}}"#;
    assert_eq!(call(&broker, "PUT", "/api/policies/%2F/limit", body).await.0, StatusCode::CREATED);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/q1", "").await;
    assert_eq!(got["messages_ready"], 2, "the lowered limit dropped the head at once: {got}");
    assert_eq!(got["messages_unacknowledged"], 0);
    assert_eq!(got["policy"], "limit");
    assert_eq!(got["effective_policy_definition"], serde_json::json!({"max-length": 2}));
    assert_eq!(call(&broker, "GET", "/api/queues/%2F/missing", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn alarm_health_checks_answer_as_rabbitmq() {
    let broker = Broker::new(BrokerConfig::default());
    for path in ["/api/health/checks/alarms", "/api/health/checks/local-alarms"] {
        let (status, body) = call(&broker, "GET", path, "").await;
        assert_eq!((status, body), (StatusCode::OK, serde_json::json!({"status": "ok"})));
    }
    broker.resources().set_memory_alarm(true);
    broker.resources().set_disk_low(true);
    let node = charon_engine::broker::node_name();
    let (status, body) = call(&broker, "GET", "/api/health/checks/alarms", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body,
        serde_json::json!({
            "status": "failed",
            "reason": "There are alarms in effect in the cluster",
            "alarms": [{"node": node, "resource": "disk space"}, {"node": node, "resource": "memory"}],
        })
    );
    broker.resources().set_disk_low(false);
    let (status, body) = call(&broker, "GET", "/api/health/checks/local-alarms", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["reason"], "There are alarms in effect on the node");
    assert_eq!(body["alarms"], serde_json::json!([{"node": node, "resource": "memory"}]));
}

#[tokio::test]
async fn a_quorum_queue_shows_its_waiting_at_least_once_dead_letters_as_messages_dlx() {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let mut arguments = Table::new();
    for (key, value) in [
        ("x-queue-type", "quorum"),
        ("x-dead-letter-strategy", "at-least-once"),
        ("x-overflow", "reject-publish"),
        ("x-dead-letter-exchange", ""),
        ("x-dead-letter-routing-key", "nowhere"),
    ] {
        arguments.insert(key, charon_model::Value::long_str(value));
    }
    let declare = QueueDeclare {
        name: "qq".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
    };
    vhost.declare_queue(&declare, 1).await.unwrap();
    let queue = vhost.queue("qq", 1).unwrap();
    let message = Message::new(charon_model::Routing::default(), charon_model::Body::Data("hello".into()));
    assert!(queue.publish(vec![Enqueue { message: Arc::new(message), confirm: None }], None).await);
    let owner = charon_engine::Owner { session: 1, channel: 1 };
    let seq = queue.get(owner, false).await.unwrap().unwrap().delivery.seq;
    queue.settle(vec![seq], charon_engine::Settle::Discard).await;
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/qq", "").await;
    assert_eq!(
        (got["messages"].clone(), got["messages_ready"].clone(), got["messages_dlx"].clone()),
        (1.into(), 0.into(), 1.into()),
        "{got}"
    );
    assert_eq!(got["message_bytes_dlx"], 5, "the body's bytes: {got}");
}

/// Every list endpoint takes RabbitMQ's list parameters, not only the object lists.
#[tokio::test]
async fn runtime_and_access_lists_honour_paging_sorting_and_columns() {
    let broker = Broker::new(BrokerConfig::default());
    for vhost in ["b", "a"] {
        assert_eq!(call(&broker, "PUT", &format!("/api/vhosts/{vhost}"), "").await.0, StatusCode::CREATED);
    }
    let (status, got) = call(&broker, "GET", "/api/vhosts?sort=name&sort_reverse=true&columns=name", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, serde_json::json!([{"name": "b"}, {"name": "a"}, {"name": "/"}]));
    let (_, got) = call(&broker, "GET", "/api/users?page=1&page_size=1&columns=name", "").await;
    assert_eq!((got["item_count"].clone(), got["total_count"].clone()), (serde_json::json!(1), serde_json::json!(1)));
    assert_eq!(got["items"], serde_json::json!([{"name": "guest"}]));
    for path in ["/api/connections", "/api/channels", "/api/consumers", "/api/policies", "/api/vhosts/%2F/connections"]
    {
        let (status, got) = call(&broker, "GET", &format!("{path}?page=1&page_size=10"), "").await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(
            (got["page"].clone(), got["items"].clone()),
            (serde_json::json!(1), serde_json::json!([])),
            "{path}"
        );
        let (status, _) = call(&broker, "GET", &format!("{path}?page=0"), "").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: RabbitMQ's 400 for a bad page");
    }
}
