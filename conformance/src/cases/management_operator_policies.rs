//! `/api/operator-policies`: RabbitMQ's second policy namespace, for the limits an operator
//! imposes. CRUD and its answers, the keys an operator policy may hold with 4.0.5's 400 texts
//! (not HTML-escaped, unlike user policies'), who may (administrators), the stricter of the
//! user and operator values applying to a queue (observable by publishing), the queue's
//! `operator_policy` and merged `effective_policy_definition`, removal restoring the user
//! policy's value, and definitions carrying operator policies as `operator_policy` runtime
//! parameters.
//!
//! The runner deletes the cases' operator policies; patterns are anchored on the case's own
//! unique names, as operator policies apply to every matching queue of the vhost.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::{Value as Json, json};

use crate::admin::{HttpResponse, request, segment};
use crate::lapin_kit as lk;
use crate::{Case, CaseError, CaseResult, Ctx, case, check, check_eq};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "management_operator_policies.crud",
            "PUT /api/operator-policies/{vhost}/{name} answers 201 then 204; GET shows the /api/policies shape (apply-to and priority defaulted); it is listed under /api/operator-policies[/{vhost}] and not under /api/policies; DELETE answers 204, then 404 as GET does",
            ["management"],
            crud
        ),
        case!(
            "management_operator_policies.validation",
            "operator policies take only expires, message-ttl, max-length[-bytes], max-in-memory-*, delivery-limit, queue-version, overflow, target-group-size, queue-master-locator: 4.0.5's 400 texts, not HTML-escaped, every failing field listed; key_missing; a non-object definition answers 500",
            ["management"],
            validation
        ),
        case!(
            "management_operator_policies.administrators_only",
            "policymaker, monitoring and management users get 401 Not administrator user for one operator policy's GET, PUT and DELETE, and may list those of a vhost they can open",
            ["management"],
            administrators_only
        ),
        case!(
            "management_operator_policies.stricter_max_length_wins",
            "a user policy max-length 10 and an operator policy max-length 3 on an existing queue: the queue keeps the 3 newest of 6, shows policy, operator_policy and the merged effective_policy_definition; the operator policy removed, it takes 10 again; a lower user value wins over the operator's",
            ["management"],
            stricter_max_length_wins
        )
        // Three waits for RabbitMQ's management objects, refreshed every 5 s.
        .timeout(60),
        case!(
            "management_operator_policies.stricter_message_ttl_wins",
            "a user policy message-ttl 60 s and an operator policy message-ttl 100 ms: a message published expires; the operator policy removed, a message published stays",
            ["management"],
            stricter_message_ttl_wins
        )
        .timeout(45),
        case!(
            "management_operator_policies.definitions",
            "GET /api/definitions/{vhost} exports an operator policy as an operator_policy runtime parameter (no operator_policies section); POSTing the export back restores it after its deletion; an invalid one is refused with 4.0.5's text",
            ["management"],
            definitions
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

/// The message TTL in the queue's `effective_policy_definition`.
async fn ttl(ctx: &Ctx, queue: &str) -> Result<Json, CaseError> {
    Ok(at(&at(&ctx.queue_info(queue).await?, "effective_policy_definition"), "message-ttl"))
}

fn path(ctx: &Ctx, name: &str) -> String {
    format!("/api/operator-policies/{}/{}", segment(&ctx.broker().vhost), segment(name))
}

/// `^name$` as a JSON string.
fn exactly(name: &str) -> String {
    format!("^{}$", regex_escape(name))
}

fn regex_escape(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c.to_string() } else { format!("\\{c}") })
        .collect()
}

/// A unique operator policy name; the runner deletes it after the case.
fn operator_policy(ctx: &Ctx, what: &str) -> String {
    let name = ctx.name(what);
    ctx.track_operator_policy(&name);
    name
}

async fn put(ctx: &Ctx, name: &str, body: &Json) -> Result<HttpResponse, CaseError> {
    api(ctx, "PUT", &path(ctx, name), Some(&body.to_string())).await
}

