//! A binding and where it leads: the one type every exchange type's index holds.

use charon_model::Table;

/// Where a binding leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// A queue, by name.
    Queue(String),
    /// Another exchange, by name (exchange-to-exchange binding).
    Exchange(String),
}

/// One binding of a source exchange.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// Where it leads.
    pub destination: Destination,
    /// Binding key.
    pub key: String,
    /// Binding arguments (meaningful for headers exchanges; part of the binding's identity
    /// for all types, as in RabbitMQ).
    pub arguments: Table,
}

impl Binding {
    pub(super) fn same_as(&self, other: &Self) -> bool {
        self.destination == other.destination && self.key == other.key && self.arguments == other.arguments
    }
}
