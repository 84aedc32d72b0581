//! `/api/operator-policies` over an in-process broker: CRUD, 4.0.5's validation texts, who may,
//! the queue's `operator_policy` and merged `effective_policy_definition`, and definitions.

use std::sync::Arc;

use axum::http::StatusCode;
use charon_engine::{Broker, BrokerConfig, Enqueue, QueueDeclare};
use charon_model::{Message, Table};
use serde_json::{Value as Json, json};

use crate::access_tests::call_as;

const GUEST: (&str, &str) = ("guest", "guest");

async fn call(broker: &Arc<Broker>, method: &str, uri: &str, body: &str) -> (StatusCode, Json) {
    call_as(broker, GUEST, method, uri, body).await
}

#[tokio::test]
async fn operator_policies_are_their_own_namespace_with_rabbitmqs_answers() {
    let broker = Broker::new(BrokerConfig::default());
    let uri = "/api/operator-policies/%2F/cap";
    let body = r#"{"pattern":"^q","definition":{"max-length":5,"message-ttl":60000},"priority":1,"apply-to":"queues"}"#;
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", uri, body).await.0, StatusCode::NO_CONTENT);
    let expected = json!({"vhost":"/","name":"cap","pattern":"^q","apply-to":"queues",
        "definition":{"max-length":5,"message-ttl":60000},"priority":1});
    assert_eq!(call(&broker, "GET", uri, "").await, (StatusCode::OK, expected.clone()));
    assert_eq!(call(&broker, "GET", "/api/operator-policies", "").await.1, json!([expected]));
    assert_eq!(call(&broker, "GET", "/api/operator-policies/%2F", "").await.1, json!([expected]));
    // Not a user policy.
    assert_eq!(call(&broker, "GET", "/api/policies", "").await.1, json!([]));
    assert_eq!(call(&broker, "GET", "/api/policies/%2F/cap", "").await.0, StatusCode::NOT_FOUND);

    let reason = |body: &'static str| {
        let broker = Arc::clone(&broker);
        async move {
            let (status, got) = call(&broker, "PUT", "/api/operator-policies/%2F/bad", body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            got["reason"].as_str().unwrap().to_owned()
        }
    };
    // Keys outside the operator's set, listed as RabbitMQ lists them (not HTML-escaped here).
    assert_eq!(
        reason(r#"{"pattern":"^q","definition":{"max-length":1,"foo":2,"dead-letter-exchange":"d"}}"#).await,
        "Validation failed\n\n[{<<\"dead-letter-exchange\">>,<<\"d\">>},{<<\"foo\">>,2}] are not recognised policy settings\n"
    );
    assert_eq!(
        reason(r#"{"pattern":"^q","definition":{"overflow":"x"}}"#).await,
        "Validation failed\n\n<<\"x\">> is not a valid overflow value\n"
    );
    assert_eq!(
        reason(r#"{"pattern":"^q","definition":{"expires":0}}"#).await,
        "Validation failed\n\n0 is not a valid queue expiry\n"
    );
    assert_eq!(reason(r#"{"pattern":"^q","definition":{}}"#).await, "Validation failed\n\nno policy provided\n");
    assert_eq!(
        reason(r#"{"pattern":5,"definition":{"max-length":-1},"priority":"x","apply-to":"bogus"}"#).await,
        "Validation failed\n\n-1 is not a valid maximum length\napply-to 'bogus' unrecognised; should be one of: \
         'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'\npattern should be a \
         binary but was 5\npriority should be a number, actually was <<\"x\">>\n"
    );
    assert_eq!(reason(r#"{"pattern":"^q"}"#).await, "[{key_missing,definition}]");
    // RabbitMQ's handler crashes on these.
    for body in
        [r#"{"pattern":"^q","definition":[]}"#, r#"{"pattern":"^q","definition":{"max-length":1},"apply-to":5}"#]
    {
        assert_eq!(
            call(&broker, "PUT", "/api/operator-policies/%2F/bad", body).await.0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    assert_eq!(call(&broker, "GET", "/api/operator-policies/%2F/bad", "").await.0, StatusCode::NOT_FOUND);
    // A vhost that does not exist: the list 404s, one policy's handler crashes.
    assert_eq!(call(&broker, "GET", "/api/operator-policies/nope", "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&broker, "GET", "/api/operator-policies/nope/cap", "").await.0, StatusCode::INTERNAL_SERVER_ERROR);

    assert_eq!(call(&broker, "DELETE", uri, "").await.0, StatusCode::NO_CONTENT);
    let (status, got) = call(&broker, "DELETE", uri, "").await;
    assert_eq!((status, got), (StatusCode::NOT_FOUND, json!({"error":"Object Not Found","reason":"Not Found"})));
}

#[tokio::test]
async fn only_administrators_manage_them_and_management_users_list_their_vhosts() {
    let broker = Broker::new(BrokerConfig::default());
    for (name, tags) in [("pm", "policymaker"), ("mon", "monitoring"), ("mg", "management")] {
        let body = format!(r#"{{"password":"pw","tags":"{tags}"}}"#);
        assert_eq!(call(&broker, "PUT", &format!("/api/users/{name}"), &body).await.0, StatusCode::CREATED);
    }
    assert_eq!(call(&broker, "PUT", "/api/vhosts/v1", "").await.0, StatusCode::CREATED);
    let grant = r#"{"configure":".*","write":".*","read":".*"}"#;
    for name in ["pm", "mon", "mg"] {
        assert_eq!(call(&broker, "PUT", &format!("/api/permissions/v1/{name}"), grant).await.0, StatusCode::CREATED);
    }
    let body = r#"{"pattern":"^q","definition":{"max-length":1}}"#;
    assert_eq!(call(&broker, "PUT", "/api/operator-policies/v1/a", body).await.0, StatusCode::CREATED);
    assert_eq!(call(&broker, "PUT", "/api/operator-policies/%2F/b", body).await.0, StatusCode::CREATED);
    let not_admin = json!({"error":"not_authorised","reason":"Not administrator user"});
    for name in ["pm", "mon", "mg"] {
        let who = (name, "pw");
        for (method, uri) in [
            ("GET", "/api/operator-policies/v1/a"),
            ("PUT", "/api/operator-policies/v1/new"),
            ("DELETE", "/api/operator-policies/v1/a"),
        ] {
            assert_eq!(call_as(&broker, who, method, uri, body).await, (StatusCode::UNAUTHORIZED, not_admin.clone()));
        }
        // Only the vhosts they may open, monitors included.
        let (status, got) = call_as(&broker, who, "GET", "/api/operator-policies", "").await;
        assert_eq!((status, got.as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{name}");
        assert_eq!(got[0]["name"], "a");
        let (status, got) = call_as(&broker, who, "GET", "/api/operator-policies/%2F", "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(got["reason"], "User not authorised to access virtual host");
    }
    // Sorted by priority.
    let high = r#"{"pattern":"^q","definition":{"max-length":1},"priority":9}"#;
    assert_eq!(call(&broker, "PUT", "/api/operator-policies/%2F/z", high).await.0, StatusCode::CREATED);
    let (_, got) = call(&broker, "GET", "/api/operator-policies", "").await;
    let names: Vec<&str> = got.as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["b", "a", "z"]);
}

#[tokio::test]
async fn queues_show_both_policies_and_the_stricter_merged_definition() {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let declare = QueueDeclare { name: "q1".into(), durable: true, arguments: Table::new(), ..QueueDeclare::default() };
    vhost.declare_queue(&declare, 1).await.unwrap();
    let queue = vhost.queue("q1", 1).unwrap();
    let items = (0..8).map(|_| Enqueue { message: Arc::new(Message::default()), confirm: None }).collect();
    assert!(queue.publish(items, None).await);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/q1", "").await;
    assert_eq!((got["policy"].clone(), got["operator_policy"].clone()), (Json::Null, Json::Null));
    assert_eq!(got["effective_policy_definition"], json!({}));

    let user_policy = r#"{"pattern":"^q","apply-to":"queues","definition":{"max-length":10,"message-ttl":30000,"dead-letter-exchange":"dlx"}}"#;
    assert_eq!(call(&broker, "PUT", "/api/policies/%2F/upx", user_policy).await.0, StatusCode::CREATED);
    let operator = r#"{"pattern":"^q","apply-to":"queues","definition":{"max-length":5,"message-ttl":60000}}"#;
    assert_eq!(call(&broker, "PUT", "/api/operator-policies/%2F/opx", operator).await.0, StatusCode::CREATED);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/q1", "").await;
    assert_eq!((got["policy"].clone(), got["operator_policy"].clone()), (json!("upx"), json!("opx")));
    assert_eq!(
        got["effective_policy_definition"],
        json!({"dead-letter-exchange":"dlx","max-length":5,"message-ttl":30000})
    );
    assert_eq!(got["messages_ready"], 5, "the operator's limit applied at once: {got}");

    assert_eq!(call(&broker, "DELETE", "/api/operator-policies/%2F/opx", "").await.0, StatusCode::NO_CONTENT);
    let (_, got) = call(&broker, "GET", "/api/queues/%2F/q1", "").await;
    assert_eq!(got["operator_policy"], Json::Null);
    assert_eq!(got["effective_policy_definition"]["max-length"], 10);
}

#[tokio::test]
async fn definitions_carry_operator_policies_as_runtime_parameters() {
    let broker = Broker::new(BrokerConfig::default());
    let file = json!({
        "vhosts": [{"name": "v1"}],
        "parameters": [{"vhost": "v1", "component": "operator_policy", "name": "cap",
            "value": {"pattern": "^q", "definition": {"max-length": 3}, "priority": 2, "apply-to": "queues"}}],
        // 4.0.5 reads no such section.
        "operator_policies": [{"vhost": "v1", "name": "ignored", "pattern": "^x", "definition": {"max-length": 1}}],
    });
    assert_eq!(call(&broker, "POST", "/api/definitions", &file.to_string()).await.0, StatusCode::NO_CONTENT);
    let (_, got) = call(&broker, "GET", "/api/operator-policies/v1", "").await;
    assert_eq!(
        got,
        json!([{"vhost":"v1","name":"cap","pattern":"^q","apply-to":"queues","definition":{"max-length":3},"priority":2}])
    );
    let (_, exported) = call(&broker, "GET", "/api/definitions", "").await;
    assert_eq!(
        exported["parameters"],
        json!([{"vhost": "v1", "component": "operator_policy", "name": "cap",
            "value": {"pattern": "^q", "definition": {"max-length": 3}, "priority": 2, "apply-to": "queues"}}])
    );
    let (_, scoped) = call(&broker, "GET", "/api/definitions/v1", "").await;
    assert_eq!(scoped["parameters"][0]["component"], "operator_policy");
    assert!(scoped["parameters"][0].get("vhost").is_none());

    // Validated as 4.0.5 validates the parameter: priority required, every failure listed.
    let bad = json!({"parameters": [{"component": "operator_policy", "name": "m",
        "value": {"definition": {"max-length": -1}, "foo": 1}}]});
    let (status, got) = call(&broker, "POST", "/api/definitions/v1", &bad.to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        got["reason"],
        "<<\"Validation failed\\n\\nUnrecognised terms [{&lt;&lt;\\\"foo\\\"&gt;&gt;,1}] in m\\n-1 is not a valid \
         maximum length\\nKey \\\"pattern\\\" not found in m\\nKey \\\"priority\\\" not found in m\\n \
         (v1/operator_policy/m)\">>"
    );
    let bad = json!({"parameters": [{"component": "operator_policy", "name": "c",
        "value": {"pattern": "^c", "definition": {"dead-letter-exchange": "x"}, "priority": 0}}]});
    let (_, got) = call(&broker, "POST", "/api/definitions/v1", &bad.to_string()).await;
    assert_eq!(
        got["reason"],
        "<<\"Validation failed\\n\\n[{&lt;&lt;\\\"dead-letter-exchange\\\"&gt;&gt;,&lt;&lt;\\\"x\\\"&gt;&gt;}] are not \
         recognised policy settings\\n (v1/operator_policy/c)\">>"
    );
}
