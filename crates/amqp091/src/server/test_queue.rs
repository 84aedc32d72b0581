//! A queue on a broker of its own, for the channel state's unit tests.
#![allow(clippy::unwrap_used)]

use charon_engine::{Broker, BrokerConfig, QueueDeclare, QueueRef};
use charon_model::Table;

/// Queue `q` in vhost `/` of a fresh broker.
pub(super) async fn queue() -> QueueRef {
    queue_with(Table::new()).await
}

/// Queue `q` with `arguments` in vhost `/` of a fresh broker.
pub(super) async fn queue_with(arguments: Table) -> QueueRef {
    let broker = Broker::new(BrokerConfig::default());
    let user = broker.authenticate("guest", "guest").unwrap();
    let vhost = broker.open_vhost(&user, "/").unwrap();
    let declare = QueueDeclare {
        name: "q".into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments,
    };
    vhost.declare_queue(&declare, 1).await.unwrap();
    vhost.queue("q", 1).unwrap()
}
