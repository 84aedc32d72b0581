//! Exchange declaration, deletion, built-in exchanges, e2e bindings, alternate exchanges.

use crate::{
    Case, CaseResult, Ctx, amqprs_kit as ak, case, check, check_eq,
    lapin_kit::{self as lk, bind, confirm, declare_queue, drain, publish, queue_bound},
};
use amqprs::channel::{ExchangeDeclareArguments, ExchangeDeleteArguments};
use lapin::{
    ExchangeKind,
    options::{ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, ExchangeUnbindOptions},
    types::{AMQPValue, FieldTable},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "exchange.local_random",
            "x-local-random (RabbitMQ 4.0): each message goes to one bound queue, picked at random; bindings \
             must have an empty key and lead to a classic queue",
            local_random
        ),
        case!(
            "exchange.declare.all_types",
            "direct, fanout, topic and headers exchanges can be declared and passively re-declared",
            declare_all_types
        ),
        case!(
            "exchange.default.routes_by_queue_name",
            "the default exchange delivers to the queue named by the routing key",
            default_exchange
        ),
        case!(
            "exchange.builtin.exist",
            "amq.direct, amq.fanout, amq.topic, amq.headers and amq.match exist (passive declare)",
            builtin_exist
        ),
        case!(
            "exchange.passive.missing_404",
            "passive declare of a missing exchange closes the channel with 404",
            passive_missing
        ),
        case!(
            "exchange.redeclare.type_406",
            "redeclaring with another type closes the channel with 406 inequivalent arg 'type'",
            redeclare_type
        ),
        case!(
            "exchange.redeclare.durable_406",
            "redeclaring with other durability closes the channel with 406 inequivalent arg 'durable'",
            redeclare_durable
        ),
        case!("exchange.declare.amq_prefix_403", "declaring an exchange named amq.* is refused with 403", amq_prefix),
        case!(
            "exchange.delete.removes",
            "a deleted exchange is gone (passive declare then fails with 404)",
            delete_removes
        ),
        case!("exchange.delete.missing_ok", "deleting a missing exchange succeeds (delete-ok)", delete_missing),
        case!(
            "exchange.delete.if_unused_406",
            "delete if-unused of an exchange with a binding closes the channel with 406",
            delete_if_unused
        ),
        case!(
            "exchange.bind.chained_routing",
            "exchange.bind routes from the source exchange through the destination to its queues",
            e2e_chain
        ),
        case!("exchange.unbind.stops_routing", "exchange.unbind stops the source-to-destination flow", e2e_unbind),
        case!(
            "exchange.bind.no_duplicate_delivery",
            "a queue reachable over two paths from one publish gets one copy",
            e2e_no_dup
        ),
        case!(
            "exchange.alternate.unroutable_goes_to_ae",
            "a message no binding matches goes to the alternate-exchange",
            ae_unroutable
        ),
        case!(
            "exchange.alternate.routable_skips_ae",
            "a routable message does not reach the alternate-exchange",
            ae_routable
        ),
        case!(
            "exchange.alternate.by_policy",
            "a policy's alternate-exchange (apply-to exchanges) takes what the exchange cannot route; \
             removing the policy stops it",
            ae_by_policy
        ),
        case!(
            "exchange.alternate.argument_wins_over_policy",
            "an exchange's own alternate-exchange argument wins over a policy's",
            ae_argument_wins
        ),
        case!(
            "exchange.internal.publish_403",
            "publishing to an internal exchange closes the channel with 403",
            internal_publish
        ),
        case!(
            "exchange.internal.reachable_via_binding",
            "an internal exchange still receives messages over an exchange binding",
            internal_via_bind
        ),
        case!(
            "exchange.publish.missing_404",
            "publishing to a missing exchange closes the channel with 404",
            publish_missing
        ),
        case!(
            "exchange.auto_delete.after_last_unbind",
            "an auto-delete exchange disappears when its last binding is removed",
            auto_delete_exchange
        ),
    ]
}

