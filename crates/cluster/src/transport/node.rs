//! What a node answers its peers: a ping with the node's own report (what its peers show of it
//! and act on: its measurements and alarms), requests for its queues by its engine, everything
//! else by its groups.

use std::sync::Arc;

use super::frame::Kind;
use super::{Answering, Dispatch};

/// A node's answers to its peers: pings with `report`'s bytes, [`Kind::Queue`] requests by
/// `queues`, the rest by `groups`.
pub struct NodeDispatch {
    groups: Arc<dyn Dispatch>,
    queues: Arc<dyn Dispatch>,
    report: Arc<dyn Fn() -> Vec<u8> + Send + Sync>,
}

impl NodeDispatch {
    /// Answers pings with what `report` says at that moment (it must not block: it runs on
    /// the connection's task), queue requests through `queues` and every other request
    /// through `groups`.
    #[must_use]
    pub fn new(
        groups: Arc<dyn Dispatch>,
        queues: Arc<dyn Dispatch>,
        report: Arc<dyn Fn() -> Vec<u8> + Send + Sync>,
    ) -> Self {
        Self { groups, queues, report }
    }
}

impl Dispatch for NodeDispatch {
    fn answer(&self, group: u64, kind: Kind, body: Vec<u8>) -> Answering<'_> {
        if kind == Kind::Ping {
            let report = (self.report)();
            return Box::pin(async move { Ok(report) });
        }
        if kind == Kind::Queue {
            return self.queues.answer(group, kind, body);
        }
        self.groups.answer(group, kind, body)
    }
}
