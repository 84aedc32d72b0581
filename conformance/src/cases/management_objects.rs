//! The management API's object endpoints as a client sees them over HTTP: queues (declare,
//! delete with `if-empty`, purge, get), exchanges (declare, show, delete, publish), bindings
//! (create with `Location`, list, show and delete by properties key), list pagination, and the
//! permission answers. Only fields whose values are stable at once are asserted (4.0.5 refreshes
//! its counters every 5 s).

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::admin::{HttpResponse, request, segment};
use crate::broker::Broker;
use crate::{Case, CaseError, CaseResult, Ctx, case, check, check_eq};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "management.trailing_slash",
            "a path with a trailing slash is the path without it: GET /api/overview/, /api/connections/ (listing the \
             case's own connection), /api/queues/, /api/queues/{v}/; PUT and DELETE /api/vhosts/{v}/",
            ["management"],
            trailing_slash
        ),
        case!(
            "management.exchange_local_random",
            "PUT /api/exchanges/{v}/{x} with type x-local-random: 201, GET shows the type; /api/overview lists the type",
            ["management"],
            exchange_local_random
        ),
        case!(
            "management.queue_legacy_leader_locator",
            "PUT /api/queues/{v}/{q} with x-queue-leader-locator random, least-leaders or min-masters (RabbitMQ 4 \
             takes them as balanced) on classic and quorum queues: 201, the argument as given; bogus: 400",
            ["management"],
            legacy_leader_locator
        ),
        case!(
            "management.queue_declare_and_delete",
            "PUT /api/queues/{v}/{q}: 201, then 204, 400 with RabbitMQ's inequivalence text; DELETE ?if-empty=true on a non-empty queue: 400 '... not empty'; DELETE …/contents purges (204); DELETE: 204, then 404",
            ["management"],
            queue_declare_and_delete
        ),
        case!(
            "management.queue_get",
            "POST /api/queues/{v}/{q}/get: the messages' JSON (payload, payload_bytes, payload_encoding, redelivered, exchange, routing_key, message_count, properties), ackmode requeue and ack, encoding base64, truncate, and RabbitMQ's 400s and 404",
            ["management"],
            queue_get
        ),
        case!(
            "management.queue_message_stats",
            "a queue reports message_bytes, node, exclusive_consumer_tag, message_stats (publish, deliver_get, redeliver, ack with rates), consumer_utilisation and consumer_capacity (0 without consumers) and memory after publishes and gets over the API",
            ["management"],
            queue_message_stats
        ),
        case!(
            "management.exchange_declare_show_delete",
            "PUT/GET/DELETE /api/exchanges/{v}/{x}: 201/204, the exchange's fields, 400 for inequivalence and an unknown type, 401 for amq.*, 400 '... in use' for if-unused, 404 when gone",
            ["management"],
            exchange_declare_show_delete
        ),
        case!(
            "management.exchange_publish",
            "POST /api/exchanges/{v}/{x}/publish answers {\"routed\": bool} and refuses missing keys, bad payloads and a foreign user_id as RabbitMQ does",
            ["management"],
            exchange_publish
        ),
        case!(
            "management.bindings_by_properties_key",
            "POST /api/bindings/{v}/e/{x}/q/{q}: 201 with Location '{q}/{props}'; listings include the default exchange's binding; GET and DELETE by properties key",
            ["management"],
            bindings_by_properties_key
        ),
        case!(
            "management.list_pagination",
            "?page/page_size/name/columns give RabbitMQ's envelope; bad values its 400s",
            ["management"],
            list_pagination
        ),
        case!(
            "management.object_permissions",
            "declare, delete, purge and bind without permission: 401 'Access refused.'; get without read: 401 with the channel's text; publish without write: 400 '403 ACCESS_REFUSED - ...'",
            ["management", "access"],
            object_permissions
        ),
    ]
}

