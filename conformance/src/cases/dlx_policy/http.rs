//! The policy HTTP API: create, update, read and delete with RabbitMQ's status codes and bodies,
//! the 400 answers to invalid policies, and a queue's counters and policy as the API shows them.

use serde_json::json;

use super::kit::exact;
use crate::cases::dlx_settle::{How, Taker, publish_all};
use crate::dlx_kit as dk;
use crate::{CaseError, CaseResult, Ctx, check_eq};

fn parse(body: &str) -> Result<serde_json::Value, CaseError> {
    serde_json::from_str(body).map_err(|e| CaseError::new(format!("not JSON ({e}): {body}")))
}

pub(super) async fn http_lifecycle(ctx: Ctx) -> CaseResult {
    let name = ctx.name("policy");
    let body = |priority: i64| {
        json!({ "pattern": "^nothing-matches$", "apply-to": "queues", "priority": priority,
                "definition": { "dead-letter-exchange": "dlx", "message-ttl": 1000 } })
        .to_string()
    };
    let created = ctx.put_policy_raw(&name, &body(0)).await?;
    check_eq!(created.status, 201, "first PUT");
    let updated = ctx.put_policy_raw(&name, &body(3)).await?;
    check_eq!(updated.status, 204, "second PUT");
    let got = ctx.get_policy(&name).await?;
    check_eq!(got.status, 200, "GET");
    let expected = json!({
        "vhost": ctx.broker().vhost, "name": name, "pattern": "^nothing-matches$", "apply-to": "queues",
        "definition": { "dead-letter-exchange": "dlx", "message-ttl": 1000 }, "priority": 3
    });
    check_eq!(parse(&got.body)?, expected, "GET body");
    check_eq!(ctx.delete_policy(&name).await?.status, 204, "DELETE");
    let again = ctx.delete_policy(&name).await?;
    check_eq!(again.status, 404, "second DELETE");
    let missing = ctx.get_policy(&name).await?;
    check_eq!(
        (missing.status, parse(&missing.body)?),
        (404, json!({ "error": "Object Not Found", "reason": "Not Found" })),
        "GET after DELETE"
    );
    Ok(())
}

pub(super) async fn http_invalid(ctx: Ctx) -> CaseResult {
    let invalid = [
        (r#"{"dead-letter-exchange":1}"#, "1 is not a valid dead letter exchange name"),
        (r#"{"dead-letter-routing-key":1}"#, "1 is not a valid dead letter routing key"),
        (r#"{"message-ttl":-1}"#, "-1 is not a valid message TTL"),
        (r#"{"message-ttl":"x"}"#, "&lt;&lt;\"x\"&gt;&gt; is not a valid message TTL"),
        (r#"{"max-length":-1}"#, "-1 is not a valid maximum length"),
        (r#"{"max-length-bytes":-2}"#, "-2 is not a valid maximum length in bytes"),
        (r#"{"overflow":"bogus"}"#, "&lt;&lt;\"bogus\"&gt;&gt; is not a valid overflow value"),
        (r#"{"delivery-limit":"x"}"#, "&lt;&lt;\"x\"&gt;&gt; is not a valid delivery limit"),
        (r#"{"dead-letter-strategy":"bogus"}"#, "&lt;&lt;\"bogus\"&gt;&gt; is not a valid dead letter strategy"),
        (r#"{"expires":0}"#, "0 is not a valid queue expiry"),
        (r#"{"bogus-key":1}"#, "[{&lt;&lt;\"bogus-key\"&gt;&gt;,1}] are not recognised policy settings"),
        (r#"{}"#, "no policy provided"),
    ];
    let name = ctx.name("policy");
    for (definition, reason) in invalid {
        let body =
            format!(r#"{{"pattern":"^nothing-matches$","apply-to":"queues","priority":0,"definition":{definition}}}"#);
        let response = ctx.put_policy_raw(&name, &body).await?;
        let expected = json!({ "error": "bad_request", "reason": format!("Validation failed\n\n{reason}\n") });
        check_eq!((response.status, parse(&response.body)?), (400, expected), "PUT {definition}");
    }
    let bad_apply = r#"{"pattern":"^x$","apply-to":"bogus","definition":{"message-ttl":1}}"#;
    let response = ctx.put_policy_raw(&name, bad_apply).await?;
    let reason = "Validation failed\n\napply-to 'bogus' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'\n";
    check_eq!(
        (response.status, parse(&response.body)?),
        (400, json!({ "error": "bad_request", "reason": reason })),
        "PUT apply-to bogus"
    );
    let no_pattern = ctx.put_policy_raw(&name, r#"{"apply-to":"queues","definition":{"message-ttl":1}}"#).await?;
    check_eq!(
        (no_pattern.status, parse(&no_pattern.body)?),
        (400, json!({ "error": "bad_request", "reason": "[{key_missing,pattern}]" })),
        "PUT without a pattern"
    );
    check_eq!(ctx.get_policy(&name).await?.status, 404, "GET after the refused PUTs");
    // A refused update leaves the existing policy as it was.
    let good = r#"{"pattern":"^nothing-matches$","apply-to":"queues","priority":0,"definition":{"message-ttl":5}}"#;
    check_eq!(ctx.put_policy_raw(&name, good).await?.status, 201, "valid PUT");
    let bad = r#"{"pattern":"^other$","apply-to":"queues","priority":0,"definition":{"message-ttl":-5}}"#;
    check_eq!(ctx.put_policy_raw(&name, bad).await?.status, 400, "invalid update");
    let kept = parse(&ctx.get_policy(&name).await?.body)?;
    check_eq!(
        (kept.get("pattern").cloned(), kept.get("definition").cloned()),
        (Some(json!("^nothing-matches$")), Some(json!({ "message-ttl": 5 }))),
        "policy after the refused update"
    );
    Ok(())
}

pub(super) async fn http_queue_counts(ctx: Ctx) -> CaseResult {
    let s = dk::setup(&ctx, &[]).await?;
    let policy = ctx.set_policy(&exact(&s.source), "queues", 0, r#"{"message-ttl":600000}"#).await?;
    publish_all(&ctx, &s.conn, &s.source, &["m1", "m2", "m3"]).await?;
    let mut t = Taker::open(&ctx, &s.conn, &s.source, 10).await?;
    let got = t.next_n(3).await?;
    if let Some(second) = got.get(1) {
        t.settle(second, How::Reject).await?;
    }
    dk::eventually_ready(&s.ch, &s.dlq, 1).await?;
    ctx.expect_queue_counts(&s.source, (2, 0, 2)).await?;
    // RabbitMQ shows a quorum queue's policy with its next stats refresh.
    let expected = (Some(json!(policy)), Some(json!({ "message-ttl": 600000 })));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(6);
    loop {
        let info = ctx.queue_info(&s.source).await?;
        let shown = (info.get("policy").cloned(), info.get("effective_policy_definition").cloned());
        if shown == expected {
            break;
        }
        crate::check!(
            tokio::time::Instant::now() < deadline,
            "policy shown for the queue: expected {expected:?} got {shown:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    t.close().await;
    Ok(())
}
