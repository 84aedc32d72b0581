//! Bad AMQP 1.0 input: malformed performatives and frame headers, frames over the limit,
//! unknown or reused channels and handles, out-of-sequence deliveries. Each case records what
//! RabbitMQ 4.0.5 answers (condition and description) and checks that a 0.9.1 connection and
//! an AMQP 1.0 publisher opened beforehand keep working.

use super::amqp10_attach::{queue, session};
use crate::{
    Case, CaseError, CaseResult, Ctx, case10, check, check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::{self as lk, Healthy, QUIET},
    raw10::{
        Conn10, Msg, WAIT,
        codec::{self, TYPE_AMQP},
        conn::{Body, default_open},
        link::{attach_frame, error_parts, outcome, target_of},
    },
};
use fe2o3_amqp_types::{
    definitions::{Handle, Role, SenderSettleMode},
    messaging::{Accepted, DeliveryState},
    performatives::{Begin, Detach, Disposition, Performative, Transfer},
    primitives::Binary,
};
use std::time::Duration;

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case10!(
            "amqp10.errors.performative_not_a_list",
            "a flow descriptor followed by a string instead of a field list: close amqp:internal-error Reader error",
            not_a_list
        ),
        case10!(
            "amqp10.errors.performative_truncated",
            "a flow whose field list runs past the end of the frame: close amqp:internal-error Reader error",
            truncated
        ),
        case10!(
            "amqp10.errors.performative_wrong_field_type",
            "a flow whose handle is a string ends the session with amqp:internal-error (the connection survives)",
            wrong_field_type
        ),
        case10!(
            "amqp10.errors.frame_size_below_header",
            "a frame header announcing fewer than 8 bytes: the socket is dropped without a close",
            size_below_8
        ),
        case10!(
            "amqp10.errors.frame_doff_past_end",
            "a frame whose data offset points past its end: the socket is dropped without a close",
            doff_past_end
        ),
        case10!(
            "amqp10.errors.frame_unknown_type",
            "an AMQP frame of type 5 after the open: the socket is dropped without a close",
            unknown_type
        ),
        case10!(
            "amqp10.errors.frame_at_max_size_accepted",
            "a transfer frame of exactly max-frame-size (131072) bytes is accepted",
            at_max_size
        ),
        case10!(
            "amqp10.errors.frame_one_byte_over_max",
            "a 131073-byte transfer frame closes with amqp:connection:framing-error",
            one_over_max
        ),
        case10!(
            "amqp10.errors.flow_after_detach",
            "a flow for a handle the client detached ends the session with amqp:session:unattached-handle",
            flow_after_detach
        ),
        case10!(
            "amqp10.errors.detach_unknown_handle",
            "a detach for a handle that was never attached is echoed; the session stays usable",
            detach_unknown
        ),
        case10!(
            "amqp10.errors.disposition_unknown_delivery",
            "a disposition for deliveries never sent is ignored; the session stays usable",
            disposition_unknown
        ),
        case10!(
            "amqp10.errors.disposition_role_sender",
            "a client disposition with role sender when nothing is unsettled ends the session with amqp:internal-error",
            disposition_sender
        ),
        case10!(
            "amqp10.errors.disposition_settled_absent",
            "a receiver disposition without the settled field (default false) is answered like settled=false",
            settled_absent
        )
        .deliberate(
            "RabbitMQ 4.0.5 ends the session with amqp:internal-error {case_clause,undefined}: it reads an absent \
             settled field as neither true nor false. The field defaults to false (AMQP 1.0 2.7.6) and clients \
             such as fe2o3-amqp leave it out, so Charon answers as for settled=false",
        ),
        case10!(
            "amqp10.errors.begin_channel_in_use",
            "a begin on a channel whose session is running ends that session with amqp:internal-error",
            begin_in_use
        ),
        case10!(
            "amqp10.errors.begin_channel_over_max",
            "a begin on a channel above channel-max closes with amqp:connection:framing-error",
            begin_over_max
        ),
        case10!(
            "amqp10.errors.attach_handle_in_use",
            "an attach reusing the handle of an attached link",
            attach_in_use
        ),
        case10!(
            "amqp10.errors.attach_handle_over_max",
            "an attach with a handle above handle-max closes with amqp:connection:framing-error",
            attach_over_max
        ),
        case10!(
            "amqp10.errors.attach_no_session_ignored",
            "an attach on a channel without a session is ignored",
            attach_no_session
        ),
        case10!(
            "amqp10.errors.transfer_delivery_id_gap",
            "a transfer whose delivery-id skips ahead of the session's sequence",
            delivery_id_gap
        ),
        case10!(
            "amqp10.errors.transfer_without_delivery_id",
            "the first transfer of a delivery without a delivery-id",
            no_delivery_id
        ),
        case10!(
            "amqp10.errors.transfer_on_receiving_link",
            "a transfer on the handle of a link the broker sends on ends the session with amqp:session:unattached-handle",
            transfer_on_receiver
        ),
        case10!(
            "amqp10.errors.second_open",
            "an open on an open connection closes with amqp:internal-error Reader error",
            second_open
        ),
        case10!(
            "amqp10.errors.close_after_error_answered",
            "after closing with an error the broker still answers the client's close with a close",
            close_after_error
        ),
    ]
}

