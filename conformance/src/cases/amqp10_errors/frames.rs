//! Input the frame reader refuses: performatives that are not lists, truncated or with a field of
//! the wrong type, bad frame headers, frames at and over max-frame-size, a second open, and the
//! close after such an error.

use std::time::Duration;

use super::kit::{Bystanders, reaction, sender, transfer};
use crate::{
    CaseError, CaseResult, Ctx,
    cases::amqp10_attach::session,
    check, check_eq,
    lapin_kit::QUIET,
    raw10::{
        Msg, WAIT,
        codec::{self, TYPE_AMQP},
        conn::default_open,
        link::{error_parts, outcome},
    },
};

/// Opens the bystanders and a raw session, sends `bytes`, and returns the reaction.
async fn bad_bytes(ctx: &Ctx, bytes: &[u8], wait: Duration) -> Result<(Vec<String>, Bystanders), CaseError> {
    let by = Bystanders::open(ctx).await?;
    let mut c = session(ctx).await?;
    c.send(bytes).await?;
    let r = reaction(&mut c, wait).await?;
    Ok((r, by))
}

/// The prefix of a Reader error close: RabbitMQ appends `\n` and a stack trace.
fn reader_error(what: &str) -> String {
    format!("close(amqp:internal-error: Reader error: {what}\u{2026})")
}

pub(super) async fn not_a_list(ctx: Ctx) -> CaseResult {
    let body = [0x00, 0x53, 0x13, 0xa1, 0x03, b'a', b'b', b'c'];
    let (r, by) = bad_bytes(&ctx, &codec::frame(TYPE_AMQP, 0, &body), WAIT).await?;
    check_eq!(r, vec![reader_error("function_clause"), "open".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn truncated(ctx: Ctx) -> CaseResult {
    // list8 announcing 32 bytes and 5 fields, but only 3 bytes follow.
    let body = [0x00, 0x53, 0x13, 0xc0, 0x20, 0x05, 0x43, 0x70];
    let (r, by) = bad_bytes(&ctx, &codec::frame(TYPE_AMQP, 0, &body), WAIT).await?;
    check_eq!(r, vec![reader_error("{primitive_type_unsupported,192,{position,0}}"), "open".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn wrong_field_type(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    let next_incoming = c.sessions.get(&0).map(|s| s.next_incoming).unwrap_or_default();
    // flow [next-incoming-id (uint), incoming-window 100, next-outgoing-id 0,
    //       outgoing-window 100, handle "x"]
    let mut fields = vec![0x70];
    fields.extend_from_slice(&next_incoming.to_be_bytes());
    fields.extend_from_slice(&[0x52, 0x64, 0x43, 0x52, 0x64, 0xa1, 0x01, b'x']);
    let mut body = vec![0x00, 0x53, 0x13, 0xc0, u8::try_from(fields.len() + 1).unwrap_or(0), 0x05];
    body.extend_from_slice(&fields);
    c.send(&codec::frame(TYPE_AMQP, 0, &body)).await?;
    let r = reaction(&mut c, WAIT).await?;
    // RabbitMQ's session process crashes (`{case_clause,{utf8,<<"x">>}}` and a stack trace):
    // only the condition and that the session, not the connection, ends are checked.
    let ended = r.len() == 1 && r.first().is_some_and(|l| l.starts_with("end(amqp:internal-error: "));
    check!(ended, "reaction: expected [\"end(amqp:internal-error: ...)\"] got {r:?}");
    c.begin(1).await?;
    c.close().await?;
    by.check().await
}

pub(super) async fn size_below_8(ctx: Ctx) -> CaseResult {
    let (r, by) = bad_bytes(&ctx, &[0, 0, 0, 4, 2, TYPE_AMQP, 0, 0], WAIT).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn doff_past_end(ctx: Ctx) -> CaseResult {
    // 12 bytes in all, but the body would start at byte 16.
    let (r, by) = bad_bytes(&ctx, &[0, 0, 0, 12, 4, TYPE_AMQP, 0, 0, 0x00, 0x53, 0x17, 0x45], WAIT).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn unknown_type(ctx: Ctx) -> CaseResult {
    let (r, by) = bad_bytes(&ctx, &codec::frame(5, 0, &[0x00, 0x53, 0x17, 0x45]), WAIT).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    by.check().await
}

/// A transfer frame on handle 0 whose total size is exactly `size` bytes: a data section
/// padded to fit.
fn sized_transfer(size: usize) -> Result<Vec<u8>, CaseError> {
    let t = transfer(0, Some(0));
    let probe = codec::perf(0, &t, &Msg::new().data(&[0; 1000]).encode()?)?;
    let overhead = probe.len() - 1000;
    let data = vec![7u8; size.saturating_sub(overhead)];
    let f = codec::perf(0, &t, &Msg::new().data(&data).encode()?)?;
    check!(f.len() == size, "built a {}-byte frame instead of {size}", f.len());
    Ok(f)
}

pub(super) async fn at_max_size(ctx: Ctx) -> CaseResult {
    let mut c = sender(&ctx).await?;
    c.send(&sized_transfer(131_072)?).await?;
    let d = c.expect_disposition(0, 0).await?;
    check_eq!(outcome(&d.state), "accepted", "outcome of a max-size frame");
    c.close().await
}

pub(super) async fn one_over_max(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    c.send(&sized_transfer(131_073)?).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(
        r,
        vec![
            "close(amqp:connection:framing-error: frame size (131073 bytes) > maximum frame size (131072 bytes))"
                .to_owned(),
            // The reader goes on reading frame headers right after the refused one: the
            // frame's own body, whose bytes make a header of an unknown frame type.
            "eof".to_owned()
        ],
        "reaction"
    );
    by.check().await
}

pub(super) async fn second_open(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &default_open(ctx.broker())).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec![reader_error("function_clause"), "open".to_owned()], "reaction");
    by.check().await
}

pub(super) async fn close_after_error(ctx: Ctx) -> CaseResult {
    let mut c = session(&ctx).await?;
    c.perf(0, &default_open(ctx.broker())).await?;
    let first = c.expect_close(WAIT).await?;
    let (cond, _) = error_parts(&first);
    check_eq!(cond, "amqp:internal-error", "condition of the first close");
    c.perf(0, &fe2o3_amqp_types::performatives::Close { error: None }).await?;
    let r = reaction(&mut c, QUIET).await?;
    // Whether the socket then stays open until the broker's closing timer (RabbitMQ) or goes
    // at once makes no difference to a client that has closed.
    check_eq!(r.first().map(String::as_str), Some("close()"), "answer to the client's close (then {r:?})");
    Ok(())
}