async fn crud(ctx: Ctx) -> CaseResult {
    let name = operator_policy(&ctx, "op");
    let (ctx, name) = (&ctx, name.as_str());
    let vhost = ctx.broker().vhost.clone();
    let body = json!({"pattern": exactly(name), "definition": {"max-length": 5, "message-ttl": 60000}});
    check_eq!(put(ctx, name, &body).await?.status, 201, "first PUT");
    let replaced = put(ctx, name, &body).await?;
    check_eq!((replaced.status, replaced.body.as_str()), (204, ""), "second PUT");
    let got = api(ctx, "GET", &path(ctx, name), None).await?;
    check_eq!(got.status, 200, "GET: {}", got.body);
    let expected = json!({"vhost": vhost, "name": name, "pattern": exactly(name), "apply-to": "all",
        "definition": {"max-length": 5, "message-ttl": 60000}, "priority": 0});
    check_eq!(parse(&got)?, expected.clone(), "GET one");
    let named = |list: Json| {
        list.as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| at(p, "name") == json!(name))
            .collect::<Vec<_>>()
    };
    let listed = parse(&api(ctx, "GET", "/api/operator-policies", None).await?)?;
    check_eq!(named(listed), vec![expected.clone()], "in /api/operator-policies");
    let in_vhost = parse(&api(ctx, "GET", &format!("/api/operator-policies/{}", segment(&vhost)), None).await?)?;
    check_eq!(named(in_vhost), vec![expected], "in /api/operator-policies/{{vhost}}");
    let user_policies = parse(&api(ctx, "GET", "/api/policies", None).await?)?;
    check_eq!(named(user_policies), Vec::<Json>::new(), "not a user policy");
    let user_one = api(ctx, "GET", &format!("/api/policies/{}/{}", segment(&vhost), segment(name)), None).await?;
    check_eq!(user_one.status, 404, "GET /api/policies/.. of an operator policy");

    let deleted = api(ctx, "DELETE", &path(ctx, name), None).await?;
    check_eq!((deleted.status, deleted.body.as_str()), (204, ""), "DELETE");
    let not_found = json!({"error": "Object Not Found", "reason": "Not Found"});
    let again = api(ctx, "DELETE", &path(ctx, name), None).await?;
    check_eq!((again.status, parse(&again)?), (404, not_found.clone()), "DELETE again");
    let gone = api(ctx, "GET", &path(ctx, name), None).await?;
    check_eq!((gone.status, parse(&gone)?), (404, not_found), "GET after DELETE");
    Ok(())
}

