//! Headers exchange matching: `x-match` all / any / all-with-x / any-with-x, typed values.
//!
//! These cases use amqprs so the binding arguments and message headers go through a codec
//! independent of the broker's.

use crate::{
    Case, CaseResult, Ctx,
    amqprs_kit::{self as ak, s, table},
    case, check_eq,
};
use amqprs::{
    BasicProperties, FieldTable, FieldValue,
    channel::{ConfirmSelectArguments, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!("routing.headers.all", "x-match=all needs every binding header present and equal", ["amqprs"], all),
        case!("routing.headers.any", "x-match=any needs one binding header present and equal", ["amqprs"], any),
        case!(
            "routing.headers.all_ignores_x_args",
            "x-match=all ignores x- binding arguments",
            ["amqprs"],
            all_ignores_x
        ),
        case!(
            "routing.headers.any_ignores_x_args",
            "x-match=any ignores x- binding arguments and x- message headers",
            ["amqprs"],
            any_ignores_x
        ),
        case!(
            "routing.headers.all_with_x",
            "x-match=all-with-x also requires the x- binding arguments",
            ["amqprs"],
            all_with_x
        ),
        case!(
            "routing.headers.any_with_x",
            "x-match=any-with-x lets an x- argument alone match",
            ["amqprs"],
            any_with_x
        ),
        case!(
            "routing.headers.int_types_compare_by_value",
            "integer headers of different widths match by value; a string never matches an int",
            ["amqprs"],
            int_types
        ),
        case!("routing.headers.bool_values", "boolean binding values match only the same boolean", ["amqprs"], bools),
        case!(
            "routing.headers.void_means_presence",
            "a void binding value matches any value of that header",
            ["amqprs"],
            void_presence
        ),
        case!(
            "routing.headers.no_args_matches_all",
            "a binding with no arguments matches every message, with or without headers",
            ["amqprs"],
            no_args
        ),
        case!("routing.headers.default_is_all", "without x-match the binding behaves as all", ["amqprs"], default_all),
    ]
}

/// Binds one queue with `binding`, publishes `(body, headers)` pairs, checks what arrived.
async fn run(ctx: &Ctx, binding: FieldTable, msgs: Vec<(&str, Option<FieldTable>)>, expected: &[&str]) -> CaseResult {
    let conn = ctx.amqprs().await?;
    let (ch, mut ev) = ak::channel(&conn).await?;
    let x = ctx.exchange("h");
    let q = ctx.queue("q");
    ch.exchange_declare(ExchangeDeclareArguments::new(&x, "headers")).await?;
    ch.queue_declare(QueueDeclareArguments::new(&q)).await?;
    let mut bind = QueueBindArguments::new(&q, &x, "");
    bind.arguments = binding;
    ch.queue_bind(bind).await?;
    ch.confirm_select(ConfirmSelectArguments::new(false)).await?;
    let n = msgs.len() as u64;
    for (body, headers) in msgs {
        let mut props = BasicProperties::default();
        if let Some(h) = headers {
            props.with_headers(h);
        }
        ak::publish(&ch, &x, "ignored", props, body.as_bytes().to_vec()).await?;
    }
    ak::wait_acks(&mut ev, n).await?;
    let want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
    check_eq!(ak::drain(&ch, &q).await?, want, "messages routed");
    Ok(())
}

fn int(v: i32) -> FieldValue {
    FieldValue::I(v)
}

async fn all(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("all")), ("a", s("1")), ("b", int(2))]);
    let msgs = vec![
        ("both", Some(table(vec![("a", s("1")), ("b", int(2))]))),
        ("only-a", Some(table(vec![("a", s("1"))]))),
        ("both-plus", Some(table(vec![("a", s("1")), ("b", int(2)), ("c", int(3))]))),
        ("b-wrong", Some(table(vec![("a", s("1")), ("b", int(3))]))),
        ("none", None),
    ];
    run(&ctx, b, msgs, &["both", "both-plus"]).await
}

