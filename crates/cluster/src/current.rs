//! A node's group that can start anew: `join_cluster` resets a node that formed a cluster of
//! its own (its log is another cluster's history) and joins another.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::group::Group;
use crate::machine::Machine;
use crate::transport::frame::Kind;
use crate::transport::{Answering, Dispatch};

/// The group a node runs now; peers' requests go to whichever it is when they arrive.
pub struct Current<M: Machine> {
    group: RwLock<Arc<Group<M>>>,
}

impl<M: Machine> Current<M> {
    /// Starts with `group`.
    #[must_use]
    pub fn new(group: Arc<Group<M>>) -> Self {
        Self { group: RwLock::new(group) }
    }

    /// The group now.
    #[must_use]
    pub fn get(&self) -> Arc<Group<M>> {
        Arc::clone(&self.group.read())
    }

    /// Puts `group` in place of the one running (which the caller stopped); returns that one.
    pub fn replace(&self, group: Arc<Group<M>>) -> Arc<Group<M>> {
        std::mem::replace(&mut *self.group.write(), group)
    }
}

impl<M: Machine> Dispatch for Current<M> {
    fn answer(&self, group: u64, kind: Kind, body: Vec<u8>) -> Answering<'_> {
        let current = self.get();
        Box::pin(async move { Dispatch::answer(current.as_ref(), group, kind, body).await })
    }
}
