//! `tx.select`, `tx.commit` and `tx.rollback`, with RabbitMQ 4.0.5's answers; the held work
//! itself is a [`Transaction`].

use amq_protocol::protocol::{AMQPClass, tx};
use charon_engine::Publisher;

use super::ack_timeout::AckTimer;
use super::channel::ChannelState;
use super::publish::send_return;
use super::tx::{Commit, HeldSettle, Transaction};
use super::{MethodError, MethodResult};
use crate::proto::{Connection, ReplyCode};

/// The `tx.*` methods of one channel, over what they touch: the channel (its transaction and
/// unacked deliveries), the connection's publisher (a commit's publishes) and its
/// consumer-timeout timer (a rollback restores deliveries).
pub(crate) struct TxMethods<'a> {
    pub(crate) channel: u16,
    pub(crate) state: &'a mut ChannelState,
    pub(crate) publisher: &'a mut Publisher,
    pub(crate) ack_timer: &'a mut AckTimer,
}

impl TxMethods<'_> {
    /// Acts on `tx.select` and `tx.rollback`. `tx.commit` is the session's: its publishes are
    /// flushed with every channel's ([`Self::begin_commit`] does this channel's part).
    pub(crate) fn method(self, method: tx::AMQPMethod, conn: &mut Connection) -> MethodResult {
        match method {
            tx::AMQPMethod::Select(_) => {
                self.state.select_tx()?;
                conn.send_method(self.channel, &AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {})));
                Ok(())
            }
            tx::AMQPMethod::Rollback(_) => {
                let restored = self.state.tx.as_mut().ok_or_else(MethodError::not_transactional)?.rollback();
                for (tag, pending) in restored {
                    self.state.unacked.restore(tag, pending);
                }
                // A restored delivery may be the channel's oldest again, with its first
                // delivery time: its consumer timeout runs on.
                if let Some(oldest) = self.state.unacked.oldest() {
                    self.ack_timer.watch(oldest);
                }
                conn.send_method(self.channel, &AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {})));
                Ok(())
            }
            _ => Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method")),
        }
    }

    /// The first half of `tx.commit`: hands the held publishes to the publisher (returning
    /// unroutable mandatory ones); the held settlements, for the session to release once the
    /// publishes were flushed.
    pub(crate) fn begin_commit(self, conn: &mut Connection) -> Result<Vec<HeldSettle>, MethodError> {
        let tx = self.state.tx.as_mut().ok_or_else(MethodError::not_transactional)?;
        let Commit { publishes, settles } = tx.begin_commit();
        for publish in publishes {
            if publish.queues.is_empty() {
                if publish.mandatory {
                    send_return(conn, self.channel, &publish.message);
                }
                continue;
            }
            let seq = tx.number(publish.queues.len());
            self.publisher.push(&publish.queues, u32::from(self.channel), &publish.message, Some(seq));
        }
        Ok(settles)
    }
}

/// `tx.commit-ok` once every queue answered for the commit's publishes (`None` while one has
/// not), or RabbitMQ's error for a commit a queue refused part of.
pub(crate) fn poll_commit(channel: u16, tx: &mut Transaction, conn: &mut Connection) -> Option<MethodResult> {
    let all_accepted = tx.poll_commit()?;
    if !all_accepted {
        return Some(Err(MethodError::new(ReplyCode::PreconditionFailed, "partial tx completion")));
    }
    conn.send_method(channel, &AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {})));
    Some(Ok(()))
}