async fn any(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("any")), ("a", s("1")), ("b", int(2))]);
    let msgs = vec![
        ("a", Some(table(vec![("a", s("1"))]))),
        ("b", Some(table(vec![("b", int(2))]))),
        ("a-wrong", Some(table(vec![("a", s("2"))]))),
        ("empty", Some(table(vec![]))),
        ("none", None),
    ];
    run(&ctx, b, msgs, &["a", "b"]).await
}

async fn all_ignores_x(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("all")), ("x-foo", s("bar")), ("a", s("1"))]);
    let msgs = vec![
        ("a-only", Some(table(vec![("a", s("1"))]))),
        ("x-wrong", Some(table(vec![("a", s("1")), ("x-foo", s("baz"))]))),
        ("x-only", Some(table(vec![("x-foo", s("bar"))]))),
    ];
    run(&ctx, b, msgs, &["a-only", "x-wrong"]).await
}

async fn any_ignores_x(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("any")), ("x-foo", s("bar")), ("a", s("1"))]);
    let msgs = vec![("x-only", Some(table(vec![("x-foo", s("bar"))]))), ("a", Some(table(vec![("a", s("1"))])))];
    run(&ctx, b, msgs, &["a"]).await
}

async fn all_with_x(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("all-with-x")), ("x-foo", s("bar")), ("a", s("1"))]);
    let msgs = vec![
        ("a-only", Some(table(vec![("a", s("1"))]))),
        ("both", Some(table(vec![("a", s("1")), ("x-foo", s("bar"))]))),
        ("x-wrong", Some(table(vec![("a", s("1")), ("x-foo", s("baz"))]))),
    ];
    run(&ctx, b, msgs, &["both"]).await
}

async fn any_with_x(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("any-with-x")), ("x-foo", s("bar")), ("a", s("1"))]);
    let msgs = vec![
        ("x-only", Some(table(vec![("x-foo", s("bar"))]))),
        ("x-wrong", Some(table(vec![("x-foo", s("baz"))]))),
        ("a", Some(table(vec![("a", s("1"))]))),
    ];
    run(&ctx, b, msgs, &["x-only", "a"]).await
}

async fn int_types(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("all")), ("n", int(1))]);
    let msgs = vec![
        ("long", Some(table(vec![("n", FieldValue::l(1))]))),
        ("short", Some(table(vec![("n", FieldValue::s(1))]))),
        ("byte", Some(table(vec![("n", FieldValue::b(1))]))),
        ("string", Some(table(vec![("n", s("1"))]))),
        ("other", Some(table(vec![("n", int(2))]))),
        ("same", Some(table(vec![("n", int(1))]))),
    ];
    run(&ctx, b, msgs, &["long", "short", "byte", "same"]).await
}

async fn bools(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("all")), ("flag", FieldValue::t(true))]);
    let msgs = vec![
        ("true", Some(table(vec![("flag", FieldValue::t(true))]))),
        ("false", Some(table(vec![("flag", FieldValue::t(false))]))),
        ("string", Some(table(vec![("flag", s("true"))]))),
        ("int", Some(table(vec![("flag", int(1))]))),
    ];
    run(&ctx, b, msgs, &["true"]).await
}

async fn void_presence(ctx: Ctx) -> CaseResult {
    let b = table(vec![("x-match", s("all")), ("p", FieldValue::V)]);
    let msgs = vec![
        ("string", Some(table(vec![("p", s("anything"))]))),
        ("int", Some(table(vec![("p", int(7))]))),
        ("void", Some(table(vec![("p", FieldValue::V)]))),
        ("missing", Some(table(vec![("q", s("x"))]))),
    ];
    run(&ctx, b, msgs, &["string", "int", "void"]).await
}

async fn no_args(ctx: Ctx) -> CaseResult {
    let msgs = vec![("with", Some(table(vec![("a", s("1"))]))), ("without", None)];
    run(&ctx, FieldTable::new(), msgs, &["with", "without"]).await
}

async fn default_all(ctx: Ctx) -> CaseResult {
    let b = table(vec![("a", s("1")), ("b", s("2"))]);
    let msgs = vec![("a", Some(table(vec![("a", s("1"))]))), ("ab", Some(table(vec![("a", s("1")), ("b", s("2"))])))];
    run(&ctx, b, msgs, &["ab"]).await
}
