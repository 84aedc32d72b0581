//! Connections, channels, consumers, the overview, nodes and the health checks over the API,
//! in process: connections are registered as the adapters register them, and a task per
//! connection answers its reports and records what it is told.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use charon_engine::{
    Broker, BrokerConfig, ChannelReport, ConnectionInfo, ConnectionReport, ConsumeSpec, Owner, QueueDeclare,
    Registration, SessionEvent, SessionSink,
};
use charon_model::{Table, Value};
use serde_json::{Value as Json, json};
use tokio::sync::mpsc;
use tower::ServiceExt;

const GUEST: (&str, &str) = ("guest", "guest");

async fn call(
    broker: &Arc<Broker>,
    who: (&str, &str),
    method: &str,
    uri: &str,
    reason: Option<&str>,
) -> (StatusCode, Json) {
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", who.0, who.1));
    let mut request =
        Request::builder().method(method).uri(uri).header("authorization", format!("Basic {credentials}"));
    if let Some(reason) = reason {
        request = request.header("x-reason", reason);
    }
    let response = crate::router(Arc::clone(broker)).oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Json::Null))
}

/// A connection of `user` from port `port`, with one channel (number 1, prefetch 7, confirm
/// mode); returns its registration and where the close requests it receives go.
fn connect(
    broker: &Arc<Broker>,
    user: &str,
    port: u16,
) -> (Registration, SessionSink, mpsc::UnboundedReceiver<String>) {
    let (sink, mut inbox) = SessionSink::new(broker.next_id(), 8);
    let registration = broker.connections().register(&sink, user, "/");
    let mut properties = Table::new();
    properties.insert("connection_name", Value::long_str("orders"));
    registration.describe(ConnectionInfo {
        protocol: "AMQP 0-9-1",
        user: user.into(),
        vhost: "/".into(),
        auth_mechanism: "PLAIN".into(),
        local: "127.0.0.1:5672".parse().unwrap(),
        peer: format!("127.0.0.1:{port}").parse().unwrap(),
        ssl: false,
        connected_at: i64::from(port),
        client_properties: properties,
        timeout: 60,
        frame_max: 131_072,
        channel_max: 2047,
    });
    let (closed_tx, closed) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = inbox.recv().await {
            match event {
                SessionEvent::Report(reply) => {
                    let channel = ChannelReport {
                        number: 1,
                        prefetch_count: 7,
                        confirm: true,
                        consumer_count: 1,
                        messages_unconfirmed: 2,
                        ..ChannelReport::default()
                    };
                    let _ = reply.send(ConnectionReport { state: "running", channels: vec![channel] });
                }
                SessionEvent::ForceClose { reason } => {
                    let _ = closed_tx.send(reason);
                }
                _ => {}
            }
        }
    });
    (registration, sink, closed)
}

async fn broker_with_users() -> Arc<Broker> {
    let broker = Broker::new(BrokerConfig::default());
    for (name, tags) in [("mona", "monitoring"), ("manny", "management")] {
        let access = broker.access();
        let user = charon_engine::Account::new(
            name.into(),
            Some(charon_engine::PasswordHash::new("pw")),
            charon_engine::Tags::new([tags.to_owned()]),
        );
        access.put_user(user).await.unwrap();
        access.set_permission("/", name, charon_engine::Permission::new(".*", ".*", ".*").unwrap()).await.unwrap();
    }
    broker
}

const NAME: &str = "127.0.0.1%3A4001%20-%3E%20127.0.0.1%3A5672";

