//! Topic exchange pattern matching: `*` is exactly one word, `#` is zero or more words.

use crate::{
    Case, CaseResult, Ctx, case_matrix, check_eq,
    lapin_kit::queue_bound,
    wire::{Publisher, drain},
};
use lapin::{ExchangeKind, options::ExchangeDeclareOptions, types::FieldTable};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case_matrix!(
            "routing.topic.star_matches_one_word",
            "`a.*.c` matches exactly one word in the middle",
            star_one_word
        ),
        case_matrix!(
            "routing.topic.star_not_zero_words",
            "`a.*` does not match `a`, `*` alone does not match two words",
            star_not_zero
        ),
        case_matrix!(
            "routing.topic.hash_alone_matches_everything",
            "`#` matches every key, including the empty key",
            hash_alone
        ),
        case_matrix!(
            "routing.topic.hash_matches_zero_words",
            "`a.#` matches `a` itself (zero words) and any longer key",
            hash_zero_words
        ),
        case_matrix!("routing.topic.hash_prefix", "`#.a` matches `a`, `x.a`, `x.y.a` and not `a.x`", hash_prefix),
        case_matrix!("routing.topic.hash_middle", "`a.#.b` matches `a.b`, `a.x.b`, `a.x.y.b`", hash_middle),
        case_matrix!(
            "routing.topic.empty_words",
            "empty words (`a..b`) are words: `a.*.b` matches `a..b`",
            empty_words
        ),
        case_matrix!(
            "routing.topic.empty_key",
            "the empty key has zero words: matched by `` and `#`, not by `*`",
            empty_key
        ),
        case_matrix!(
            "routing.topic.literal_exact",
            "a pattern without wildcards matches only the identical key",
            literal
        ),
        case_matrix!(
            "routing.topic.overlapping_bindings_one_copy",
            "a queue whose two patterns both match gets one copy",
            overlapping
        ),
        case_matrix!(
            "routing.topic.hash_star_combo",
            "`#.*` needs at least one word (so not the empty key); `*.#.*` needs at least two",
            hash_star_combo
        ),
    ]
}

/// Binds one queue with `patterns`, publishes `keys` (body = key) and checks what arrived.
async fn topic(ctx: &Ctx, patterns: &[&str], keys: &[&str], expected: &[&str]) -> CaseResult {
    let (c, ch) = ctx.lapin_channel().await?;
    let x = ctx.exchange("t");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let q = ctx.queue("q");
    for (i, p) in patterns.iter().enumerate() {
        if i == 0 {
            queue_bound(&ch, &q, &x, p).await?;
        } else {
            crate::lapin_kit::bind(&ch, &q, &x, p, FieldTable::default()).await?;
        }
    }
    let mut publisher = Publisher::open(ctx, &c).await?;
    for k in keys {
        publisher.publish(&x, k, k.as_bytes()).await?;
    }
    publisher.close().await;
    let want: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
    check_eq!(drain(ctx, &ch, &q).await?, want, "keys routed by {patterns:?}");
    Ok(())
}

async fn star_one_word(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["a.*.c"], &["a.b.c", "a.c", "a.b.b.c", "a.xyz.c", "b.b.c", "a.b.c.d"], &["a.b.c", "a.xyz.c"]).await
}

async fn star_not_zero(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["a.*"], &["a", "a.b", "a.b.c", "b.a"], &["a.b"]).await?;
    topic(&ctx, &["*"], &["a", "a.b", "xyz"], &["a", "xyz"]).await
}

async fn hash_alone(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["#"], &["a", "a.b.c", "", "..", "#"], &["a", "a.b.c", "", "..", "#"]).await
}

async fn hash_zero_words(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["a.#"], &["a", "a.b", "a.b.c", "b", "ab", "b.a"], &["a", "a.b", "a.b.c"]).await
}

async fn hash_prefix(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["#.a"], &["a", "x.a", "x.y.a", "a.x", "xa"], &["a", "x.a", "x.y.a"]).await
}

async fn hash_middle(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["a.#.b"], &["a.b", "a.x.b", "a.x.y.b", "a.x", "x.a.b", "a.b.x"], &["a.b", "a.x.b", "a.x.y.b"]).await
}

async fn empty_words(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["a.*.b"], &["a..b", "a.b", "a.x.b", "a...b"], &["a..b", "a.x.b"]).await
}

async fn empty_key(ctx: Ctx) -> CaseResult {
    topic(&ctx, &[""], &["", "a", "."], &[""]).await?;
    // RabbitMQ splits "" into zero words (not one empty word), so `*` does not match it,
    // while "." is two empty words.
    topic(&ctx, &["*"], &["", ".", "a"], &["a"]).await?;
    topic(&ctx, &["*.*"], &["", ".", "a."], &[".", "a."]).await
}

async fn literal(ctx: Ctx) -> CaseResult {
    topic(
        &ctx,
        &["stock.usd.nyse"],
        &["stock.usd.nyse", "stock.usd", "stock.usd.nyse.x", "Stock.usd.nyse"],
        &["stock.usd.nyse"],
    )
    .await
}

async fn overlapping(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["a.*", "*.b", "#"], &["a.b", "c.d"], &["a.b", "c.d"]).await
}

async fn hash_star_combo(ctx: Ctx) -> CaseResult {
    topic(&ctx, &["#.*"], &["", "a", "a.b"], &["a", "a.b"]).await?;
    topic(&ctx, &["*.#.*"], &["a", "a.b", "a.b.c"], &["a.b", "a.b.c"]).await
}
