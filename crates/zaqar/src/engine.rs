//! The engine side of a Zaqar request: a project's vhost, a queue's handle, and publishing
//! with confirms (a post is answered only once the engine's log synced it).

use std::sync::Arc;
use std::time::Duration;

use charon_engine::access::VhostInfo;
use charon_engine::{
    Broker, ConfirmTo, Enqueue, Flush, MovedFrom, Publisher, QueueDeclare, QueueRef, SessionEvent, SessionSink, VHost,
};
use charon_model::{Message, Table, Value};

use crate::error::ZaqarError;

/// Where a publish's confirms arrive.
type SessionEvents = tokio::sync::mpsc::UnboundedReceiver<SessionEvent>;

/// How long a publish may wait for its confirmation before the post fails with 503.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// The session id queue lookups are made with (Zaqar never sees exclusive queues' owners).
const NO_SESSION: u64 = 0;

/// The vhost of `project`, if it exists.
pub(crate) fn vhost(broker: &Broker, project: &str) -> Option<Arc<VHost>> {
    broker.vhost(project)
}

/// The vhost of `project`, created on first use when `create` allows it.
///
/// # Errors
/// 400 when it does not exist and may not be created; 503 when creating it failed.
pub(crate) async fn vhost_for_write(broker: &Broker, project: &str, create: bool) -> Result<Arc<VHost>, ZaqarError> {
    if let Some(vhost) = broker.vhost(project) {
        return Ok(vhost);
    }
    if !create {
        return Err(ZaqarError::invalid(format!(
            "Project {project} has no virtual host on this broker, and zaqar_create_vhosts is off."
        )));
    }
    let info = VhostInfo { description: "Zaqar project".to_owned(), ..VhostInfo::default() };
    broker
        .add_vhost(project, info)
        .await
        .map_err(|e| ZaqarError::unavailable(format!("Project {project} could not be created: {e}")))?;
    broker.vhost(project).ok_or_else(|| ZaqarError::unavailable(format!("Project {project} could not be created.")))
}

/// The engine queue named `name`, if it exists.
pub(crate) fn queue(vhost: &VHost, name: &str) -> Option<QueueRef> {
    vhost.queue(name, NO_SESSION).ok()
}

/// The arguments of a queue Zaqar creates: a durable quorum queue, so that its return counts
/// (Zaqar's claim counts) are written to the log on every return and survive restarts, and
/// with no delivery limit (the claim-count move is Zaqar's, at claim time).
fn zaqar_arguments() -> Table {
    let mut arguments = Table::new();
    arguments.insert("x-queue-type", Value::long_str("quorum"));
    arguments.insert("x-delivery-limit", Value::I64(-1));
    arguments
}

/// The queue `name`, declared (durable quorum) when missing; true when this call created it.
///
/// # Errors
/// 503 when the engine refused the declare.
pub(crate) async fn ensure_queue(vhost: &VHost, name: &str) -> Result<(QueueRef, bool), ZaqarError> {
    if let Some(queue) = queue(vhost, name) {
        return Ok((queue, false));
    }
    let declare = QueueDeclare {
        name: name.to_owned(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: zaqar_arguments(),
    };
    let ok = vhost
        .declare_queue(&declare, NO_SESSION)
        .await
        .map_err(|e| ZaqarError::unavailable(format!("Queue {name} could not be created: {e}")))?;
    let queue = self::queue(vhost, name).ok_or_else(|| ZaqarError::unavailable(format!("Queue {name} vanished.")))?;
    Ok((queue, ok.created))
}

/// Enqueues `messages` on `queue`, waits until the queue confirmed every one (a durable
/// queue confirms once its log synced them), and returns the sequence number each got in the
/// queue: Zaqar's message ids. Not through a [`Publisher`]: nothing is routed, and only
/// [`QueueRef::publish_numbered`] answers with the numbers.
///
/// # Errors
/// 503 when the queue is gone, did not keep a message (refused it, or dead-lettered it at
/// once by its overflow mode) or did not confirm in time.
pub(crate) async fn publish_confirmed(
    broker: &Broker,
    queue: &QueueRef,
    messages: Vec<Arc<Message>>,
) -> Result<Vec<u64>, ZaqarError> {
    let (to, events, items) = confirmed_items(broker, messages);
    let expected = items.len();
    let numbers = queue.publish_numbered(items, to).await.ok_or_else(not_enqueued)?;
    wait_for_confirms(events, expected).await?;
    numbers.into_iter().map(|number| number.ok_or_else(not_enqueued)).collect()
}

/// Enqueues `messages`, moved out of `from`, on `queue` through the engine's [`Publisher`]
/// (as a redrive moves its copies) and waits until the queue confirmed every one: each one's
/// log record there also removes it from its source ([`QueueRef::publish_moved`]), so a crash
/// leaves it in exactly one of the two. A queue of another node of the cluster takes them at
/// least once instead.
///
/// # Errors
/// 503 when the queue is gone, refused a message or did not confirm in time.
pub(crate) async fn move_confirmed(
    broker: &Broker,
    queue: &QueueRef,
    messages: Vec<Arc<Message>>,
    from: MovedFrom,
) -> Result<(), ZaqarError> {
    if queue.home.is_some() {
        // A queue of another node: the move cannot be one record of one log. The copies are
        // published with confirms and the caller acknowledges the originals after, at least
        // once (a crash between the two leaves a message in both queues, never in neither).
        let (to, events, items) = confirmed_items(broker, messages);
        let expected = items.len();
        if !queue.publish(items, Some(to)).await {
            return Err(not_enqueued());
        }
        return wait_for_confirms(events, expected).await;
    }
    let (session, events) = SessionSink::new(broker.next_id(), u32::MAX);
    let mut publisher = Publisher::new(Some(session));
    let expected = messages.len();
    for ((message, seq), number) in messages.into_iter().zip(from.seqs).zip(1u64..) {
        publisher.push_moved(queue, 1, message, number, (from.queue, seq));
    }
    if !publisher.flush(Flush::Wait).await.is_empty() {
        return Err(not_enqueued());
    }
    wait_for_confirms(events, expected).await
}

fn not_enqueued() -> ZaqarError {
    ZaqarError::unavailable("Messages could not be enqueued.")
}

/// `messages` numbered for confirms, and the session the confirms come to.
fn confirmed_items(broker: &Broker, messages: Vec<Arc<Message>>) -> (ConfirmTo, SessionEvents, Vec<Enqueue>) {
    let (session, events) = SessionSink::new(broker.next_id(), u32::MAX);
    let items =
        messages.into_iter().zip(1u64..).map(|(message, seq)| Enqueue { message, confirm: Some(seq) }).collect();
    (ConfirmTo { session, channel: 1 }, events, items)
}

/// Waits for `expected` confirms; any refusal fails.
async fn wait_for_confirms(mut events: SessionEvents, expected: usize) -> Result<(), ZaqarError> {
    let mut confirmed = 0;
    let wait = async {
        while confirmed < expected {
            match events.recv().await {
                Some(SessionEvent::Confirms { accepted, refused, .. }) => {
                    if !refused.is_empty() {
                        return Err(not_enqueued());
                    }
                    confirmed += accepted.len();
                }
                Some(_) => {}
                None => return Err(not_enqueued()),
            }
        }
        Ok(())
    };
    tokio::time::timeout(CONFIRM_TIMEOUT, wait).await.map_err(|_| not_enqueued())?
}
