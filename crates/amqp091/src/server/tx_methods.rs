//! `tx.select`, `tx.commit` and `tx.rollback`, with RabbitMQ 4.0.5's answers; the held work
//! itself is a [`Transaction`].

use amq_protocol::protocol::{AMQPClass, tx};
use charon_engine::Flush;

use super::publish::send_return;
use super::session::Session;
use super::tx::{Commit, Transaction};
use super::{MethodError, MethodResult};
use crate::proto::{Connection, ReplyCode};

impl Session {
    pub(crate) async fn tx_method(
        &mut self,
        channel: u16,
        method: tx::AMQPMethod,
        conn: &mut Connection,
    ) -> MethodResult {
        match method {
            tx::AMQPMethod::Select(_) => {
                self.channel(channel)?.select_tx()?;
                conn.send_method(channel, &AMQPClass::Tx(tx::AMQPMethod::SelectOk(tx::SelectOk {})));
                Ok(())
            }
            tx::AMQPMethod::Commit(_) => self.commit(channel, conn).await,
            tx::AMQPMethod::Rollback(_) => {
                let state = self.channel(channel)?;
                let restored = state.tx.as_mut().ok_or_else(MethodError::not_transactional)?.rollback();
                for (tag, pending) in restored {
                    state.unacked.restore(tag, pending);
                }
                // A restored delivery may be the channel's oldest again, with its first
                // delivery time: its consumer timeout runs on.
                self.watch_oldest(channel);
                conn.send_method(channel, &AMQPClass::Tx(tx::AMQPMethod::RollbackOk(tx::RollbackOk {})));
                Ok(())
            }
            _ => Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method")),
        }
    }

    /// Delivers the held publishes (returning unroutable mandatory ones), then settles the
    /// held deliveries; `tx.commit-ok` goes once the queues confirmed the publishes, now or
    /// from [`Session::finish_commits`].
    async fn commit(&mut self, channel: u16, conn: &mut Connection) -> MethodResult {
        self.channel(channel)?;
        // The channel's state and the session's publish batches are borrowed side by side.
        let tx = self.channels.get_mut(&channel).and_then(|state| state.tx.as_mut());
        let tx = tx.ok_or_else(MethodError::not_transactional)?;
        let Commit { publishes, settles } = tx.begin_commit();
        for publish in publishes {
            if publish.queues.is_empty() {
                if publish.mandatory {
                    send_return(conn, channel, &publish.message);
                }
                continue;
            }
            let seq = tx.number(publish.queues.len());
            self.publisher.push(&publish.queues, u32::from(channel), &publish.message, Some(seq));
        }
        self.flush_publishes(conn, Flush::Force).await;
        for settle in settles {
            let deliveries = settle.deliveries.into_iter().map(|(_, pending)| pending).collect();
            self.release(channel, deliveries, settle.how).await?;
        }
        match self.channel(channel)?.tx.as_mut().and_then(Transaction::poll_commit) {
            Some(all_accepted) => commit_done(channel, all_accepted, conn),
            None => {
                self.committing.push(channel);
                Ok(())
            }
        }
    }

    /// Answers the commits whose queues have all confirmed since; called after engine events.
    pub(crate) async fn finish_commits(&mut self, conn: &mut Connection) {
        if self.committing.is_empty() {
            return;
        }
        for channel in std::mem::take(&mut self.committing) {
            let Some(tx) = self.channels.get_mut(&channel).and_then(|state| state.tx.as_mut()) else {
                continue;
            };
            match tx.poll_commit() {
                Some(all_accepted) => {
                    if let Err(error) = commit_done(channel, all_accepted, conn) {
                        self.fail(channel, error, (90, 20), conn).await;
                    }
                }
                None => self.committing.push(channel),
            }
        }
    }
}

/// `tx.commit-ok`, or RabbitMQ's error for a commit a queue refused part of.
fn commit_done(channel: u16, all_accepted: bool, conn: &mut Connection) -> MethodResult {
    if !all_accepted {
        return Err(MethodError::new(ReplyCode::PreconditionFailed, "partial tx completion"));
    }
    conn.send_method(channel, &AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {})));
    Ok(())
}
