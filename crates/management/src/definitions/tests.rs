//! Definitions over an in-process broker: the files RabbitMQ 4.0.5 exported (fixtures) import
//! with working passwords and objects, export again in 4.0.5's shape, and bad input gets 4.0.5's
//! answers (observed on the reference, 2026-11-26).

use std::sync::Arc;

use axum::http::StatusCode;
use charon_engine::{Broker, BrokerConfig, Destination, LimitScope, QueueType};
use serde_json::{Value as Json, json};

use crate::access_tests::call_as;

/// `GET /api/definitions` of RabbitMQ 4.0.5, narrowed to the objects of the test (vhost
/// `defs-fixture`, users `guest` and `defs-*`).
const CLUSTER: &str = include_str!("../../tests/fixtures/rabbitmq-4.0.5-definitions.json");
/// `GET /api/definitions/defs-fixture` of RabbitMQ 4.0.5, as it came.
const VHOST: &str = include_str!("../../tests/fixtures/rabbitmq-4.0.5-vhost-definitions.json");

async fn call(broker: &Arc<Broker>, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    call_as(broker, ("guest", "guest"), method, uri, body).await
}

/// A section's objects, sorted by their JSON text (the brokers list them in different orders).
fn sorted(definitions: &Json, key: &str) -> Vec<Json> {
    let mut items = definitions[key].as_array().cloned().unwrap_or_default();
    items.sort_by_key(ToString::to_string);
    items
}

#[tokio::test]
async fn a_rabbitmq_export_imports_with_its_passwords_and_objects() {
    let broker = Broker::new(BrokerConfig::default());
    assert_eq!(call(&broker, "POST", "/api/definitions", CLUSTER).await.0, StatusCode::NO_CONTENT);

    // RabbitMQ's password hashes log in with RabbitMQ's passwords.
    let app = broker.authenticate("defs-app", "defs-app-pw").expect("the RabbitMQ password works");
    assert_eq!(app.tags().as_slice(), ["management"]);
    assert!(broker.authenticate("defs-app", "wrong").is_none());
    assert!(broker.authenticate("defs-admin", "defs-admin-pw").unwrap().tags().is_administrator());
    assert!(broker.access().can_open(&app, "defs-fixture"));
    assert_eq!(broker.limits().get(LimitScope::User, "defs-app").get("max-connections"), Some(&10));
    assert_eq!(broker.limits().get(LimitScope::Vhost, "defs-fixture").get("max-queues"), Some(&100));
    let topic = broker.access().topic_permissions();
    assert_eq!(
        topic,
        vec![("defs-fixture".into(), "defs-app".into(), "app.topic".into(), "^orders\\.".into(), ".*".into())]
    );

    let vhost = broker.vhosts().into_iter().find(|v| v.name() == "defs-fixture").unwrap();
    let orders = vhost.queue("app.orders", 0).unwrap();
    assert_eq!(orders.config.queue_type, QueueType::Quorum);
    assert_eq!(orders.config.arguments.get("x-dead-letter-exchange").and_then(|v| v.as_str()), Some("app.dlx"));
    assert!(vhost.exchange("app.fan").unwrap().internal);
    assert_eq!(vhost.bindings_between("app.topic", &Destination::Exchange("app.fan".into()))[0].key, "fan.#");
    assert_eq!(vhost.policy("app-ttl").unwrap().priority, 1);

    // Exported again, every section holds what 4.0.5 exported, in 4.0.5's shape.
    let fixture: Json = serde_json::from_str(CLUSTER).unwrap();
    let (status, exported) = call(&broker, "GET", "/api/definitions", "").await;
    assert_eq!(status, StatusCode::OK);
    for key in ["policies", "queues", "exchanges", "bindings", "topic_permissions", "parameters", "vhosts"] {
        let ours: Vec<Json> =
            sorted(&exported, key).into_iter().filter(|o| o["vhost"] != "/" && o["name"] != "/").collect();
        assert_eq!(ours, sorted(&fixture, key), "{key}");
    }
    assert_eq!(sorted(&exported, "users"), sorted(&fixture, "users"), "the hashes are exported as they came");
    for key in ["rabbit_version", "rabbitmq_version", "product_name", "product_version", "rabbitmq_definition_format"] {
        assert_eq!(exported[key], fixture[key], "{key}");
    }
    assert_eq!(exported["global_parameters"], json!([]));

    // Importing again changes nothing.
    assert_eq!(call(&broker, "POST", "/api/definitions", CLUSTER).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&broker, "GET", "/api/definitions", "").await.1, exported);
}

