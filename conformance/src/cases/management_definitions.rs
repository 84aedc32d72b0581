//! `/api/definitions`: a definitions document imported through the management API creates
//! users that log in with their passwords (plain, and a RabbitMQ SHA-256 hash), a vhost,
//! permissions, a policy, a quorum queue with dead lettering, exchanges and bindings that
//! route; the export has RabbitMQ 4.0.5's shape and imports again after everything was
//! deleted; bad input gets 4.0.5's 400s; only administrators may export or import.

use lapin::options::{BasicGetOptions, BasicNackOptions};
use lapin::{Connection, ConnectionProperties};
use serde_json::{Value as Json, json};

use crate::admin::{HttpResponse, request, segment};
use crate::broker::Broker;
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, case, check, check_eq};

/// A RabbitMQ 4.0.5 `rabbit_password_hashing_sha256` hash of `defs-app-pw` (exported from the
/// reference).
const HASH: &str = "ZYpvKE2d2g4d9rQMm74rxPFI8/o4O+VqEH/pfk6BzruR9h5U";

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "management_definitions.import_export_round_trip",
            "POST /api/definitions creates users (password and RabbitMQ hash), a vhost, permissions, a policy, a quorum queue with a DLX, exchanges and bindings that work over AMQP; GET /api/definitions/{vhost} has 4.0.5's shape; the cluster export imports again after the objects were deleted",
            ["management"],
            import_export_round_trip
        ),
        case!(
            "management_definitions.bad_input_and_admin_only",
            "import errors are 4.0.5's 400s (failed_to_parse_json (an empty body is 204), tags_not_present, missing vhost, resources_missing, unknown component); a scoped import of a missing vhost is 404; a management user gets 401 not_authorised",
            ["management"],
            bad_input_and_admin_only
        ),
    ]
}

async fn api(ctx: &Ctx, method: &str, path: &str, body: Option<&str>) -> Result<HttpResponse, CaseError> {
    let b = ctx.broker();
    request(&b.http, method, path, (&b.user, &b.password), body).await
}

fn parse(response: &HttpResponse) -> Result<Json, CaseError> {
    serde_json::from_str(&response.body).map_err(|e| CaseError::new(format!("not JSON ({e}): {}", response.body)))
}

/// `value[key]`, `null` when absent.
fn at(value: &Json, key: &str) -> Json {
    value.get(key).cloned().unwrap_or(Json::Null)
}

/// A section's objects, sorted by their JSON text.
fn sorted(items: impl IntoIterator<Item = Json>) -> Vec<Json> {
    let mut items: Vec<Json> = items.into_iter().collect();
    items.sort_by_key(ToString::to_string);
    items
}

async fn import_export_round_trip(ctx: Ctx) -> CaseResult {
    let vhost = ctx.name("defs-vhost");
    let result = round_trip(&ctx, &vhost).await;
    let _ = api(&ctx, "DELETE", &format!("/api/vhosts/{}", segment(&vhost)), None).await;
    result
}

