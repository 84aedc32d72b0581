//! What the `amqp10.errors.*` cases share: [`Bystanders`] that must survive the bad input, the
//! broker's reaction read frame by frame, a hand-made transfer, a sender session to send it on,
//! and RabbitMQ's rendering of a performative it did not expect.

use std::time::Duration;

use crate::{
    CaseError, CaseResult, Ctx,
    cases::amqp10_attach::{queue, session},
    check_eq,
    fe2o3_kit::queue_addr,
    lapin_kit::Healthy,
    raw10::{
        Conn10, Msg,
        conn::Body,
        link::{error_parts, outcome},
    },
};
use fe2o3_amqp_types::{
    definitions::Handle,
    performatives::{Performative, Transfer},
    primitives::Binary,
};

/// Wait after a close for the socket to go away (RabbitMQ waits for the client's close).
const AFTER_CLOSE: Duration = Duration::from_secs(1);

/// A 0.9.1 connection and an AMQP 1.0 publisher opened before the bad input, so a case can
/// prove that the rest of the broker keeps working.
pub(super) struct Bystanders {
    healthy: Healthy,
    conn: Conn10,
    queue: String,
    next_id: u32,
}

impl Bystanders {
    /// Opens both connections and attaches the 1.0 publisher to a fresh queue.
    pub(super) async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        let healthy = Healthy::open(ctx).await?;
        let queue = queue(ctx).await?;
        let mut conn = session(ctx).await?;
        conn.attach_sender(0, 0, Some(&queue_addr(&queue))).await?;
        Ok(Self { healthy, conn, queue, next_id: 0 })
    }

    /// Both still work: a 0.9.1 round trip and an accepted 1.0 publish.
    pub(super) async fn check(mut self) -> CaseResult {
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
pub(super) async fn reaction(c: &mut Conn10, wait: Duration) -> Result<Vec<String>, CaseError> {
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

/// A first transfer frame on `handle` with `delivery_id` (unsettled, tag = the id).
pub(in crate::cases) fn transfer(handle: u32, delivery_id: Option<u32>) -> Transfer {
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

/// A session with a sender link on handle 0 to a fresh queue, ready for a hand-made transfer.
pub(super) async fn sender(ctx: &Ctx) -> Result<Conn10, CaseError> {
    let q = queue(ctx).await?;
    let mut c = session(ctx).await?;
    c.attach_sender(0, 0, Some(&queue_addr(&q))).await?;
    Ok(c)
}

/// Proves a session still works: attaches a sender on `handle` and publishes one message.
pub(super) async fn still_usable(c: &mut Conn10, ctx: &Ctx, handle: u32, delivery_id: u32) -> CaseResult {
    let q = queue(ctx).await?;
    c.attach_sender(0, handle, Some(&queue_addr(&q))).await?;
    let state = c.publish(0, handle, delivery_id, &Msg::text("after").encode()?).await?;
    check_eq!(outcome(&state), "accepted", "publish on the same session afterwards");
    Ok(())
}

/// RabbitMQ's description for a performative a session cannot handle: `Unexpected frame` and
/// the record pretty-printed one field a line, aligned after the opening bracket.
pub(super) fn unexpected(record: &str, fields: &[&str]) -> String {
    let head = format!("Unexpected frame {{'v1_0.{record}',[");
    let indent = " ".repeat(head.chars().count());
    format!("{head}{}]}}", fields.join(&format!(",\n{indent}")))
}