async fn api(b: &Broker, method: &str, path: &str, body: Option<&str>) -> Result<HttpResponse, CaseError> {
    request(&b.http, method, path, (&b.user, &b.password), body).await
}

/// The value at a JSON pointer (`Null` when absent).
fn at(value: &Value, pointer: &str) -> Value {
    value.pointer(pointer).cloned().unwrap_or(Value::Null)
}

fn parse(response: &HttpResponse) -> Result<Value, CaseError> {
    serde_json::from_str(&response.body).map_err(|e| CaseError::new(format!("JSON {e}: {}", response.body)))
}

/// The status and the error body's `reason`.
async fn reason(b: &Broker, method: &str, path: &str, body: Option<&str>) -> Result<(u16, Value), CaseError> {
    let response = api(b, method, path, body).await?;
    let parsed = parse(&response)?;
    Ok((response.status, parsed.get("reason").cloned().unwrap_or(Value::Null)))
}

fn queue_path(b: &Broker, q: &str) -> String {
    format!("/api/queues/{}/{}", segment(&b.vhost), segment(q))
}

fn exchange_path(b: &Broker, x: &str) -> String {
    format!("/api/exchanges/{}/{}", segment(&b.vhost), segment(x))
}

async fn publish(b: &Broker, routing_key: &str, payload: &str) -> Result<Value, CaseError> {
    let body = json!({"properties": {}, "routing_key": routing_key, "payload": payload, "payload_encoding": "string"});
    let response = api(b, "POST", &(exchange_path(b, "amq.default") + "/publish"), Some(&body.to_string())).await?;
    check_eq!(response.status, 200, "publish: {}", response.body);
    parse(&response)
}

async fn trailing_slash(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let (_conn, _ch) = ctx.lapin_channel().await?;
    for path in ["/api/overview/".to_owned(), "/api/queues/".to_owned(), format!("/api/queues/{}/", segment(&b.vhost))]
    {
        check_eq!(api(b, "GET", &path, None).await?.status, 200, "GET {path}");
    }
    // RabbitMQ lists a connection once its stats are emitted (every 5 s by default).
    crate::lapin_kit::eventually(
        std::time::Duration::from_secs(10),
        "a connection in GET /api/connections/",
        || async {
            let connections = parse(&api(b, "GET", "/api/connections/", None).await?)?;
            Ok(connections.as_array().is_some_and(|all| all.iter().any(|c| at(c, "/user") == json!(b.user))))
        },
    )
    .await?;
    let vhost = format!("/api/vhosts/{}/", segment(&ctx.name("vh")));
    check_eq!(api(b, "PUT", &vhost, Some("{}")).await?.status, 201, "PUT {vhost}");
    check_eq!(api(b, "DELETE", &vhost, None).await?.status, 204, "DELETE {vhost}");
    check_eq!(api(b, "GET", vhost.trim_end_matches('/'), None).await?.status, 404, "the vhost after its DELETE");
    Ok(())
}