/// Wait after a close for the socket to go away (RabbitMQ waits for the client's close).
const AFTER_CLOSE: Duration = Duration::from_secs(1);

/// A 0.9.1 connection and an AMQP 1.0 publisher opened before the bad input, so a case can
/// prove that the rest of the broker keeps working.
struct Bystanders {
    healthy: Healthy,
    conn: Conn10,
    queue: String,
    next_id: u32,
}

impl Bystanders {
    /// Opens both connections and attaches the 1.0 publisher to a fresh queue.
    async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        let healthy = Healthy::open(ctx).await?;
        let queue = queue(ctx).await?;
        let mut conn = session(ctx).await?;
        conn.attach_sender(0, 0, Some(&queue_addr(&queue))).await?;
        Ok(Self { healthy, conn, queue, next_id: 0 })
    }

    /// Both still work: a 0.9.1 round trip and an accepted 1.0 publish.
    async fn check(mut self) -> CaseResult {
        self.healthy.check().await?;
        let id = self.next_id;
        self.next_id += 1;
        let state = self.conn.publish(0, 0, id, &Msg::text("bystander").encode()?).await?;
        check_eq!(outcome(&state), "accepted", "publish on the bystander 1.0 connection to {}", self.queue);
        self.conn.close().await
    }
}

/// One line of a reaction: the performative with its error, if any. A description is cut
/// where an Erlang stack trace starts (a line beginning with `[`), marked with `…`.
fn describe(p: &Performative) -> String {
    let err = |e| {
        let (cond, desc) = error_parts(e);
        let desc = desc.unwrap_or_default();
        match desc.split_once("\n[") {
            Some((head, _)) => format!("{cond}: {head}\u{2026}"),
            None if cond.is_empty() => String::new(),
            None => format!("{cond}: {desc}"),
        }
    };
    match p {
        Performative::Close(c) => format!("close({})", err(&c.error)),
        Performative::End(e) => format!("end({})", err(&e.error)),
        Performative::Detach(d) => format!("detach({}, {})", d.handle.0, err(&d.error)),
        Performative::Attach(a) => format!("attach({})", a.handle.0),
        Performative::Begin(b) => format!("begin(remote {:?})", b.remote_channel),
        Performative::Flow(f) => format!("flow({:?})", f.handle.as_ref().map(|h| h.0)),
        Performative::Transfer(t) => format!("transfer({})", t.handle.0),
        Performative::Disposition(d) => format!("disposition({:?}, {}..{:?})", d.role, d.first, d.last),
        Performative::Open(_) => "open".to_owned(),
    }
}

/// Everything the broker sent after the bad input, then `eof` (socket closed), `open`
/// (nothing more within the wait) or `unreadable: ...`. Stops after an `end`.
async fn reaction(c: &mut Conn10, wait: Duration) -> Result<Vec<String>, CaseError> {
    let mut out = Vec::new();
    let mut wait = wait;
    loop {
        match c.read_raw(wait).await {
            Ok(None) => {
                out.push("eof".to_owned());
                return Ok(out);
            }
            Ok(Some(f)) => match f.body {
                Body::Perf(p, _) => {
                    let line = describe(&p);
                    let stop = matches!(*p, Performative::End(_));
                    out.push(if f.channel == 0 { line } else { format!("ch{} {line}", f.channel) });
                    if matches!(*p, Performative::Close(_)) {
                        wait = AFTER_CLOSE;
                    }
                    if stop {
                        return Ok(out);
                    }
                }
                Body::Sasl(s) => out.push(format!("sasl {s:?}")),
                Body::Empty => {}
            },
            Err(e) if e.message().contains("timed out") => {
                out.push("open".to_owned());
                return Ok(out);
            }
            Err(e) => {
                out.push(format!("unreadable: {e}"));
                return Ok(out);
            }
        }
    }
}

