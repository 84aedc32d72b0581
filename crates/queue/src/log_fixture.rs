//! A queue's state on a real log in a temporary directory, for tests of what it keeps on disk
//! (the paged runs, parked dead letters): the test plays the task's part of handing the
//! journal to the log and the places back to the queue.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use charon_model::{Body, Message, Properties, Routing, Table};
use charon_store::segment_log::{LogOptions, MessageLog, Placed, Record, RecoveredQueue};
use tokio::sync::mpsc;

use super::args::QueueType;
use super::handle::QueueHandle;
use super::requests::{Enqueue, QueueConfig};
use super::settings::QueueSettings;
use super::state::QueueState;
use crate::session::Owner;

/// A queue on a real log in a temporary directory; the test plays the task's part of handing
/// the journal to the log and the places back to the queue.
pub(super) struct Fixture {
    pub(super) state: QueueState,
    pub(super) log: MessageLog,
    pub(super) _dir: tempfile::TempDir,
}

pub(super) fn fixture(durable: bool, settings: QueueSettings) -> Fixture {
    fixture_with(durable, settings, Table::new())
}

pub(super) fn fixture_with(durable: bool, settings: QueueSettings, arguments: Table) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = MessageLog::open(dir.path(), LogOptions::default()).unwrap();
    let state = queue_state(&log, durable, settings, arguments, RecoveredQueue::default());
    Fixture { state, log, _dir: dir }
}

/// Queue 3 on `log`, restoring `restored` when durable.
pub(super) fn queue_state(
    log: &MessageLog,
    durable: bool,
    settings: QueueSettings,
    arguments: Table,
    restored: RecoveredQueue,
) -> QueueState {
    let (tx, _rx) = mpsc::channel(1);
    let config = QueueConfig {
        name: "long".into(),
        vhost: "/".into(),
        durable,
        auto_delete: false,
        exclusive_owner: None,
        arguments,
        queue_type: QueueType::Classic,
    };
    let mut state = QueueState::new(Arc::new(QueueHandle::new(3, config, tx)), settings, 1_000);
    state.enable_paging(log.reader().clone());
    if durable {
        state.enable_journal(restored);
    }
    state
}

impl Fixture {
    /// Writes the pass's records and gives the queue their places, as the task does; returns
    /// the records.
    pub(super) fn flush(&mut self) -> Vec<Record> {
        self.flush_placed().0
    }

    /// [`Self::flush`], also returning the places.
    pub(super) fn flush_placed(&mut self) -> (Vec<Record>, Vec<Placed>) {
        let (records, _) = self.state.take_journal();
        let (tx, rx) = std_mpsc::channel();
        self.log.append(records.clone(), Some(Box::new(move |r| tx.send(r.unwrap()).unwrap())));
        let placed = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        self.state.placed(placed.clone());
        (records, placed)
    }

    pub(super) fn publish(&mut self, bodies: impl IntoIterator<Item = String>, delivery_mode: u8, ttl: Option<u64>) {
        self.publish_with(bodies, Properties { delivery_mode: Some(delivery_mode), ttl, ..Properties::default() });
    }

    pub(super) fn publish_with(&mut self, bodies: impl IntoIterator<Item = String>, properties: Properties) {
        let items = bodies
            .into_iter()
            .map(|body| {
                let mut m = Message::new(Routing::default(), Body::Data(body.into()));
                m.origin = charon_model::Origin::Amqp091;
                m.set_properties(properties.clone());
                Enqueue { message: Arc::new(m), confirm: None }
            })
            .collect();
        self.state.publish(items, None);
    }

    pub(super) fn runs(&self) -> (usize, usize, usize) {
        self.state.ready().runs()
    }

    /// Takes every ready message with `basic.get`-style gets, acknowledging none.
    pub(super) fn get_all(&mut self) -> Vec<String> {
        let owner = Owner { session: 1, channel: 1 };
        std::iter::from_fn(|| self.state.get(owner, true))
            .map(|got| String::from_utf8(got.delivery.message.body.bytes().to_vec()).unwrap())
            .collect()
    }
}