async fn validation(ctx: Ctx) -> CaseResult {
    let name = operator_policy(&ctx, "op");
    let (ctx, name) = (&ctx, name.as_str());
    let pattern = exactly(name);
    let refused =
        |definition: Json, reason: &'static str| (json!({"pattern": pattern, "definition": definition}), reason);
    let cases = [
        refused(
            json!({"max-length": 1, "foo": 2, "dead-letter-exchange": "d"}),
            "Validation failed\n\n[{<<\"dead-letter-exchange\">>,<<\"d\">>},{<<\"foo\">>,2}] are not recognised policy settings\n",
        ),
        refused(
            json!({"consumer-timeout": 1000}),
            "Validation failed\n\n[{<<\"consumer-timeout\">>,1000}] are not recognised policy settings\n",
        ),
        refused(json!({"expires": 0}), "Validation failed\n\n0 is not a valid queue expiry\n"),
        refused(json!({"message-ttl": -1}), "Validation failed\n\n-1 is not a valid message TTL\n"),
        refused(json!({"max-length-bytes": -1}), "Validation failed\n\n-1 is not a valid maximum length in bytes\n"),
        refused(
            json!({"max-in-memory-length": -1}),
            "Validation failed\n\n-1 is not a valid maximum memory in bytes\n",
        ),
        refused(json!({"delivery-limit": "x"}), "Validation failed\n\n<<\"x\">> is not a valid delivery limit\n"),
        refused(json!({"queue-version": 3}), "Validation failed\n\n3 is not a valid queue-version value\n"),
        refused(json!({"overflow": "x"}), "Validation failed\n\n<<\"x\">> is not a valid overflow value\n"),
        refused(json!({"target-group-size": 0}), "Validation failed\n\n0 is not a valid qq target count value\n"),
        refused(json!({"queue-master-locator": "x"}), "Validation failed\n\n<<\"x\">> is not a valid master locator\n"),
        refused(json!({"message-ttl": "5"}), "Validation failed\n\n<<\"5\">> is not a valid message TTL\n"),
        refused(
            json!({"max-length": -1, "message-ttl": -1}),
            "Validation failed\n\n-1 is not a valid maximum length\n",
        ),
        refused(json!({"foo": 1, "max-length": -1}), "Validation failed\n\n-1 is not a valid maximum length\n"),
        refused(json!({}), "Validation failed\n\nno policy provided\n"),
        (
            json!({"pattern": 5, "definition": {"max-length": -1}, "priority": "x", "apply-to": "bogus"}),
            "Validation failed\n\n-1 is not a valid maximum length\napply-to 'bogus' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'\npattern should be a binary but was 5\npriority should be a number, actually was <<\"x\">>\n",
        ),
        (
            json!({"pattern": pattern, "definition": {"max-length": 1}, "priority": null}),
            "Validation failed\n\npriority should be a number, actually was null\n",
        ),
        (json!({"pattern": pattern}), "[{key_missing,definition}]"),
        // PCRE's words and offsets, as `~tp` prints them (a long tuple on two lines).
        (
            json!({"pattern": "a(b", "definition": {"max-length": 1}}),
            "Validation failed\n\npattern should be regular expression but is invalid: {\"missing )\",3}\n",
        ),
        (
            json!({"pattern": "[a", "definition": {"max-length": 1}}),
            "Validation failed\n\npattern should be regular expression but is invalid: {\"missing terminating ] for character class\",\n                                                      2}\n",
        ),
    ];
    for (body, reason) in cases {
        let response = put(ctx, name, &body).await?;
        check_eq!(
            (response.status, parse(&response)?),
            (400, json!({"error": "bad_request", "reason": reason})),
            "PUT {body}"
        );
    }
    // RabbitMQ's handler crashes on a definition that is not an object.
    let crashed = put(ctx, name, &json!({"pattern": pattern, "definition": []})).await?;
    check_eq!(crashed.status, 500, "a list as the definition");
    check_eq!(api(ctx, "GET", &path(ctx, name), None).await?.status, 404, "nothing was created");
    // Every accepted key.
    let definition = json!({"expires": 1000, "message-ttl": 0, "max-length": 5, "max-length-bytes": 5,
        "max-in-memory-length": 5, "max-in-memory-bytes": 5, "delivery-limit": -1, "queue-version": 2,
        "overflow": "reject-publish", "target-group-size": 3, "queue-master-locator": "client-local"});
    let body = json!({"pattern": pattern, "definition": definition, "apply-to": "quorum_queues", "priority": 4});
    check_eq!(put(ctx, name, &body).await?.status, 201, "every operator key");
    let got = parse(&api(ctx, "GET", &path(ctx, name), None).await?)?;
    check_eq!((at(&got, "definition"), at(&got, "apply-to")), (definition, json!("quorum_queues")), "stored");
    Ok(())
}

async fn administrators_only(ctx: Ctx) -> CaseResult {
    let name = operator_policy(&ctx, "op");
    let (ctx, name) = (&ctx, name.as_str());
    let body = json!({"pattern": exactly(name), "definition": {"max-length": 1}});
    check_eq!(put(ctx, name, &body).await?.status, 201, "PUT as administrator");
    let vhost = segment(&ctx.broker().vhost);
    let not_admin = json!({"error": "not_authorised", "reason": "Not administrator user"});
    for tags in ["policymaker", "monitoring", "management"] {
        let user = ctx.user_with(tags, Some((".*", ".*", ".*"))).await?;
        for method in ["GET", "PUT", "DELETE"] {
            let sent = (method == "PUT").then(|| body.to_string());
            let response = ctx.api_as(&user, method, &path(ctx, name), sent.as_deref()).await?;
            check_eq!((response.status, parse(&response)?), (401, not_admin.clone()), "{tags} {method}");
        }
        let listed = ctx.api_as(&user, "GET", &format!("/api/operator-policies/{vhost}"), None).await?;
        check_eq!(listed.status, 200, "{tags} lists the vhost's: {}", listed.body);
        let names: Vec<Json> =
            parse(&listed)?.as_array().cloned().unwrap_or_default().into_iter().map(|p| at(&p, "name")).collect();
        check!(names.contains(&json!(name)), "{tags} sees {name} in {names:?}");
    }
    check_eq!(api(ctx, "GET", &path(ctx, name), None).await?.status, 200, "still there");
    Ok(())
}