#[tokio::test]
async fn connections_are_listed_shown_and_closed_with_rabbitmqs_fields_and_rules() {
    let broker = broker_with_users().await;
    let (_guests, _, mut closed) = connect(&broker, "guest", 4001);
    let (_mannys, _, mut mannys_closed) = connect(&broker, "manny", 4002);
    let (status, all) = call(&broker, GUEST, "GET", "/api/connections", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all.as_array().map(Vec::len), Some(2));
    let first = &all[0];
    assert_eq!(first["name"], "127.0.0.1:4001 -> 127.0.0.1:5672");
    assert_eq!((first["host"].clone(), first["port"].clone()), (json!("127.0.0.1"), json!(5672)));
    assert_eq!((first["peer_host"].clone(), first["peer_port"].clone()), (json!("127.0.0.1"), json!(4001)));
    assert_eq!((first["protocol"].clone(), first["type"].clone()), (json!("AMQP 0-9-1"), json!("network")));
    assert_eq!((first["channels"].clone(), first["state"].clone()), (json!(1), json!("running")));
    assert_eq!(first["user_provided_name"], "orders");
    assert_eq!(first["client_properties"], json!({"connection_name": "orders"}));
    assert_eq!((first["frame_max"].clone(), first["channel_max"].clone()), (json!(131_072), json!(2047)));
    assert_eq!(
        (first["timeout"].clone(), first["ssl"].clone(), first["ssl_cipher"].clone()),
        (json!(60), json!(false), Json::Null)
    );
    // A management user sees only its own; a monitor all.
    let (_, own) = call(&broker, ("manny", "pw"), "GET", "/api/connections", None).await;
    assert_eq!(
        own.as_array().map(|a| a.iter().map(|c| c["user"].clone()).collect::<Vec<_>>()),
        Some(vec![json!("manny")])
    );
    let (_, seen) = call(&broker, ("mona", "pw"), "GET", "/api/vhosts/%2F/connections", None).await;
    assert_eq!(seen.as_array().map(Vec::len), Some(2));
    // One connection: TLS fields are "" there.
    let uri = format!("/api/connections/{NAME}");
    let (status, one) = call(&broker, ("mona", "pw"), "GET", &uri, None).await;
    assert_eq!((status, one["ssl_cipher"].clone(), one["user"].clone()), (StatusCode::OK, json!(""), json!("guest")));
    let (status, got) = call(&broker, ("manny", "pw"), "GET", &uri, None).await;
    assert_eq!(
        (status, got["reason"].clone()),
        (StatusCode::UNAUTHORIZED, json!("User not authorised to access object"))
    );
    assert_eq!(call(&broker, GUEST, "GET", "/api/connections/nope", None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&broker, GUEST, "GET", "/api/vhosts/nope/connections", None).await.0, StatusCode::NOT_FOUND);
    // Closing: monitors may not; administrators and the owner may; X-Reason is the text.
    assert_eq!(call(&broker, ("mona", "pw"), "DELETE", &uri, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&broker, GUEST, "DELETE", &uri, Some("maintenance")).await.0, StatusCode::NO_CONTENT);
    assert_eq!(closed.recv().await.as_deref(), Some("maintenance"));
    let mannys = "/api/connections/127.0.0.1%3A4002%20-%3E%20127.0.0.1%3A5672";
    assert_eq!(call(&broker, ("manny", "pw"), "DELETE", mannys, None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(mannys_closed.recv().await.as_deref(), Some("Closed via management plugin"));
}

#[tokio::test]
async fn channels_come_from_the_connections_reports() {
    let broker = broker_with_users().await;
    let (_kept, _, _) = connect(&broker, "guest", 4001);
    let (status, channels) = call(&broker, GUEST, "GET", "/api/channels", None).await;
    assert_eq!(status, StatusCode::OK);
    let channel = &channels[0];
    assert_eq!(channel["name"], "127.0.0.1:4001 -> 127.0.0.1:5672 (1)");
    assert_eq!(
        channel["connection_details"],
        json!({"name": "127.0.0.1:4001 -> 127.0.0.1:5672", "peer_host": "127.0.0.1", "peer_port": 4001})
    );
    assert_eq!((channel["number"].clone(), channel["prefetch_count"].clone()), (json!(1), json!(7)));
    assert_eq!((channel["confirm"].clone(), channel["messages_unconfirmed"].clone()), (json!(true), json!(2)));
    assert_eq!((channel["user"].clone(), channel["vhost"].clone()), (json!("guest"), json!("/")));
    let (_, of_connection) = call(&broker, GUEST, "GET", &format!("/api/connections/{NAME}/channels"), None).await;
    assert_eq!(of_connection, channels);
    let (status, one) = call(&broker, GUEST, "GET", &format!("/api/channels/{NAME}%20(1)"), None).await;
    assert_eq!((status, one["consumer_details"].clone()), (StatusCode::OK, json!([])));
    assert_eq!(
        call(&broker, GUEST, "GET", &format!("/api/channels/{NAME}%20(2)"), None).await.0,
        StatusCode::NOT_FOUND
    );
    let (_, none) = call(&broker, ("manny", "pw"), "GET", "/api/channels", None).await;
    assert_eq!(none, json!([]));
    let (_, mine) = call(&broker, GUEST, "GET", "/api/vhosts/%2F/channels", None).await;
    assert_eq!(mine.as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn consumers_are_reported_by_their_queues_with_their_channel() {
    let broker = broker_with_users().await;
    let (_kept, sink, _) = connect(&broker, "guest", 4001);
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let declare = QueueDeclare {
        name: "jobs".into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: Table::new(),
    };
    vhost.declare_queue(&declare, sink.id).await.unwrap();
    let queue = vhost.queue("jobs", sink.id).unwrap();
    let mut arguments = Table::new();
    arguments.insert("x-priority", Value::I64(3));
    let spec = ConsumeSpec {
        id: broker.next_id(),
        tag: "ctag-1".into(),
        owner: Owner { session: sink.id, channel: 1 },
        session: sink.clone(),
        no_ack: false,
        prefetch: 7,
        link_credit: None,
        channel_limit: None,
        exclusive: false,
        arguments,
    };
    queue.consume(spec).await.unwrap();
    let (status, consumers) = call(&broker, GUEST, "GET", "/api/consumers", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        consumers,
        json!([{
            "arguments": {"x-priority": 3},
            "ack_required": true,
            "active": true,
            "activity_status": "up",
            "channel_details": {
                "connection_name": "127.0.0.1:4001 -> 127.0.0.1:5672",
                "name": "127.0.0.1:4001 -> 127.0.0.1:5672 (1)",
                "node": charon_engine::broker::node_name(),
                "number": 1,
                "peer_host": "127.0.0.1",
                "peer_port": 4001,
                "user": "guest",
            },
            "consumer_tag": "ctag-1",
            "consumer_timeout": 1_800_000,
            "exclusive": false,
            "prefetch_count": 7,
            "queue": {"name": "jobs", "vhost": "/"},
        }])
    );
    assert_eq!(call(&broker, GUEST, "GET", "/api/consumers/%2F", None).await.1, consumers);
    assert_eq!(call(&broker, ("manny", "pw"), "GET", "/api/consumers", None).await.1, json!([]));
    assert_eq!(call(&broker, ("mona", "pw"), "GET", "/api/consumers", None).await.1, consumers);
    assert_eq!(call(&broker, GUEST, "GET", "/api/consumers/nope", None).await.0, StatusCode::NOT_FOUND);
    let (_, channel) = call(&broker, GUEST, "GET", &format!("/api/channels/{NAME}%20(1)"), None).await;
    assert_eq!(channel["consumer_details"], consumers);
}

#[tokio::test]
async fn the_overview_counts_what_the_user_sees_and_monitors_get_the_listeners() {
    let broker = broker_with_users().await;
    broker.listeners().add("amqp", "127.0.0.1:5672".parse().unwrap());
    broker.listeners().add("http", "127.0.0.1:15672".parse().unwrap());
    let (_kept, _, _) = connect(&broker, "guest", 4001);
    let (status, overview) = call(&broker, GUEST, "GET", "/api/overview", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (overview["rabbitmq_version"].clone(), overview["product_name"].clone()),
        (json!("4.0.5"), json!("RabbitMQ"))
    );
    assert_eq!(overview["management_version"], "4.0.5");
    assert_eq!(overview["node"], charon_engine::broker::node_name());
    assert_eq!(overview["object_totals"]["connections"], 1);
    assert_eq!(overview["object_totals"]["channels"], 1);
    assert_eq!(overview["object_totals"]["consumers"], 0);
    assert_eq!(overview["queue_totals"], json!({"messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}));
    assert_eq!(
        overview["listeners"][0],
        json!({"node": charon_engine::broker::node_name(), "protocol": "amqp", "ip_address": "127.0.0.1", "port": 5672, "socket_opts": []})
    );
    assert_eq!(overview["contexts"][0]["port"], "15672");
    let types: Vec<&str> =
        overview["exchange_types"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(types, ["direct", "fanout", "headers", "topic", "x-local-random"]);
    let (_, theirs) = call(&broker, ("manny", "pw"), "GET", "/api/overview", None).await;
    assert_eq!(theirs["object_totals"]["connections"], 0);
    assert!(theirs.get("listeners").is_none() && theirs.get("node").is_none());
    assert!(theirs["object_totals"].get("consumers").is_none());
    assert_eq!(call(&broker, GUEST, "GET", "/api/extensions", None).await.1, json!([]));
    assert_eq!(
        call(&broker, GUEST, "GET", "/api/cluster-name", None).await.1,
        json!({"name": charon_engine::broker::node_name()})
    );
}

#[tokio::test]
async fn nodes_are_for_monitors_and_carry_the_resource_measurements() {
    let broker = broker_with_users().await;
    broker.resources().memory_limit_bytes.store(1000, std::sync::atomic::Ordering::Relaxed);
    broker.resources().set_memory_alarm(true);
    broker.resources().fd_used.store(17, std::sync::atomic::Ordering::Relaxed);
    let (status, nodes) = call(&broker, ("mona", "pw"), "GET", "/api/nodes", None).await;
    assert_eq!(status, StatusCode::OK);
    let node = &nodes[0];
    assert_eq!(node["name"], charon_engine::broker::node_name());
    assert_eq!(
        (node["mem_limit"].clone(), node["mem_alarm"].clone(), node["disk_free_alarm"].clone()),
        (json!(1000), json!(true), json!(false))
    );
    assert_eq!((node["running"].clone(), node["type"].clone()), (json!(true), json!("disc")));
    // As the resource monitor measured them (0: not measured, shown as null).
    assert_eq!((node["fd_used"].clone(), node["fd_total"].clone()), (json!(17), Json::Null), "{node}");
    let one = format!("/api/nodes/{}", charon_engine::broker::node_name());
    assert_eq!(call(&broker, GUEST, "GET", &one, None).await.1["name"], node["name"]);
    assert_eq!(call(&broker, GUEST, "GET", "/api/nodes/rabbit@elsewhere", None).await.0, StatusCode::NOT_FOUND);
    let (status, got) = call(&broker, ("manny", "pw"), "GET", "/api/nodes", None).await;
    assert_eq!((status, got["reason"].clone()), (StatusCode::UNAUTHORIZED, json!("Not monitor user")));
}

#[tokio::test]
async fn listener_and_vhost_health_checks_answer_as_rabbitmq() {
    let broker = broker_with_users().await;
    broker.listeners().add("amqp", "127.0.0.1:5672".parse().unwrap());
    broker.listeners().add("http", "127.0.0.1:15672".parse().unwrap());
    let base = "/api/health/checks";
    let (status, got) = call(&broker, GUEST, "GET", &format!("{base}/port-listener/5672"), None).await;
    assert_eq!((status, got), (StatusCode::OK, json!({"status": "ok", "port": 5672})));
    let (status, got) = call(&broker, GUEST, "GET", &format!("{base}/port-listener/5999"), None).await;
    assert_eq!(
        (status, got),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "failed", "reason": "No active listener", "missing": 5999, "ports": [5672, 15672]})
        )
    );
    let (status, got) = call(&broker, GUEST, "GET", &format!("{base}/port-listener/abc"), None).await;
    assert_eq!((status, got), (StatusCode::BAD_REQUEST, json!({"error": "bad_request", "reason": "Invalid port"})));
    let (status, got) = call(&broker, GUEST, "GET", &format!("{base}/protocol-listener/amqp091"), None).await;
    assert_eq!((status, got), (StatusCode::OK, json!({"status": "ok", "protocol": "amqp"})));
    let (status, got) = call(&broker, GUEST, "GET", &format!("{base}/protocol-listener/foo"), None).await;
    assert_eq!(
        (status, got),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "failed", "reason": "No active listener", "missing": "foo", "protocols": ["amqp", "http"]})
        )
    );
    let (status, got) = call(&broker, ("manny", "pw"), "GET", &format!("{base}/virtual-hosts"), None).await;
    assert_eq!((status, got), (StatusCode::OK, json!({"status": "ok"})));
    let (_, got) = call(&broker, GUEST, "GET", &format!("{base}/node-is-quorum-critical"), None).await;
    assert_eq!(got, json!({"status": "ok", "reason": "single node cluster"}));
}

#[tokio::test]
async fn the_aliveness_test_goes_through_the_engine_and_leaves_its_queue() {
    let broker = broker_with_users().await;
    let (status, got) = call(&broker, GUEST, "GET", "/api/aliveness-test/%2F", None).await;
    assert_eq!((status, got), (StatusCode::OK, json!({"status": "ok"})));
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let queue = vhost.queue("aliveness-test", 0).unwrap();
    assert_eq!(queue.stats().await.unwrap().ready, 0, "the test message was taken");
    assert_eq!(call(&broker, GUEST, "GET", "/api/aliveness-test/nope", None).await.0, StatusCode::NOT_FOUND);
}