async fn declare_all_types(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    for (label, kind) in [
        ("direct", ExchangeKind::Direct),
        ("fanout", ExchangeKind::Fanout),
        ("topic", ExchangeKind::Topic),
        ("headers", ExchangeKind::Headers),
    ] {
        let name = ctx.exchange(label);
        ch.exchange_declare(
            name.as_str().into(),
            kind.clone(),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await?;
        ch.exchange_declare(
            name.as_str().into(),
            kind.clone(),
            ExchangeDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
        // An identical active redeclare is a no-op, not an error.
        ch.exchange_declare(name.as_str().into(), kind, ExchangeDeclareOptions::default(), FieldTable::default())
            .await?;
    }
    Ok(())
}

async fn local_random(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let x = ctx.exchange("lr");
    let kind = ExchangeKind::Custom("x-local-random".into());
    ch.exchange_declare(x.as_str().into(), kind, ExchangeDeclareOptions::default(), FieldTable::default()).await?;
    let queues: Vec<String> = (0..3).map(|i| ctx.queue(&format!("q{i}"))).collect();
    for q in &queues {
        queue_bound(&ch, q, &x, "").await?;
    }
    confirm(&ch).await?;
    for i in 0..60 {
        publish(&ch, &x, &format!("key-{i}"), format!("m{i}").as_bytes()).await?;
    }
    let mut total = 0;
    for q in &queues {
        let got = drain(&ch, q).await?;
        check!(!got.is_empty(), "queue {q} got none of 60 (each goes to one queue at random)");
        total += got.len();
    }
    check_eq!(total, 60, "messages routed, each to one queue");
    // A non-empty key, a quorum queue and an exchange are refused as bindings.
    let keyed = ctx.queue("keyed");
    declare_queue(&ch, &keyed).await?;
    lk::expect_error(
        bind_raw(&ch, &keyed, &x, "k").await,
        406,
        "PRECONDITION_FAILED - Non empty binding 'k' key not permitted",
    )?;
    let ch = conn.create_channel().await?;
    let quorum = ctx.queue("quorum");
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    ch.queue_declare(
        quorum.as_str().into(),
        lapin::options::QueueDeclareOptions { durable: true, ..Default::default() },
        args,
    )
    .await?;
    lk::expect_error(
        bind_raw(&ch, &quorum, &x, "").await,
        406,
        "PRECONDITION_FAILED - Queue type rabbit_quorum_queue not valid for this exchange type",
    )?;
    let ch = conn.create_channel().await?;
    let other = ctx.exchange("other");
    ch.exchange_declare(
        other.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let refused = ch
        .exchange_bind(
            other.as_str().into(),
            x.as_str().into(),
            "".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    lk::expect_error(refused, 406, "PRECONDITION_FAILED - Destination not found")
}

/// `queue.bind` with lapin's own result, for the refusals.
async fn bind_raw(ch: &lapin::Channel, queue: &str, exchange: &str, key: &str) -> lapin::Result<()> {
    ch.queue_bind(queue.into(), exchange.into(), key.into(), Default::default(), FieldTable::default()).await
}

async fn default_exchange(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let q = ctx.queue("q");
    declare_queue(&ch, &q).await?;
    publish(&ch, "", &q, b"hello").await?;
    publish(&ch, "", &format!("{q}-other"), b"elsewhere").await?;
    check_eq!(drain(&ch, &q).await?, vec!["hello".to_owned()], "bodies in queue");
    Ok(())
}

async fn builtin_exist(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    for (name, kind) in [
        ("amq.direct", ExchangeKind::Direct),
        ("amq.fanout", ExchangeKind::Fanout),
        ("amq.topic", ExchangeKind::Topic),
        ("amq.headers", ExchangeKind::Headers),
        ("amq.match", ExchangeKind::Headers),
    ] {
        ch.exchange_declare(
            name.into(),
            kind,
            ExchangeDeclareOptions { passive: true, durable: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .map_err(|e| crate::CaseError::from(e).context(name))?;
    }
    Ok(())
}

async fn passive_missing(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.name("missing");
    ak::expect_call_close(
        ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct").passive(true).finish()),
        &mut ev,
        404,
        &format!("NOT_FOUND - no exchange '{x}' in vhost '/'"),
        40,
        10,
    )
    .await
}

async fn redeclare_type(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    ak::expect_call_close(
        ch.exchange_declare(ExchangeDeclareArguments::new(&x, "fanout")),
        &mut ev,
        406,
        &format!("PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{x}' in vhost '/': received 'fanout' but current is 'direct'"),
        40,
        10,
    )
    .await
}

async fn redeclare_durable(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "topic")).await?;
    ak::expect_call_close(
        ch.exchange_declare(ExchangeDeclareArguments::new(&x, "topic").durable(true).finish()),
        &mut ev,
        406,
        &format!("PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{x}' in vhost '/': received 'true' but current is 'false'"),
        40,
        10,
    )
    .await
}

async fn amq_prefix(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = format!("amq.{}", ctx.name("x"));
    ak::expect_call_close(
        ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")),
        &mut ev,
        403,
        &format!("ACCESS_REFUSED - exchange name '{x}' contains reserved prefix 'amq.*'"),
        40,
        10,
    )
    .await
}

async fn delete_removes(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default()).await?;
    let res = ch
        .exchange_declare(
            x.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await;
    lk::expect_error(res, 404, &format!("NOT_FOUND - no exchange '{x}' in vhost '/'"))
}

async fn delete_missing(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    ch.exchange_delete(ExchangeDeleteArguments::new(&ctx.name("never"))).await?;
    ev.quiet(lk::QUIET).await?;
    // The channel is still usable.
    ch.exchange_declare(ExchangeDeclareArguments::new("amq.direct", "direct").passive(true).finish()).await?;
    Ok(())
}

async fn delete_if_unused(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("x");
    let q = ctx.queue("q");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "direct")).await?;
    ch.queue_declare(amqprs::channel::QueueDeclareArguments::new(&q)).await?;
    ch.queue_bind(amqprs::channel::QueueBindArguments::new(&q, &x, "k")).await?;
    let mut del = ExchangeDeleteArguments::new(&x);
    del.if_unused = true;
    ak::expect_call_close(
        ch.exchange_delete(del),
        &mut ev,
        406,
        &format!("PRECONDITION_FAILED - exchange '{x}' in vhost '/' in use"),
        40,
        20,
    )
    .await
}

async fn e2e_setup(ctx: &Ctx, ch: &lapin::Channel) -> Result<(String, String, String), crate::CaseError> {
    let src = ctx.exchange("src");
    let dst = ctx.exchange("dst");
    let q = ctx.queue("q");
    ch.exchange_declare(
        src.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.exchange_declare(
        dst.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    queue_bound(ch, &q, &dst, "").await?;
    ch.exchange_bind(
        dst.as_str().into(),
        src.as_str().into(),
        "k".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    Ok((src, dst, q))
}

async fn e2e_chain(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (src, _dst, q) = e2e_setup(&ctx, &ch).await?;
    publish(&ch, &src, "k", b"via-binding").await?;
    publish(&ch, &src, "other", b"not-bound-key").await?;
    check_eq!(drain(&ch, &q).await?, vec!["via-binding".to_owned()], "bodies in queue behind the destination");
    Ok(())
}

async fn e2e_unbind(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (src, dst, q) = e2e_setup(&ctx, &ch).await?;
    publish(&ch, &src, "k", b"before").await?;
    ch.exchange_unbind(
        dst.as_str().into(),
        src.as_str().into(),
        "k".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    publish(&ch, &src, "k", b"after").await?;
    check_eq!(drain(&ch, &q).await?, vec!["before".to_owned()], "bodies in queue");
    Ok(())
}

async fn e2e_no_dup(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (src, _dst, q) = e2e_setup(&ctx, &ch).await?;
    // Second path: the queue is also bound to the source directly.
    bind(&ch, &q, &src, "k", FieldTable::default()).await?;
    publish(&ch, &src, "k", b"once").await?;
    check_eq!(drain(&ch, &q).await?, vec!["once".to_owned()], "copies in queue");
    Ok(())
}

async fn ae_setup(ctx: &Ctx, ch: &lapin::Channel) -> Result<(String, String, String), crate::CaseError> {
    let ae = ctx.exchange("ae");
    let x = ctx.exchange("x");
    let aeq = ctx.queue("aeq");
    let q = ctx.queue("q");
    ch.exchange_declare(
        ae.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let mut args = FieldTable::default();
    args.insert("alternate-exchange".into(), AMQPValue::LongString(ae.as_str().into()));
    ch.exchange_declare(x.as_str().into(), ExchangeKind::Direct, ExchangeDeclareOptions::default(), args).await?;
    queue_bound(ch, &aeq, &ae, "").await?;
    queue_bound(ch, &q, &x, "bound").await?;
    Ok((x, q, aeq))
}

async fn ae_unroutable(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (x, q, aeq) = ae_setup(&ctx, &ch).await?;
    publish(&ch, &x, "nobody", b"lost").await?;
    check_eq!(drain(&ch, &aeq).await?, vec!["lost".to_owned()], "alternate exchange queue");
    check_eq!(drain(&ch, &q).await?, Vec::<String>::new(), "bound queue");
    Ok(())
}

/// A fanout exchange with a queue bound: an alternate exchange and where its messages land.
async fn fanout_with_queue(ctx: &Ctx, ch: &lapin::Channel, what: &str) -> Result<(String, String), crate::CaseError> {
    let exchange = ctx.exchange(what);
    let queue = ctx.queue(what);
    ch.exchange_declare(
        exchange.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    queue_bound(ch, &queue, &exchange, "").await?;
    Ok((exchange, queue))
}

async fn ae_by_policy(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (ae, aeq) = fanout_with_queue(&ctx, &ch, "ae").await?;
    let x = ctx.exchange("x");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let policy =
        ctx.set_policy(&format!("^{x}$"), "exchanges", 0, &format!(r#"{{"alternate-exchange":"{ae}"}}"#)).await?;
    publish(&ch, &x, "nobody", b"caught").await?;
    check_eq!(drain(&ch, &aeq).await?, vec!["caught".to_owned()], "the policy's alternate exchange");
    ctx.delete_policy(&policy).await?;
    publish(&ch, &x, "nobody", b"lost").await?;
    check_eq!(drain(&ch, &aeq).await?, Vec::<String>::new(), "after the policy is gone");
    Ok(())
}

async fn ae_argument_wins(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (by_argument, argument_q) = fanout_with_queue(&ctx, &ch, "arg").await?;
    let (by_policy, policy_q) = fanout_with_queue(&ctx, &ch, "pol").await?;
    let x = ctx.exchange("x");
    let mut args = FieldTable::default();
    args.insert("alternate-exchange".into(), AMQPValue::LongString(by_argument.as_str().into()));
    ch.exchange_declare(x.as_str().into(), ExchangeKind::Direct, ExchangeDeclareOptions::default(), args).await?;
    ctx.set_policy(&format!("^{x}$"), "all", 0, &format!(r#"{{"alternate-exchange":"{by_policy}"}}"#)).await?;
    publish(&ch, &x, "nobody", b"m").await?;
    check_eq!(drain(&ch, &argument_q).await?, vec!["m".to_owned()], "the argument's alternate exchange");
    check_eq!(drain(&ch, &policy_q).await?, Vec::<String>::new(), "the policy's alternate exchange");
    Ok(())
}

async fn ae_routable(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let (x, q, aeq) = ae_setup(&ctx, &ch).await?;
    publish(&ch, &x, "bound", b"found").await?;
    check_eq!(drain(&ch, &q).await?, vec!["found".to_owned()], "bound queue");
    check_eq!(drain(&ch, &aeq).await?, Vec::<String>::new(), "alternate exchange queue");
    Ok(())
}

async fn internal_publish(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("internal");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "fanout").internal(true).finish()).await?;
    ak::publish(&ch, &x, "", amqprs::BasicProperties::default(), b"no".to_vec()).await?;
    ev.expect_close().await?.expect(
        403,
        &format!("ACCESS_REFUSED - cannot publish to internal exchange '{x}' in vhost '/'"),
        60,
        40,
    )
}

async fn internal_via_bind(ctx: Ctx) -> CaseResult {
    let (_c, ch) = ctx.lapin_channel().await?;
    confirm(&ch).await?;
    let src = ctx.exchange("src");
    let internal = ctx.exchange("internal");
    let q = ctx.queue("q");
    ch.exchange_declare(
        src.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.exchange_declare(
        internal.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions { internal: true, ..Default::default() },
        FieldTable::default(),
    )
    .await?;
    queue_bound(&ch, &q, &internal, "").await?;
    ch.exchange_bind(
        internal.as_str().into(),
        src.as_str().into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    publish(&ch, &src, "", b"through").await?;
    check_eq!(drain(&ch, &q).await?, vec!["through".to_owned()], "queue behind the internal exchange");
    Ok(())
}

async fn publish_missing(ctx: Ctx) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.name("missing");
    ak::publish(&ch, &x, "k", amqprs::BasicProperties::default(), b"no".to_vec()).await?;
    ev.expect_close().await?.expect(404, &format!("NOT_FOUND - no exchange '{x}' in vhost '/'"), 60, 40)
}

async fn auto_delete_exchange(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let x = ctx.exchange("ad");
    let q = ctx.queue("q");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions { auto_delete: true, ..Default::default() },
        FieldTable::default(),
    )
    .await?;
    queue_bound(&ch, &q, &x, "k").await?;
    ch.queue_unbind(q.as_str().into(), x.as_str().into(), "k".into(), FieldTable::default()).await?;
    let probe = conn.create_channel().await?;
    let res = probe
        .exchange_declare(
            x.as_str().into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await;
    lk::expect_error(res, 404, &format!("NOT_FOUND - no exchange '{x}' in vhost '/'"))
}