async fn exchange_local_random(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let x = ctx.exchange("lr");
    let path = exchange_path(b, &x);
    check_eq!(api(b, "PUT", &path, Some(r#"{"type":"x-local-random"}"#)).await?.status, 201, "PUT");
    check_eq!(at(&parse(&api(b, "GET", &path, None).await?)?, "/type"), json!("x-local-random"), "type");
    let overview = parse(&api(b, "GET", "/api/overview", None).await?)?;
    let types = at(&overview, "/exchange_types");
    let listed = types.as_array().is_some_and(|types| {
        types.iter().any(|t| {
            at(t, "/name") == json!("x-local-random")
                && at(t, "/description") == json!("Picks one random local binding (queue) to route via (to).")
        })
    });
    check!(listed, "exchange_types: {types}");
    Ok(())
}

async fn legacy_leader_locator(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    for kind in ["classic", "quorum"] {
        for locator in ["random", "least-leaders", "min-masters"] {
            let q = ctx.queue(kind);
            let path = queue_path(b, &q);
            let body = json!({"durable": true, "arguments": {"x-queue-type": kind, "x-queue-leader-locator": locator}});
            check_eq!(api(b, "PUT", &path, Some(&body.to_string())).await?.status, 201, "PUT {kind} {locator}");
            let info = parse(&api(b, "GET", &path, None).await?)?;
            check_eq!(at(&info, "/arguments/x-queue-leader-locator"), json!(locator), "the argument as given");
        }
        let q = ctx.queue(kind);
        let body = json!({"durable": true, "arguments": {"x-queue-type": kind, "x-queue-leader-locator": "bogus"}});
        check_eq!(api(b, "PUT", &queue_path(b, &q), Some(&body.to_string())).await?.status, 400, "bogus");
    }
    Ok(())
}

async fn queue_declare_and_delete(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let q = ctx.queue("q");
    let path = queue_path(b, &q);
    let body = r#"{"durable":true,"arguments":{"x-max-length":10}}"#;
    check_eq!(api(b, "PUT", &path, Some(body)).await?.status, 201, "first PUT");
    check_eq!(api(b, "PUT", &path, Some(body)).await?.status, 204, "second PUT");
    let got = reason(b, "PUT", &path, Some(r#"{"durable":false,"arguments":{"x-max-length":10}}"#)).await?;
    let expected = format!(
        "inequivalent arg 'durable' for queue '{q}' in vhost '{}': received 'false' but current is 'true'",
        b.vhost
    );
    check_eq!(got, (400, json!(expected)), "inequivalent PUT");
    check_eq!(
        reason(b, "PUT", &path, Some(r#"{"durable":"yes"}"#)).await?,
        (400, json!(["not_boolean", "yes"])),
        "durable"
    );
    let info = parse(&api(b, "GET", &path, None).await?)?;
    check_eq!(
        (at(&info, "/name"), at(&info, "/durable"), at(&info, "/auto_delete"), at(&info, "/type")),
        (json!(q), json!(true), json!(false), json!("classic")),
        "GET queue"
    );
    check_eq!(at(&info, "/arguments/x-max-length"), json!(10), "arguments");
    check_eq!(publish(b, &q, "hi").await?, json!({"routed": true}), "publish");
    let got = reason(b, "DELETE", &format!("{path}?if-empty=true"), None).await?;
    check_eq!(got, (400, json!(format!("queue '{q}' in vhost '{}' not empty", b.vhost))), "if-empty");
    check_eq!(api(b, "DELETE", &format!("{path}/contents"), None).await?.status, 204, "purge");
    check_eq!(api(b, "DELETE", &format!("{path}?if-empty=true"), None).await?.status, 204, "delete");
    let gone = api(b, "DELETE", &path, None).await?;
    check_eq!((gone.status, parse(&gone)?), (404, json!({"error": "Object Not Found", "reason": "Not Found"})), "gone");
    check_eq!(api(b, "DELETE", &format!("{path}/contents"), None).await?.status, 404, "purge gone");
    Ok(())
}

async fn queue_get(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let q = ctx.queue("q");
    let path = queue_path(b, &q);
    check_eq!(api(b, "PUT", &path, Some("{}")).await?.status, 201, "PUT");
    let body = json!({"properties": {"headers": {"h": 1}, "content_type": "text/plain", "delivery_mode": 2},
                      "routing_key": q, "payload": "aGVsbG8=", "payload_encoding": "base64"});
    let response = api(b, "POST", &(exchange_path(b, "amq.default") + "/publish"), Some(&body.to_string())).await?;
    check_eq!(parse(&response)?, json!({"routed": true}), "publish");
    let get = format!("{path}/get");
    let response = api(b, "POST", &get, Some(r#"{"count":5,"ackmode":"ack_requeue_true","encoding":"auto"}"#)).await?;
    check_eq!(response.status, 200, "get: {}", response.body);
    let expected = json!([{"payload_bytes": 5, "redelivered": false, "exchange": "", "routing_key": q, "message_count": 0,
        "properties": {"delivery_mode": 2, "headers": {"h": 1}, "content_type": "text/plain"},
        "payload": "hello", "payload_encoding": "string"}]);
    check_eq!(parse(&response)?, expected, "get");
    let body = r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"base64","truncate":2}"#;
    let got = parse(&api(b, "POST", &get, Some(body)).await?)?;
    check_eq!((at(&got, "/0/payload"), at(&got, "/0/redelivered")), (json!("aGU="), json!(true)), "base64");
    let body = r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}"#;
    check_eq!(at(&parse(&api(b, "POST", &get, Some(body)).await?)?, "/0/payload"), json!("hello"), "acked");
    check_eq!(parse(&api(b, "POST", &get, Some(body)).await?)?, json!([]), "empty");
    let missing = json!("[{key_missing,ackmode},{key_missing,count},{key_missing,encoding}]");
    check_eq!(reason(b, "POST", &get, Some("{}")).await?, (400, missing), "missing keys");
    let body = r#"{"count":"x","ackmode":"ack_requeue_true","encoding":"auto"}"#;
    check_eq!(reason(b, "POST", &get, Some(body)).await?, (400, json!(["not_integer", "x"])), "count");
    let body = r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"x"}"#;
    let expected = json!("Unsupported encoding. Please use auto or base64.");
    check_eq!(reason(b, "POST", &get, Some(body)).await?, (400, expected), "encoding");
    let body = r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}"#;
    let none = api(b, "POST", &format!("{}/get", queue_path(b, &ctx.name("none"))), Some(body)).await?;
    check_eq!((none.status, parse(&none)?), (404, json!({"error": "not_found", "reason": "queue_not_found"})), "404");
    Ok(())
}

async fn queue_message_stats(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let q = ctx.queue("q");
    let path = queue_path(b, &q);
    check_eq!(api(b, "PUT", &path, Some("{}")).await?.status, 201, "PUT");
    for payload in ["abc", "defgh"] {
        check_eq!(publish(b, &q, payload).await?, json!({"routed": true}), "publish {payload}");
    }
    let get = format!("{path}/get");
    for mode in ["ack_requeue_true", "ack_requeue_false"] {
        let body = format!(r#"{{"count":1,"ackmode":"{mode}","encoding":"auto"}}"#);
        check_eq!(api(b, "POST", &get, Some(&body)).await?.status, 200, "get {mode}");
    }
    // RabbitMQ refreshes its statistics every 5 s.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    let info = loop {
        let info = parse(&api(b, "GET", &path, None).await?)?;
        let counted = (at(&info, "/message_stats/publish"), at(&info, "/message_stats/deliver_get"));
        if counted == (json!(2), json!(2)) && at(&info, "/message_bytes") == json!(5) {
            break info;
        }
        check!(tokio::time::Instant::now() < deadline, "message_stats never counted 2 and 2: {info}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    check_eq!(at(&info, "/message_stats/redeliver"), json!(1), "redeliver");
    check_eq!(at(&info, "/message_stats/ack"), json!(0), "ack (ack_requeue_false fetches with no_ack)");
    for name in ["publish", "deliver_get", "redeliver", "ack"] {
        let rate = at(&info, &format!("/message_stats/{name}_details/rate"));
        check!(rate.is_f64(), "{name}_details.rate is a float: {info}");
    }
    check_eq!(
        (at(&info, "/message_bytes_ready"), at(&info, "/message_bytes_unacknowledged")),
        (json!(5), json!(0)),
        "byte counts"
    );
    check_eq!(at(&info, "/exclusive_consumer_tag"), Value::Null, "exclusive_consumer_tag");
    check!(at(&info, "/node").as_str().is_some_and(|n| n.contains('@')), "node: {info}");
    // Without consumers both read 0; memory is what the queue holds (a process's on 4.0.5, an
    // estimate on Charon): some bytes, at least the bodies held.
    for name in ["consumer_utilisation", "consumer_capacity"] {
        check_eq!(at(&info, &format!("/{name}")).as_f64(), Some(0.0), "{name} without consumers");
    }
    check!(at(&info, "/memory").as_u64().is_some_and(|m| m >= 5), "memory: {info}");
    Ok(())
}

async fn exchange_declare_show_delete(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let x = ctx.exchange("x");
    let path = exchange_path(b, &x);
    let body = r#"{"type":"topic","durable":true,"arguments":{"alternate-exchange":"ae"}}"#;
    check_eq!(api(b, "PUT", &path, Some(body)).await?.status, 201, "first PUT");
    check_eq!(api(b, "PUT", &path, Some(body)).await?.status, 204, "second PUT");
    let expected = format!(
        "inequivalent arg 'type' for exchange '{x}' in vhost '{}': received 'direct' but current is 'topic'",
        b.vhost
    );
    check_eq!(reason(b, "PUT", &path, Some(r#"{"type":"direct"}"#)).await?, (400, json!(expected)), "inequivalent");
    let other = ctx.exchange("y");
    // A type name RabbitMQ's VM has no atom for: for one it has (`bogus`) it says "invalid
    // exchange type" instead (OBSERVED-0.9.1.md).
    let kind = ctx.exchange("no-such-type");
    let got = reason(b, "PUT", &exchange_path(b, &other), Some(&json!({ "type": kind }).to_string())).await?;
    check_eq!(got, (400, json!(format!("unknown exchange type '{kind}'"))), "bad type");
    let got = reason(b, "PUT", &exchange_path(b, "amq.cf-objects"), Some("{}")).await?;
    check_eq!(got, (401, json!("Access refused.")), "amq.");
    let info = parse(&api(b, "GET", &path, None).await?)?;
    for (field, expected) in [
        ("arguments", json!({"alternate-exchange": "ae"})),
        ("auto_delete", json!(false)),
        ("durable", json!(true)),
        ("internal", json!(false)),
        ("name", json!(x)),
        ("type", json!("topic")),
        ("vhost", json!(b.vhost)),
    ] {
        check_eq!(at(&info, &format!("/{field}")), expected, "exchange {field}");
    }
    let default = parse(&api(b, "GET", &(exchange_path(b, "amq.default") + "?columns=name,type"), None).await?)?;
    check_eq!(default, json!({"name": "", "type": "direct"}), "default exchange");
    let q = ctx.queue("q");
    check_eq!(api(b, "PUT", &queue_path(b, &q), Some("{}")).await?.status, 201, "queue");
    let bind = format!("/api/bindings/{}/e/{}/q/{}", segment(&b.vhost), segment(&x), segment(&q));
    check_eq!(api(b, "POST", &bind, Some("{}")).await?.status, 201, "bind");
    let got = reason(b, "DELETE", &format!("{path}?if-unused=true"), None).await?;
    check_eq!(got, (400, json!(format!("exchange '{x}' in vhost '{}' in use", b.vhost))), "if-unused");
    check_eq!(
        reason(b, "DELETE", &exchange_path(b, "amq.direct"), None).await?,
        (401, json!("Access refused.")),
        "amq"
    );
    check_eq!(api(b, "DELETE", &path, None).await?.status, 204, "delete");
    check_eq!(api(b, "DELETE", &path, None).await?.status, 404, "delete again");
    Ok(())
}

async fn exchange_publish(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let uri = exchange_path(b, "amq.default") + "/publish";
    check_eq!(publish(b, &ctx.name("nowhere"), "x").await?, json!({"routed": false}), "unroutable");
    let body = r#"{"routing_key":"k","payload":"x","payload_encoding":"string"}"#;
    check_eq!(reason(b, "POST", &uri, Some(body)).await?, (400, json!("[{key_missing,properties}]")), "missing");
    let with = |properties: &str, payload: &str, encoding: &str| {
        format!(
            r#"{{"properties":{{{properties}}},"routing_key":"k","payload":"{payload}","payload_encoding":"{encoding}"}}"#
        )
    };
    let got = reason(b, "POST", &uri, Some(&with(r#""delivery_mode":"x""#, "x", "string"))).await?;
    check_eq!(got, (400, json!(["not_int", "delivery_mode"])), "delivery_mode");
    let got = reason(b, "POST", &uri, Some(&with("", "x!", "base64"))).await?;
    check_eq!(got, (400, json!(["not_base64", "x!"])), "base64");
    let got = reason(b, "POST", &uri, Some(&with("", "x", "bogus"))).await?;
    check_eq!(got, (400, json!(["unsupported_encoding", "bogus"])), "encoding");
    let got = reason(b, "POST", &uri, Some(&with(r#""user_id":"cf-someone-else""#, "x", "string"))).await?;
    let expected = format!(
        "406 PRECONDITION_FAILED - user_id property set to 'cf-someone-else' but authenticated user was '{}'",
        b.user
    );
    check_eq!(got, (400, json!(expected)), "user_id");
    let none =
        api(b, "POST", &(exchange_path(b, &ctx.name("none")) + "/publish"), Some(&with("", "x", "string"))).await?;
    check_eq!(
        (none.status, parse(&none)?),
        (404, json!({"error": "not_found", "reason": "exchange_not_found"})),
        "404"
    );
    Ok(())
}

/// A POST whose answer's `Location` header matters: the status and that header.
async fn post_location(b: &Broker, path: &str, body: &str) -> Result<(u16, Option<String>), CaseError> {
    let authority = b.http.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let credentials = base64(format!("{}:{}", b.user, b.password).as_bytes());
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Basic {credentials}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(&authority).await.map_err(|e| CaseError::new(e.to_string()))?;
    stream.write_all(head.as_bytes()).await.map_err(|e| CaseError::new(e.to_string()))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.map_err(|e| CaseError::new(e.to_string()))?;
    let text = String::from_utf8_lossy(&raw);
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_default();
    let location = text.lines().take_while(|l| !l.is_empty()).find_map(|l| {
        l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("location")).map(|(_, v)| v.trim().to_owned())
    });
    Ok((status, location))
}

/// Standard base64 with padding (the suite has no base64 dependency).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            let index = usize::try_from((n >> (18 - 6 * i)) & 63).unwrap_or(0);
            let digit = ALPHABET.get(index).copied().unwrap_or(b'A');
            out.push(if i <= chunk.len() { char::from(digit) } else { '=' });
        }
    }
    out
}

async fn bindings_by_properties_key(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let (x, y, q) = (ctx.exchange("x"), ctx.exchange("y"), ctx.queue("q"));
    check_eq!(api(b, "PUT", &exchange_path(b, &x), Some(r#"{"type":"topic"}"#)).await?.status, 201, "x");
    check_eq!(api(b, "PUT", &exchange_path(b, &y), Some("{}")).await?.status, 201, "y");
    check_eq!(api(b, "PUT", &queue_path(b, &q), Some("{}")).await?.status, 201, "q");
    let base = format!("/api/bindings/{}/e/{}/q/{}", segment(&b.vhost), segment(&x), segment(&q));
    check_eq!(post_location(b, &base, r#"{"routing_key":"a.b"}"#).await?, (201, Some(format!("{q}/a.b"))), "bind a.b");
    check_eq!(post_location(b, &base, "{}").await?, (201, Some(format!("{q}/~"))), "bind empty key");
    let e2e = format!("/api/bindings/{}/e/{}/e/{}", segment(&b.vhost), segment(&x), segment(&y));
    check_eq!(post_location(b, &e2e, r#"{"routing_key":"k"}"#).await?, (201, Some(format!("{y}/k"))), "bind x->y");
    let missing = format!("/api/bindings/{}/e/{}/q/{}", segment(&b.vhost), segment(&x), segment(&ctx.name("none")));
    check_eq!(api(b, "POST", &missing, Some("{}")).await?.status, 404, "missing queue");
    let listed = parse(&api(b, "GET", &format!("{}/bindings", queue_path(b, &q)), None).await?)?;
    let keys: Vec<(Value, Value)> = listed
        .as_array()
        .map(|all| all.iter().map(|b| (at(b, "/source"), at(b, "/properties_key"))).collect())
        .unwrap_or_default();
    check_eq!(keys, vec![(json!(""), json!(q)), (json!(x), json!("~")), (json!(x), json!("a.b"))], "queue bindings");
    let expected = json!({"source": x, "vhost": b.vhost, "destination": q, "destination_type": "queue",
        "routing_key": "a.b", "arguments": {}, "properties_key": "a.b"});
    check_eq!(at(&listed, "/2"), expected.clone(), "binding JSON");
    let source = parse(&api(b, "GET", &format!("{}/bindings/source", exchange_path(b, &x)), None).await?)?;
    check_eq!(source.as_array().map(Vec::len), Some(3), "source bindings");
    let destination = parse(&api(b, "GET", &format!("{}/bindings/destination", exchange_path(b, &y)), None).await?)?;
    check_eq!(at(&destination, "/0/properties_key"), json!("k"), "destination bindings");
    check_eq!(parse(&api(b, "GET", &format!("{base}/a.b"), None).await?)?, expected, "GET by key");
    check_eq!(api(b, "DELETE", &format!("{base}/a.b"), None).await?.status, 204, "DELETE by key");
    check_eq!(api(b, "DELETE", &format!("{base}/a.b"), None).await?.status, 404, "DELETE again");
    let left = parse(&api(b, "GET", &base, None).await?)?;
    check_eq!(left.as_array().map(Vec::len), Some(1), "left: {left}");
    // A key with characters to quote: the properties key quotes it, the Location quotes that.
    let located = post_location(b, &base, r#"{"routing_key":"a b/c","arguments":[]}"#).await?;
    check_eq!(located, (201, Some(format!("{q}/a%2Bb%252Fc"))), "quoted Location");
    let listed = parse(&api(b, "GET", &base, None).await?)?;
    let keys: Vec<Value> =
        listed.as_array().map(|all| all.iter().map(|b| at(b, "/properties_key")).collect()).unwrap_or_default();
    check_eq!(keys, vec![json!("~"), json!("a+b%2Fc")], "quoted key");
    check_eq!(api(b, "DELETE", &format!("{base}/a%2Bb%252Fc"), None).await?.status, 204, "DELETE by Location");
    Ok(())
}

async fn list_pagination(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let prefix = ctx.name("page");
    for suffix in ["a", "b", "c"] {
        let q = format!("{prefix}-{suffix}");
        ctx.track_queue(&q);
        check_eq!(api(b, "PUT", &queue_path(b, &q), Some("{}")).await?.status, 201, "PUT {q}");
    }
    let list = format!("/api/queues/{}", segment(&b.vhost));
    let page = parse(&api(b, "GET", &format!("{list}?page=2&page_size=2&name={prefix}&columns=name"), None).await?)?;
    check_eq!(at(&page, "/items"), json!([{"name": format!("{prefix}-c")}]), "page 2");
    for (field, expected) in
        [("filtered_count", 3), ("item_count", 1), ("page", 2), ("page_count", 2), ("page_size", 2)]
    {
        check_eq!(at(&page, &format!("/{field}")), json!(expected), "{field}");
    }
    check!(at(&page, "/total_count").as_u64().is_some_and(|n| n >= 3), "total_count: {page}");
    let regex = format!("{list}?page=1&name=^{prefix}-(a|c)$&use_regex=true&columns=name&sort=name&sort_reverse=true");
    let page = parse(&api(b, "GET", &regex, None).await?)?;
    check_eq!(at(&page, "/items"), json!([{"name": format!("{prefix}-c")}, {"name": format!("{prefix}-a")}]), "regex");
    let bad = |query: &str| format!("{list}?{query}");
    let answer = |r: &HttpResponse| parse(r).map(|v| (r.status, v));
    let expected = json!({"error": "invalid_pagination_parameters",
                          "reason": "Invalid pagination parameters: page number 0, page size undefined"});
    check_eq!(answer(&api(b, "GET", &bad("page=0"), None).await?)?, (400, expected), "page=0");
    let expected = json!({"error": "bad_request", "reason": "Pagination parameters are invalid"});
    check_eq!(answer(&api(b, "GET", &bad("page=x"), None).await?)?, (400, expected), "page=x");
    let got = answer(&api(b, "GET", &bad(&format!("page=9&name={prefix}")), None).await?)?;
    let expected = json!({"error": "page_out_of_range", "reason": "Page out of range, page: 9 page size: 100, len: 3"});
    check_eq!(got, (400, expected), "out of range");
    Ok(())
}

async fn object_permissions(ctx: Ctx) -> CaseResult {
    let b = ctx.broker();
    let (q, x) = (ctx.queue("q"), ctx.exchange("x"));
    check_eq!(api(b, "PUT", &queue_path(b, &q), Some("{}")).await?.status, 201, "queue");
    check_eq!(api(b, "PUT", &exchange_path(b, &x), Some("{}")).await?.status, 201, "exchange");
    let own = ctx.queue("own");
    let user = ctx.user_with("management", Some((&format!("^{own}$"), "^cf-nothing$", "^cf-nothing$"))).await?;
    let refused = (401, json!("Access refused."));
    check_eq!(reason(&user, "PUT", &queue_path(b, &ctx.queue("other")), Some("{}")).await?, refused.clone(), "declare");
    check_eq!(api(&user, "PUT", &queue_path(b, &own), Some("{}")).await?.status, 201, "own declare");
    check_eq!(reason(&user, "DELETE", &queue_path(b, &q), None).await?, refused.clone(), "delete");
    check_eq!(
        reason(&user, "DELETE", &format!("{}/contents", queue_path(b, &q)), None).await?,
        refused.clone(),
        "purge"
    );
    check_eq!(
        reason(&user, "PUT", &exchange_path(b, &ctx.exchange("y")), Some("{}")).await?,
        refused.clone(),
        "exchange"
    );
    let bind = format!("/api/bindings/{}/e/{}/q/{}", segment(&b.vhost), segment(&x), segment(&q));
    check_eq!(reason(&user, "POST", &bind, Some("{}")).await?, refused, "bind");
    let get = r#"{"count":1,"ackmode":"ack_requeue_true","encoding":"auto"}"#;
    let got = reason(&user, "POST", &format!("{}/get", queue_path(b, &q)), Some(get)).await?;
    let text =
        format!("ACCESS_REFUSED - read access to queue '{q}' in vhost '{}' refused for user '{}'", b.vhost, user.user);
    check_eq!(got, (401, json!(text)), "get");
    let body = r#"{"properties":{},"routing_key":"k","payload":"x","payload_encoding":"string"}"#;
    let got = reason(&user, "POST", &format!("{}/publish", exchange_path(b, &x)), Some(body)).await?;
    let text = format!(
        "403 ACCESS_REFUSED - write access to exchange '{x}' in vhost '{}' refused for user '{}'",
        b.vhost, user.user
    );
    check_eq!(got, (400, json!(text)), "publish");
    check_eq!(api(&user, "GET", &queue_path(b, &q), None).await?.status, 200, "reading needs vhost access only");
    Ok(())
}