/// Declares `queue`, publishes `count` confirmed messages `{prefix}{i}`.
async fn publish(ch: &lapin::Channel, queue: &str, prefix: &str, count: usize) -> CaseResult {
    for i in 0..count {
        lk::publish(ch, "", queue, format!("{prefix}{i}").as_bytes()).await?;
    }
    Ok(())
}

/// Waits (RabbitMQ's management objects are refreshed every 5 s) until the queue's management
/// object shows these `policy`, `operator_policy` and `effective_policy_definition`.
async fn shows(ctx: &Ctx, queue: &str, policy: &Json, operator: &Json, effective: &Json) -> CaseResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let info = ctx.queue_info(queue).await?;
        let got = (at(&info, "policy"), at(&info, "operator_policy"), at(&info, "effective_policy_definition"));
        let expected = (policy.clone(), operator.clone(), effective.clone());
        if got == expected {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CaseError::new(format!("queue {queue}: expected {expected:?} got {got:?}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stricter_max_length_wins(ctx: Ctx) -> CaseResult {
    let (op, op_low) = (operator_policy(&ctx, "op"), operator_policy(&ctx, "oplow"));
    let (ctx, op, op_low) = (&ctx, op.as_str(), op_low.as_str());
    let queue = ctx.queue("q");
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions { durable: true, ..Default::default() },
        FieldTable::default(),
    )
    .await?;
    let user = ctx.name("user-policy");
    ctx.track_policy(&user);
    let user_definition = r#"{"max-length":10,"consumer-timeout":60000}"#;
    ctx.put_policy(&user, &exactly(&queue), "queues", 0, user_definition).await?;
    publish(&ch, &queue, "a", 6).await?;
    check_eq!(lk::message_count(&conn, &queue).await?, 6, "under the user policy's 10");

    // The operator policy, set on the existing queue: the oldest go at once.
    let body = json!({"pattern": exactly(&queue), "apply-to": "queues", "definition": {"max-length": 3}});
    check_eq!(put(ctx, op, &body).await?.status, 201, "PUT operator policy");
    let merged = json!({"consumer-timeout": 60000, "max-length": 3});
    shows(ctx, &queue, &json!(user), &json!(op), &merged).await?;
    lk::eventually(Duration::from_secs(10), "the queue cut to 3", || {
        let conn = &conn;
        let queue = &queue;
        async move { Ok(lk::message_count(conn, queue).await? == 3) }
    })
    .await?;
    publish(&ch, &queue, "b", 6).await?;
    check_eq!(lk::drain(&ch, &queue).await?, vec!["b3", "b4", "b5"], "the operator's 3 newest, not the user's 10");

    // Removed: the user policy's 10 again.
    check_eq!(api(ctx, "DELETE", &path(ctx, op), None).await?.status, 204, "DELETE operator policy");
    let user_only = json!({"consumer-timeout": 60000, "max-length": 10});
    shows(ctx, &queue, &json!(user), &Json::Null, &user_only).await?;
    publish(&ch, &queue, "c", 12).await?;
    check_eq!(lk::message_count(&conn, &queue).await?, 10, "the user policy's limit again");
    lk::drain(&ch, &queue).await?;

    // A user value lower than the operator's wins too.
    let body = json!({"pattern": exactly(&queue), "apply-to": "queues", "definition": {"max-length": 50}});
    check_eq!(put(ctx, op_low, &body).await?.status, 201, "PUT a looser operator policy");
    ctx.put_policy(&user, &exactly(&queue), "queues", 0, r#"{"max-length":2}"#).await?;
    shows(ctx, &queue, &json!(user), &json!(op_low), &json!({"max-length": 2})).await?;
    publish(&ch, &queue, "d", 5).await?;
    check_eq!(lk::drain(&ch, &queue).await?, vec!["d3", "d4"], "the user's 2");
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

async fn stricter_message_ttl_wins(ctx: Ctx) -> CaseResult {
    let op = operator_policy(&ctx, "op");
    let (ctx, op) = (&ctx, op.as_str());
    let queue = ctx.queue("q");
    let (conn, ch) = ctx.lapin_channel().await?;
    lk::confirm(&ch).await?;
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default()).await?;
    ctx.set_policy(&exactly(&queue), "queues", 0, r#"{"message-ttl":60000}"#).await?;
    let body = json!({"pattern": exactly(&queue), "definition": {"message-ttl": 100}});
    check_eq!(put(ctx, op, &body).await?.status, 201, "PUT operator policy");
    lk::eventually(Duration::from_secs(10), "the merged TTL of 100 ms", || {
        let ctx = &ctx;
        let queue = &queue;
        async move { Ok(ttl(ctx, queue).await? == json!(100)) }
    })
    .await?;
    publish(&ch, &queue, "short", 1).await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    check_eq!(lk::drain(&ch, &queue).await?, Vec::<String>::new(), "expired after the operator's 100 ms");

    check_eq!(api(ctx, "DELETE", &path(ctx, op), None).await?.status, 204, "DELETE operator policy");
    lk::eventually(Duration::from_secs(10), "the user policy's TTL again", || {
        let ctx = &ctx;
        let queue = &queue;
        async move { Ok(ttl(ctx, queue).await? == json!(60000)) }
    })
    .await?;
    publish(&ch, &queue, "long", 1).await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    check_eq!(lk::drain(&ch, &queue).await?, vec!["long0"], "kept under the user's 60 s");
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

async fn definitions(ctx: Ctx) -> CaseResult {
    let vhost = ctx.name("opdefs");
    let result = definitions_body(&ctx, &vhost).await;
    let _ = api(&ctx, "DELETE", &format!("/api/vhosts/{}", segment(&vhost)), None).await;
    result
}

async fn definitions_body(ctx: &Ctx, vhost: &str) -> CaseResult {
    let v = segment(vhost);
    check_eq!(api(ctx, "PUT", &format!("/api/vhosts/{v}"), None).await?.status, 201, "PUT vhost");
    let value = json!({"pattern": "^q", "definition": {"max-length": 3}, "priority": 2, "apply-to": "queues"});
    let response = api(ctx, "PUT", &format!("/api/operator-policies/{v}/cap"), Some(&value.to_string())).await?;
    check_eq!(response.status, 201, "PUT operator policy: {}", response.body);

    let response = api(ctx, "GET", &format!("/api/definitions/{v}"), None).await?;
    check_eq!(response.status, 200, "GET definitions");
    let exported = parse(&response)?;
    check!(exported.get("operator_policies").is_none(), "no operator_policies section: {exported}");
    check_eq!(
        at(&exported, "parameters"),
        json!([{"value": value, "component": "operator_policy", "name": "cap"}]),
        "the runtime parameter"
    );
    check_eq!(api(ctx, "DELETE", &format!("/api/operator-policies/{v}/cap"), None).await?.status, 204, "DELETE");
    let response = api(ctx, "POST", &format!("/api/definitions/{v}"), Some(&exported.to_string())).await?;
    check_eq!((response.status, response.body.as_str()), (204, ""), "POST the export back");
    let got = parse(&api(ctx, "GET", &format!("/api/operator-policies/{v}/cap"), None).await?)?;
    check_eq!(
        got,
        json!({"vhost": vhost, "name": "cap", "pattern": "^q", "apply-to": "queues", "definition": {"max-length": 3}, "priority": 2}),
        "restored"
    );

    let bad = json!({"parameters": [{"component": "operator_policy", "name": "c",
        "value": {"pattern": "^c", "definition": {"dead-letter-exchange": "x"}, "priority": 0}}]});
    let response = api(ctx, "POST", &format!("/api/definitions/{v}"), Some(&bad.to_string())).await?;
    let reason = format!(
        "<<\"Validation failed\\n\\n[{{&lt;&lt;\\\"dead-letter-exchange\\\"&gt;&gt;,&lt;&lt;\\\"x\\\"&gt;&gt;}}] are not recognised policy settings\\n ({vhost}/operator_policy/c)\">>"
    );
    check_eq!(
        (response.status, parse(&response)?),
        (400, json!({"error": "bad_request", "reason": reason})),
        "an invalid operator policy"
    );
    Ok(())
}