#[tokio::test]
async fn a_vhost_export_imports_into_another_vhost_and_exports_in_4_0_5_s_shape() {
    let broker = Broker::new(BrokerConfig::default());
    assert_eq!(
        call(&broker, "PUT", "/api/vhosts/copy", r#"{"description":"Definitions round trip","tags":"fixture"}"#)
            .await
            .0,
        StatusCode::CREATED
    );
    let (status, body) = call(&broker, "POST", "/api/definitions/copy", VHOST).await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Json::Null));
    let (status, exported) = call(&broker, "GET", "/api/definitions/copy", "").await;
    assert_eq!(status, StatusCode::OK);
    let fixture: Json = serde_json::from_str(VHOST).unwrap();
    for key in ["policies", "queues", "exchanges", "bindings", "parameters"] {
        assert_eq!(sorted(&exported, key), sorted(&fixture, key), "{key}");
    }
    for key in ["metadata", "description", "default_queue_type", "limits", "rabbitmq_definition_format"] {
        assert_eq!(exported[key], fixture[key], "{key}");
    }
    assert_eq!(exported["original_vhost_name"], "copy");
    assert!(exported.get("users").is_none() && exported.get("vhosts").is_none());
    // No limits: an empty list, as 4.0.5 prints an empty proplist.
    assert_eq!(call(&broker, "GET", "/api/definitions/%2F", "").await.1["limits"], json!([]));
}

