//! The task that owns one queue.

use std::sync::Weak;

use tokio::sync::mpsc;

use super::state::QueueState;
use super::{QueueCmd, QueueRef};
use crate::vhost::VHost;

/// Commands taken from the mailbox per pass: large enough to amortise one dispatch over many
/// publishes, small enough to keep latency low.
const BATCH: usize = 64;

pub(super) fn spawn(handle: QueueRef, rx: mpsc::Receiver<QueueCmd>, vhost: Weak<VHost>) {
    tokio::spawn(run(handle, rx, vhost));
}

enum Next {
    Continue,
    Stop,
}

async fn run(handle: QueueRef, mut rx: mpsc::Receiver<QueueCmd>, vhost: Weak<VHost>) {
    let mut state = QueueState::new(handle.clone());
    let mut commands = Vec::with_capacity(BATCH);
    'outer: loop {
        if rx.recv_many(&mut commands, BATCH).await == 0 {
            break;
        }
        for command in commands.drain(..) {
            if let Next::Stop = apply(&mut state, command) {
                flush(&mut state);
                break 'outer;
            }
        }
        if state.should_auto_delete() {
            if let Some(vhost) = vhost.upgrade() {
                vhost.forget_queue(&handle);
            }
            flush(&mut state);
            break;
        }
        state.dispatch();
        flush(&mut state);
    }
    drain_after_stop(&mut rx);
    tracing::debug!(queue = handle.name(), "queue stopped");
}

fn apply(state: &mut QueueState, command: QueueCmd) -> Next {
    match command {
        QueueCmd::Publish { items, confirm_to } => state.publish(items, confirm_to),
        QueueCmd::Consume(spec, reply) => {
            let _ = reply.send(state.consume(*spec));
        }
        QueueCmd::Cancel(consumer, reply) => {
            // Deliveries made so far are flushed before the reply so the channel sees them
            // before it answers cancel-ok.
            let existed = state.cancel(consumer);
            flush(state);
            let _ = reply.send(existed);
        }
        QueueCmd::Settle { seqs, how } => state.settle(&seqs, how),
        QueueCmd::Get { owner, no_ack, reply } => {
            let _ = reply.send(state.get(owner, no_ack));
        }
        QueueCmd::Purge(reply) => {
            let _ = reply.send(state.purge());
        }
        QueueCmd::Stats(reply) => {
            let _ = reply.send(state.stats());
        }
        QueueCmd::OwnerClosed(owner) => state.owner_closed(owner),
        QueueCmd::Delete { if_unused, if_empty, reply } => match state.check_delete(if_unused, if_empty) {
            Ok(count) => {
                state.cancel_all_consumers();
                let _ = reply.send(Ok(count));
                return Next::Stop;
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        },
        QueueCmd::Resume => {}
        QueueCmd::Credit(grant) => state.credit(grant),
    }
    Next::Continue
}

fn flush(state: &mut QueueState) {
    for (session, event) in state.take_outbox() {
        session.send(event);
    }
    // Dead lettering is a later stage; until then discarded messages are dropped here, the
    // way RabbitMQ drops them when no dead-letter exchange is configured.
    drop(state.take_discarded());
}

/// After the queue stopped, answer what is still in the mailbox: publishes waiting for a
/// confirmation are confirmed (RabbitMQ confirms messages whose queue went away normally), and
/// every other caller sees its reply channel close.
fn drain_after_stop(rx: &mut mpsc::Receiver<QueueCmd>) {
    rx.close();
    while let Ok(command) = rx.try_recv() {
        if let QueueCmd::Publish { items, confirm_to: Some(to) } = command {
            let accepted: Vec<u64> = items.iter().filter_map(|i| i.confirm).collect();
            if !accepted.is_empty() {
                to.session.send(crate::session::SessionEvent::Confirms {
                    channel: to.channel,
                    accepted,
                    refused: Vec::new(),
                });
            }
        }
    }
}
