//! The vhost's side of the dead-letter seam: a queue's dead letters are routed through this
//! vhost's exchange graph.

use std::sync::Weak;

use charon_model::{Routing, Table};

use super::VHost;
use crate::dead_letter::DeadLetterSink;
use crate::queue::QueueRef;

/// Routes dead letters through a vhost. Holds it weakly: the vhost owns its queues, whose tasks
/// hold this.
pub(super) struct DeadLetterRoutes(pub(super) Weak<VHost>);

impl DeadLetterSink for DeadLetterRoutes {
    fn route(&self, exchange: &str, routing: &Routing, headers: &Table) -> Option<Vec<QueueRef>> {
        self.0.upgrade()?.route_dead_letter(exchange, routing, headers)
    }
}
