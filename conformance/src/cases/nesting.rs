//! Field tables nested deep in a 0.9.1 method. RabbitMQ 4.0.5 follows any depth that fits in a
//! frame (declare-ok at 10,000 levels, observed); Charon bounds nesting at 64 levels, the depth
//! its store reads back, and refuses deeper input with 501 like any undecodable method — a
//! deliberate difference: before the bound, such a frame overflowed the broker's stack.

use crate::{
    Case, CaseError, CaseResult, Ctx, case,
    lapin_kit::Healthy,
    raw::{self, Enc, RawConn},
};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "connection.frame.nested_tables_at_limit",
            "a queue.declare whose arguments nest tables 64 levels deep is declared",
            ["raw"],
            at_limit
        ),
        case!(
            "connection.frame.nested_tables_too_deep_501",
            "arguments nested 10,000 tables deep close the connection with 501 FRAME_ERROR",
            ["raw"],
            too_deep
        )
        .deliberate(
            "RabbitMQ 4.0.5 declares the queue; Charon bounds nesting at 64 levels (its store's bound) \
             instead of following it down the stack",
        ),
    ]
}

/// An exclusive `queue.declare` of `name` with the nested arguments.
fn declare(name: &str, tables: u32) -> Vec<u8> {
    let args = Enc::new().u16(0).shortstr(name).u8(0x04).bytes(&raw::nested_table(tables)).done();
    raw::method(1, 50, 10, &args)
}

async fn at_limit(ctx: Ctx) -> CaseResult {
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&declare(&ctx.queue("nested"), 63)).await?;
    c.expect_method(1, 50, 11).await?;
    Ok(())
}

async fn too_deep(ctx: Ctx) -> CaseResult {
    let healthy = Healthy::open(&ctx).await?;
    let mut c = RawConn::open_with_channel(ctx.broker()).await?;
    c.send(&declare(&ctx.queue("nested"), 10_000)).await?;
    let close = c.expect_connection_close().await?;
    if (close.code, close.class_id, close.method_id) != (501, 50, 10)
        || !close.text.starts_with("FRAME_ERROR - cannot decode <<")
    {
        return Err(CaseError::new(format!("expected 501 FRAME_ERROR cannot decode at 50,10, got {close:?}")));
    }
    healthy.check().await
}