async fn round_trip(ctx: &Ctx, vhost: &str) -> CaseResult {
    let (plain, hashed) = (ctx.name("defs-plain"), ctx.name("defs-hashed"));
    ctx.track_user(&plain);
    ctx.track_user(&hashed);
    let full = |user: &str| json!({"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"});
    let definitions = json!({
        "users": [
            {"name": plain, "password": "plain-pw", "tags": "management"},
            {"name": hashed, "password_hash": HASH, "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["monitoring"], "limits": {}},
        ],
        "vhosts": [{"name": vhost, "description": "defs", "tags": ["t"]}],
        "permissions": [full(&plain), full(&hashed)],
        "policies": [{"vhost": vhost, "name": "ttl", "pattern": "^ttl", "apply-to": "queues", "definition": {"message-ttl": 60000}, "priority": 1}],
        "queues": [
            {"name": "orders", "vhost": vhost, "durable": true, "auto_delete": false, "arguments": {"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"}},
            {"name": "dead", "vhost": vhost, "durable": true, "auto_delete": false, "arguments": {}},
        ],
        "exchanges": [
            {"name": "in", "vhost": vhost, "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}},
            {"name": "dlx", "vhost": vhost, "type": "fanout", "durable": true, "auto_delete": false, "internal": false, "arguments": {}},
        ],
        "bindings": [
            {"source": "in", "vhost": vhost, "destination": "orders", "destination_type": "queue", "routing_key": "orders.#", "arguments": {}},
            {"source": "dlx", "vhost": vhost, "destination": "dead", "destination_type": "queue", "routing_key": "", "arguments": {}},
        ],
    });
    let response = api(ctx, "POST", "/api/definitions", Some(&definitions.to_string())).await?;
    check_eq!((response.status, response.body.as_str()), (204, ""), "POST /api/definitions");

    let path = format!("/api/definitions/{}", segment(vhost));
    let response = api(ctx, "GET", &path, None).await?;
    check_eq!(response.status, 200, "GET {path}: {}", response.body);
    let exported = parse(&response)?;
    check_eq!(at(&exported, "rabbitmq_definition_format"), json!("single_virtual_host"), "format");
    check_eq!(at(&exported, "original_vhost_name"), json!(vhost), "original_vhost_name");
    check_eq!(at(&exported, "limits"), json!([]), "no limits: an empty list");
    check_eq!(
        at(&exported, "metadata"),
        json!({"description": "defs", "tags": ["t"], "default_queue_type": "classic"}),
        "metadata"
    );
    check!(exported.get("users").is_none() && exported.get("permissions").is_none(), "a vhost export has no users");
    check_eq!(
        sorted(at(&exported, "queues").as_array().cloned().unwrap_or_default()),
        sorted([
            json!({"name": "dead", "durable": true, "auto_delete": false, "arguments": {"x-queue-type": "classic"}}),
            json!({"name": "orders", "durable": true, "auto_delete": false, "arguments": {"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"}}),
        ]),
        "queues"
    );
    check_eq!(
        at(&exported, "policies"),
        json!([{"name": "ttl", "pattern": "^ttl", "apply-to": "queues", "definition": {"message-ttl": 60000}, "priority": 1}]),
        "policies"
    );
    check_eq!(at(&exported, "bindings").as_array().map(Vec::len), Some(2), "bindings: {}", at(&exported, "bindings"));
    check_eq!(
        at(&exported, "exchanges").as_array().map(Vec::len),
        Some(2),
        "exchanges: {}",
        at(&exported, "exchanges")
    );

    works_over_amqp(ctx, vhost, &hashed, "defs-app-pw").await?;

    // The cluster export of these objects imports again once they are gone.
    let response = api(ctx, "GET", "/api/definitions", None).await?;
    check_eq!(response.status, 200, "GET /api/definitions");
    let all = parse(&response)?;
    check_eq!(at(&all, "rabbitmq_definition_format"), json!("cluster"), "format");
    let ours = |key: &str, keep: &dyn Fn(&Json) -> bool| -> Json {
        Json::Array(at(&all, key).as_array().cloned().unwrap_or_default().into_iter().filter(|o| keep(o)).collect())
    };
    let in_vhost = |o: &Json| at(o, "vhost") == json!(vhost);
    let mine = |o: &Json| at(o, "name") == json!(plain) || at(o, "name") == json!(hashed);
    let subset = json!({
        "users": ours("users", &mine),
        "vhosts": ours("vhosts", &|o: &Json| at(o, "name") == json!(vhost)),
        "permissions": ours("permissions", &|o: &Json| in_vhost(o) && (at(o, "user") == json!(plain) || at(o, "user") == json!(hashed))),
        "policies": ours("policies", &in_vhost),
        "queues": ours("queues", &in_vhost),
        "exchanges": ours("exchanges", &in_vhost),
        "bindings": ours("bindings", &in_vhost),
    });
    check_eq!(at(&subset, "users").as_array().map(Vec::len), Some(2), "users exported: {}", at(&all, "users"));
    check_eq!(
        subset.pointer("/users/0/hashing_algorithm").cloned(),
        Some(json!("rabbit_password_hashing_sha256")),
        "algorithm"
    );
    for path in [format!("/api/vhosts/{}", segment(vhost)), format!("/api/users/{}", segment(&hashed))] {
        check_eq!(api(ctx, "DELETE", &path, None).await?.status, 204, "DELETE {path}");
    }
    let response = api(ctx, "POST", "/api/definitions", Some(&subset.to_string())).await?;
    check_eq!((response.status, response.body.as_str()), (204, ""), "POST the export back");
    let again = parse(&api(ctx, "GET", &path, None).await?)?;
    for key in ["queues", "exchanges", "bindings", "policies", "metadata"] {
        let list = |j: &Json| match j {
            Json::Array(items) => sorted(items.clone()),
            other => vec![other.clone()],
        };
        check_eq!(list(&at(&again, key)), list(&at(&exported, key)), "{key} after the round trip");
    }
    works_over_amqp(ctx, vhost, &hashed, "defs-app-pw").await
}

/// `user` logs in with `password`; a message published through `in` reaches `orders`, and,
/// rejected there, `dead` through the dead-letter exchange.
async fn works_over_amqp(ctx: &Ctx, vhost: &str, user: &str, password: &str) -> CaseResult {
    let broker: Broker = ctx.broker().as_user(user, password);
    let conn = Connection::connect(&broker.url_with_vhost(vhost), ConnectionProperties::default())
        .await
        .map_err(|e| CaseError::from(e).context(&format!("{user} logs in with the imported password")))?;
    let ch = conn.create_channel().await?;
    lk::confirm(&ch).await?;
    lk::publish(&ch, "in", "orders.1", b"order").await?;
    let deadline = tokio::time::Instant::now() + lk::ARRIVE;
    let message = loop {
        if let Some(message) = ch.basic_get("orders".into(), BasicGetOptions { no_ack: false }).await? {
            break message;
        }
        check!(tokio::time::Instant::now() < deadline, "the order did not reach orders");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    check_eq!(message.delivery.data.as_slice(), b"order".as_slice(), "body in orders");
    message.delivery.acker.nack(BasicNackOptions { multiple: false, requeue: false }).await?;
    let mut dead = Vec::new();
    while dead.is_empty() {
        dead = lk::drain(&ch, "dead").await?;
        check!(tokio::time::Instant::now() < deadline + lk::ARRIVE, "the rejected order did not reach dead");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    check_eq!(dead, vec!["order".to_owned()], "dead-lettered through dlx");
    let _ = conn.close(200, "bye".into()).await;
    Ok(())
}

async fn bad_input_and_admin_only(ctx: Ctx) -> CaseResult {
    let vhost = ctx.broker().vhost.clone();
    let nope = ctx.name("nope");
    let missing_queue = "defs-missing-q";
    let bad = |reason: &str| (400, json!({"error": "bad_request", "reason": reason}));
    let cases: Vec<(String, (u16, Json))> = vec![
        ("not json".into(), bad("failed_to_parse_json")),
        ("[]".into(), bad("failed_to_parse_json")),
        (json!({"users": [{"name": ctx.name("u")}]}).to_string(), bad("tags_not_present")),
        (
            json!({"queues": [{"name": "q", "vhost": nope, "durable": true, "auto_delete": false, "arguments": {}}]}).to_string(),
            bad(&format!("Please create virtual host \"{}\" prior to importing definitions.", nope)),
        ),
        (
            json!({"bindings": [{"source": "amq.direct", "vhost": vhost, "destination": missing_queue, "destination_type": "queue", "routing_key": "k", "arguments": {}}]}).to_string(),
            // 80 columns flat: `~p` breaks it after the tag (with the case's vhost `/`).
            bad(&format!("{{resources_missing,\n    [{{not_found,{{resource,<<\"{vhost}\">>,queue,<<\"{missing_queue}\">>}}}}]}}")),
        ),
        (
            json!({"parameters": [{"vhost": vhost, "component": "bogus", "name": "n", "value": {}}]}).to_string(),
            bad(&format!("<<\"Validation failed\\n\\ncomponent bogus not found\\n ({vhost}/bogus/n)\">>")),
        ),
    ];
    for (body, expected) in cases {
        let response = api(&ctx, "POST", "/api/definitions", Some(&body)).await?;
        check_eq!((response.status, parse(&response)?), expected, "POST {body}");
    }
    let response = api(&ctx, "POST", "/api/definitions", Some("")).await?;
    check_eq!((response.status, response.body.as_str()), (204, ""), "an empty body imports nothing");
    let missing = format!("/api/definitions/{}", segment(&nope));
    let response = api(&ctx, "POST", &missing, Some("{}")).await?;
    check_eq!(
        (response.status, parse(&response)?),
        (404, json!({"error": "not_found", "reason": "vhost_not_found"})),
        "POST {missing}"
    );
    let response = api(&ctx, "GET", &missing, None).await?;
    check_eq!((response.status, parse(&response)?), bad("vhost_not_found"), "GET {missing}");

    let manager = ctx.user_with("management", Some((".*", ".*", ".*"))).await?;
    let refused = (401, json!({"error": "not_authorised", "reason": "Not administrator user"}));
    for (method, body) in [("GET", None), ("POST", Some("{}"))] {
        let response = ctx.api_as(&manager, method, "/api/definitions", body).await?;
        check_eq!((response.status, parse(&response)?), refused.clone(), "{method} as a management user");
    }
    Ok(())
}