#[tokio::test]
async fn existing_queues_and_exchanges_are_kept_and_users_and_vhosts_updated() {
    let broker = Broker::new(BrokerConfig::default());
    let queue = |args: &str| {
        format!(r#"{{"queues":[{{"name":"q","vhost":"/","durable":true,"auto_delete":false,"arguments":{args}}}]}}"#)
    };
    assert_eq!(
        call(&broker, "POST", "/api/definitions", &queue(r#"{"x-max-length":5}"#)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&broker, "POST", "/api/definitions", &queue(r#"{"x-max-length":6}"#)).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, defs) = call(&broker, "GET", "/api/definitions/%2F", "").await;
    assert_eq!(
        defs["queues"],
        json!([{"name":"q","durable":true,"auto_delete":false,"arguments":{"x-max-length":5,"x-queue-type":"classic"}}])
    );
    // A new vhost is granted to the importing user; a vhost imported again takes the file's
    // description and tags.
    let vhost =
        r#"{"vhosts":[{"name":"v2","metadata":{"description":"m","tags":["z"],"default_queue_type":"classic"}}]}"#;
    assert_eq!(call(&broker, "POST", "/api/definitions", vhost).await.0, StatusCode::NO_CONTENT);
    let guest = broker.user("guest").unwrap();
    assert!(broker.access().can_open(&guest, "v2"));
    assert_eq!(
        call(&broker, "POST", "/api/definitions", r#"{"vhosts":[{"name":"v2"}]}"#).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(call(&broker, "GET", "/api/vhosts/v2", "").await.1["description"], "");
    let user = r#"{"users":[{"name":"u","password":"pw","tags":"management"}]}"#;
    assert_eq!(call(&broker, "POST", "/api/definitions", user).await.0, StatusCode::NO_CONTENT);
    assert!(broker.authenticate("u", "pw").is_some());
}

#[tokio::test]
async fn bad_input_gets_rabbitmq_s_answers() {
    let broker = Broker::new(BrokerConfig::default());
    let post = |body: &'static str| {
        let broker = Arc::clone(&broker);
        async move { call(&broker, "POST", "/api/definitions", body).await }
    };
    let bad = |reason: &str| (StatusCode::BAD_REQUEST, json!({"error":"bad_request","reason":reason}));
    assert_eq!(post("not json").await, bad("failed_to_parse_json"));
    assert_eq!(post("[]").await, bad("failed_to_parse_json"));
    assert_eq!(post("").await, (StatusCode::NO_CONTENT, Json::Null), "an empty body imports nothing");
    assert_eq!(post(r#"{"users":[{"name":"u1"}]}"#).await, bad("tags_not_present"));
    assert_eq!(
        post(r#"{"users":[{"name":"u1","password_hash":"abc","tags":[]}]}"#).await,
        bad(r#"{not_base64,<<"abc">>}"#)
    );
    assert_eq!(
        post(r#"{"permissions":[{"user":"nouser","vhost":"/","configure":".*","write":".*","read":".*"}]}"#).await,
        bad(r#"{no_such_user,<<"nouser">>}"#)
    );
    assert_eq!(
        post(r#"{"queues":[{"name":"q","vhost":"nope","durable":true,"auto_delete":false,"arguments":{}}]}"#).await,
        bad("Please create virtual host \"nope\" prior to importing definitions.")
    );
    assert_eq!(
        post(r#"{"exchanges":[{"name":"x","vhost":"/","type":"fanuot","durable":true,"auto_delete":false,"internal":false,"arguments":{}}]}"#).await,
        bad("precondition_failed: unknown exchange type 'fanuot'")
    );
    assert_eq!(
        post(r#"{"bindings":[{"source":"amq.direct","vhost":"/","destination":"nope","destination_type":"queue","routing_key":"k","arguments":{}}]}"#).await,
        bad(r#"{resources_missing,[{not_found,{resource,<<"/">>,queue,<<"nope">>}}]}"#)
    );
    assert_eq!(
        post(r#"{"policies":[{"name":"p","vhost":"/","pattern":"x","apply-to":"queues","definition":{"bogus":1},"priority":0}]}"#).await,
        bad(r#"<<"Validation failed\n\n[{&lt;&lt;\"bogus\"&gt;&gt;,1}] are not recognised policy settings\n (//p)">>"#)
    );
    assert_eq!(
        post(
            r#"{"parameters":[{"vhost":"/","component":"federation-upstream","name":"n","value":{"uri":"amqp://x"}}]}"#
        )
        .await,
        bad(r#"<<"Validation failed\n\ncomponent federation-upstream not found\n (//federation-upstream/n)">>"#)
    );
    assert_eq!(post(r#"{"global_parameters":[{"name":"cluster_tags","value":[]}]}"#).await.0, StatusCode::NO_CONTENT);
    assert_eq!(post(r#"{"global_parameters":[{"name":"foo","value":"bar"}]}"#).await.0, StatusCode::BAD_REQUEST);

    let not_found = json!({"error":"not_found","reason":"vhost_not_found"});
    assert_eq!(call(&broker, "POST", "/api/definitions/nosuch", "{}").await, (StatusCode::NOT_FOUND, not_found));
    assert_eq!(call(&broker, "GET", "/api/definitions/nosuch", "").await, bad("vhost_not_found"));
    assert_eq!(
        call(&broker, "PUT", "/api/users/m", r#"{"password":"m","tags":"management"}"#).await.0,
        StatusCode::CREATED
    );
    let refused = (StatusCode::UNAUTHORIZED, json!({"error":"not_authorised","reason":"Not administrator user"}));
    assert_eq!(call_as(&broker, ("m", "m"), "GET", "/api/definitions", "").await, refused);
    assert_eq!(call_as(&broker, ("m", "m"), "POST", "/api/definitions", "{}").await, refused);
}

#[tokio::test]
async fn download_names_the_export_as_an_attachment() {
    use tower::ServiceExt;
    let broker = Broker::new(BrokerConfig::default());
    let request = axum::http::Request::builder()
        .uri("/api/definitions?download=rabbit.json")
        .header("authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = crate::router(broker).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let disposition = response.headers().get("content-disposition").and_then(|v| v.to_str().ok());
    assert_eq!(disposition, Some("attachment; filename=rabbit.json"), "as 4.0.5 answers");
}