/// Opens the bystanders and a raw session, sends `bytes`, and returns the reaction.
async fn bad_bytes(ctx: &Ctx, bytes: &[u8], wait: Duration) -> Result<(Vec<String>, Bystanders), CaseError> {
    let by = Bystanders::open(ctx).await?;
    let mut c = session(ctx).await?;
    c.send(bytes).await?;
    let r = reaction(&mut c, wait).await?;
    Ok((r, by))
}

/// A first transfer frame on `handle` with `delivery_id` (unsettled, tag = the id).
fn transfer(handle: u32, delivery_id: Option<u32>) -> Transfer {
    Transfer {
        handle: Handle(handle),
        delivery_id,
        delivery_tag: Some(Binary::from(delivery_id.unwrap_or(99).to_be_bytes().to_vec())),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// The prefix of a Reader error close: RabbitMQ appends `\n` and a stack trace.
fn reader_error(what: &str) -> String {
    format!("close(amqp:internal-error: Reader error: {what}\u{2026})")
}

async fn not_a_list(ctx: Ctx) -> CaseResult {
    let body = [0x00, 0x53, 0x13, 0xa1, 0x03, b'a', b'b', b'c'];
    let (r, by) = bad_bytes(&ctx, &codec::frame(TYPE_AMQP, 0, &body), WAIT).await?;
    check_eq!(r, vec![reader_error("function_clause"), "open".to_owned()], "reaction");
    by.check().await
}

async fn truncated(ctx: Ctx) -> CaseResult {
    // list8 announcing 32 bytes and 5 fields, but only 3 bytes follow.
    let body = [0x00, 0x53, 0x13, 0xc0, 0x20, 0x05, 0x43, 0x70];
    let (r, by) = bad_bytes(&ctx, &codec::frame(TYPE_AMQP, 0, &body), WAIT).await?;
    check_eq!(r, vec![reader_error("{primitive_type_unsupported,192,{position,0}}"), "open".to_owned()], "reaction");
    by.check().await
}

async fn wrong_field_type(ctx: Ctx) -> CaseResult {
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

async fn size_below_8(ctx: Ctx) -> CaseResult {
    let (r, by) = bad_bytes(&ctx, &[0, 0, 0, 4, 2, TYPE_AMQP, 0, 0], WAIT).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    by.check().await
}

async fn doff_past_end(ctx: Ctx) -> CaseResult {
    // 12 bytes in all, but the body would start at byte 16.
    let (r, by) = bad_bytes(&ctx, &[0, 0, 0, 12, 4, TYPE_AMQP, 0, 0, 0x00, 0x53, 0x17, 0x45], WAIT).await?;
    check_eq!(r, vec!["eof".to_owned()], "reaction");
    by.check().await
}

async fn unknown_type(ctx: Ctx) -> CaseResult {
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

/// A session with a sender link on handle 0 to a fresh queue, ready for a hand-made transfer.
async fn sender(ctx: &Ctx) -> Result<Conn10, CaseError> {
    let q = queue(ctx).await?;
    let mut c = session(ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    Ok(c)
}

async fn at_max_size(ctx: Ctx) -> CaseResult {
    let mut c = sender(&ctx).await?;
    c.send(&sized_transfer(131_072)?).await?;
    let d = c.expect_disposition(0, 0).await?;
    check_eq!(outcome(&d.state), "accepted", "outcome of a max-size frame");
    c.close().await
}

async fn one_over_max(ctx: Ctx) -> CaseResult {
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

async fn flow_after_detach(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    c.detach(0, 0).await?;
    c.expect_refusal(0, 0).await?;
    c.flow(0, 0, 0, 1, false).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec!["end(amqp:session:unattached-handle: Unattached link handle: 0)".to_owned()], "reaction");
    by.check().await
}

/// Proves a session still works: attaches a sender on `handle` and publishes one message.
async fn still_usable(c: &mut Conn10, ctx: &Ctx, handle: u32, delivery_id: u32) -> CaseResult {
    let q = queue(ctx).await?;
    c.attach_sender(0, handle, Some(&queue_addr(&q))).await?;
    let state = c.publish(0, handle, delivery_id, &Msg::text("after").encode()?).await?;
    check_eq!(outcome(&state), "accepted", "publish on the same session afterwards");
    Ok(())
}

async fn detach_unknown(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &Detach { handle: Handle(7), closed: true, error: None }).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    still_usable(&mut c, &ctx, 0, 0).await?;
    c.close().await?;
    by.check().await
}

fn disposition(role: Role, first: u32, last: u32) -> Disposition {
    Disposition {
        role,
        first,
        last: Some(last),
        settled: true,
        state: Some(DeliveryState::Accepted(Accepted {})),
        batchable: false,
    }
}

async fn disposition_unknown(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &disposition(Role::Receiver, 40, 50)).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    still_usable(&mut c, &ctx, 0, 0).await?;
    c.close().await?;
    by.check().await
}

async fn disposition_sender(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &disposition(Role::Sender, 0, 0)).await?;
    let r = reaction(&mut c, WAIT).await?;
    let text = unexpected(
        "disposition",
        &[
            "{role,false}",
            "{first,{uint,0}}",
            "{last,{uint,0}}",
            "{settled,true}",
            "{state,{'v1_0.accepted',[]}}",
            "{batchable,undefined}",
        ],
    );
    check_eq!(r, vec![format!("end(amqp:internal-error: {text})")], "reaction");
    by.check().await
}

/// RabbitMQ's description for a performative a session cannot handle: `Unexpected frame` and
/// the record pretty-printed one field a line, aligned after the opening bracket.
fn unexpected(record: &str, fields: &[&str]) -> String {
    let head = format!("Unexpected frame {{'v1_0.{record}',[");
    let indent = " ".repeat(head.chars().count());
    format!("{head}{}]}}", fields.join(&format!(",\n{indent}")))
}

fn begin() -> Begin {
    Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 5000,
        outgoing_window: 5000,
        handle_max: Handle(255),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

async fn begin_in_use(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &begin()).await?;
    let r = reaction(&mut c, WAIT).await?;
    let text = unexpected(
        "begin",
        &[
            "{remote_channel,undefined}",
            "{next_outgoing_id,{uint,0}}",
            "{incoming_window,{uint,5000}}",
            "{outgoing_window,{uint,5000}}",
            "{handle_max,{uint,255}}",
            "{offered_capabilities,undefined}",
            "{desired_capabilities,undefined}",
            "{properties,undefined}",
        ],
    );
    check_eq!(r, vec![format!("end(amqp:internal-error: {text})")], "reaction");
    // The connection and its other sessions survive.
    c.begin(1).await?;
    c.close().await?;
    by.check().await
}

async fn begin_over_max(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = Conn10::open(ctx.broker()).await?;
    let max = c.remote_open.as_ref().map(|o| o.channel_max.0).unwrap_or_default();
    c.perf(max + 1, &begin()).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(
        r,
        vec![
            format!(
                "close(amqp:connection:framing-error: channel number ({}) exceeds maximum channel number ({max}))",
                max + 1
            ),
            "open".to_owned()
        ],
        "reaction"
    );
    by.check().await
}

async fn attach_in_use(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    let q = queue(&ctx).await?;
    let a =
        attach_frame("again", 0, Role::Sender, SenderSettleMode::Mixed, None, Some(target_of(Some(&queue_addr(&q)))));
    c.perf(0, &a).await?;
    let r = reaction(&mut c, WAIT).await?;
    // RabbitMQ does not check: the new link replaces the old one under the same handle.
    check_eq!(r, vec!["attach(0)".to_owned(), "flow(Some(0))".to_owned(), "open".to_owned()], "reaction");
    let state = c.publish(0, 0, 0, &Msg::text("to the new target").encode()?).await?;
    check_eq!(outcome(&state), "accepted", "publish on the reused handle");
    let conn = ctx.lapin().await?;
    check_eq!(lk::message_count(&conn, &q).await?, 1, "messages in the second link's queue");
    c.close().await?;
    by.check().await
}

async fn attach_over_max(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = Conn10::open(ctx.broker()).await?;
    let b = c.begin(0).await?;
    let max = b.handle_max.0;
    let q = queue(&ctx).await?;
    let a = attach_frame(
        "big",
        max + 1,
        Role::Sender,
        SenderSettleMode::Mixed,
        None,
        Some(target_of(Some(&queue_addr(&q)))),
    );
    c.perf(0, &a).await?;
    let r = reaction(&mut c, WAIT).await?;
    // Checked in the session, so it ends the session, not the connection.
    check_eq!(
        r,
        vec![format!(
            "end(amqp:connection:framing-error: link handle value ({}) exceeds maximum link handle value ({max}))",
            max + 1
        )],
        "reaction"
    );
    by.check().await
}

async fn attach_no_session(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    let q = queue(&ctx).await?;
    let a =
        attach_frame("lost", 0, Role::Sender, SenderSettleMode::Mixed, None, Some(target_of(Some(&queue_addr(&q)))));
    c.perf(5, &a).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec!["open".to_owned()], "reaction");
    still_usable(&mut c, &ctx, 0, 0).await?;
    c.close().await?;
    by.check().await
}

async fn delivery_id_gap(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    let first = c.publish(0, 0, 0, &Msg::text("0").encode()?).await?;
    check_eq!(outcome(&first), "accepted", "first publish");
    c.send(&codec::perf(0, &transfer(0, Some(5)), &Msg::text("5").encode()?)?).await?;
    let d = c.expect_disposition(0, 5).await?;
    // RabbitMQ does not check the sequence: the delivery is accepted under the id it carries.
    check_eq!((d.first, d.last, outcome(&d.state)), (5, None, "accepted".to_owned()), "disposition");
    let next = c.publish(0, 0, 6, &Msg::text("6").encode()?).await?;
    check_eq!(outcome(&next), "accepted", "the next publish");
    c.close().await?;
    by.check().await
}

async fn no_delivery_id(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = sender(&ctx).await?;
    c.send(&codec::perf(0, &transfer(0, None), &Msg::text("x").encode()?)?).await?;
    let r = reaction(&mut c, WAIT).await?;
    // The session process crashes on the missing id; the stack trace is cut off.
    check_eq!(r, vec!["end(amqp:internal-error: {badmatch,undefined}\u{2026})".to_owned()], "reaction");
    by.check().await
}

async fn transfer_on_receiver(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let q = queue(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.send(&codec::perf(0, &transfer(0, Some(0)), &Msg::text("x").encode()?)?).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec!["end(amqp:session:unattached-handle: Unknown link handle: 0)".to_owned()], "reaction");
    by.check().await
}

async fn second_open(ctx: Ctx) -> CaseResult {
    let by = Bystanders::open(&ctx).await?;
    let mut c = session(&ctx).await?;
    c.perf(0, &default_open(ctx.broker())).await?;
    let r = reaction(&mut c, WAIT).await?;
    check_eq!(r, vec![reader_error("function_clause"), "open".to_owned()], "reaction");
    by.check().await
}

async fn close_after_error(ctx: Ctx) -> CaseResult {
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

async fn settled_absent(ctx: Ctx) -> CaseResult {
    let (conn, ch) = ctx.lapin_channel().await?;
    let q = queue(&ctx).await?;
    lk::confirm(&ch).await?;
    lk::publish(&ch, "", &q, b"m").await?;
    let mut c = session(&ctx).await?;
    c.attach_receiver(0, 0, &queue_addr(&q)).await?;
    c.credit(0, 0, 1, false).await?;
    let d = c.recv(0, WAIT).await?;
    let mut disposition = disposition(Role::Receiver, d.id(), d.id());
    disposition.settled = false;
    c.perf(0, &disposition).await?;
    let r = reaction(&mut c, QUIET).await?;
    check_eq!(r, vec![format!("disposition(Sender, {}..Some({}))", d.id(), d.id()), "open".to_owned()], "reaction");
    lk::eventually(WAIT, "queue empty", || async { Ok(lk::message_count(&conn, &q).await? == 0) }).await?;
    c.close().await
}
