//! Mandatory publishing and basic.return.

use crate::{
    Case, CaseError, CaseResult, Ctx,
    amqprs_kit::{self as ak, ChanEvent, s, table},
    case, check_eq, lapin_kit as lk,
};
use amqprs::{
    BasicProperties,
    channel::{BasicPublishArguments, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "returns.mandatory_no_route_312",
            "a mandatory unroutable message comes back as basic.return 312 NO_ROUTE with properties and body",
            ["amqprs"],
            no_route
        ),
        case!(
            "returns.mandatory_default_exchange_missing_queue",
            "mandatory to the default exchange with no such queue is returned",
            ["amqprs"],
            default_missing
        ),
        case!(
            "returns.mandatory_routed_not_returned",
            "a routable mandatory message is delivered, not returned",
            ["amqprs"],
            routed
        ),
        case!(
            "returns.non_mandatory_dropped_silently",
            "a non-mandatory unroutable message vanishes without any frame",
            ["amqprs"],
            dropped
        ),
        case!(
            "returns.immediate_540",
            "immediate=true closes the connection with 540 NOT_IMPLEMENTED",
            ["amqprs"],
            immediate
        ),
    ]
}

fn mandatory(x: &str, key: &str) -> BasicPublishArguments {
    let mut a = BasicPublishArguments::new(x, key);
    a.mandatory = true;
    a
}

async fn no_route(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    let headers = table(vec![("h", s("v")), ("n", amqprs::FieldValue::l(42))]);
    let props = BasicProperties::default()
        .with_content_type("text/plain")
        .with_message_id("id-1")
        .with_headers(headers.clone())
        .with_priority(3)
        .finish();
    let body: Vec<u8> = (0..=255u8).collect();
    ch.basic_publish(props, body.clone(), mandatory(&x, "nowhere")).await?;
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Return { code, text, exchange, routing_key, props, body: got } => {
            check_eq!((code, text.as_str()), (312, "NO_ROUTE"), "return code and text");
            check_eq!((exchange.as_str(), routing_key.as_str()), (x.as_str(), "nowhere"), "return exchange and key");
            check_eq!(props.content_type().map(String::as_str), Some("text/plain"), "returned content_type");
            check_eq!(props.message_id().map(String::as_str), Some("id-1"), "returned message_id");
            check_eq!(props.headers(), Some(&headers), "returned headers");
            check_eq!(props.priority(), Some(3), "returned priority");
            check_eq!(got, body, "returned body");
            Ok(())
        }
        other => Err(CaseError::new(format!("expected basic.return, got {other:?}"))),
    }
}

async fn default_missing(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let q = ctx.name("nosuchqueue");
    ch.basic_publish(BasicProperties::default(), b"x".to_vec(), mandatory("", &q)).await?;
    match ev.next(lk::ARRIVE).await? {
        ChanEvent::Return { code, text, exchange, routing_key, .. } => {
            check_eq!(
                (code, text.as_str(), exchange.as_str(), routing_key.as_str()),
                (312, "NO_ROUTE", "", q.as_str()),
                "return"
            );
            Ok(())
        }
        other => Err(CaseError::new(format!("expected basic.return, got {other:?}"))),
    }
}

async fn routed(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    let q = ctx.queue("q");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    ch.queue_bind(QueueBindArguments::new(&q, &x, "k")).await?;
    ch.basic_publish(BasicProperties::default(), b"in".to_vec(), mandatory(&x, "k")).await?;
    ev.quiet(lk::QUIET).await?;
    check_eq!(ak::drain(&ch, &q).await?, vec!["in".to_owned()], "queue contents");
    Ok(())
}

async fn dropped(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    ak::publish(&ch, &x, "nowhere", BasicProperties::default(), b"gone".to_vec()).await?;
    ev.quiet(lk::QUIET).await?;
    // The channel still works.
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    Ok(())
}

async fn immediate(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let mut cev = ak::connection_events(&conn).await?;
    let (ch, _ev) = ak::channel(&conn).await?;
    let q = ctx.queue("q");
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let mut a = BasicPublishArguments::new("", &q);
    a.immediate = true;
    ch.basic_publish(BasicProperties::default(), b"now".to_vec(), a).await?;
    cev.expect_close().await?.expect(540, "NOT_IMPLEMENTED - immediate=true", 60, 40)
}
