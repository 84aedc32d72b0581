//! Exchanges and their binding indexes.
//!
//! Each exchange type keeps its bindings in the structure that routes fastest for it: a hash
//! map by routing key for direct exchanges (so routing cost does not grow with the number of
//! bindings), a flat list for fanout, a word trie for topic and a list of matchers for headers.

mod binding;
mod direct;
mod fanout;
mod headers;
pub(crate) mod local_random;
mod topic;

use charon_model::{Table, Value};

use crate::error::EngineError;

pub use binding::{Binding, Destination, arguments_hash};
pub(crate) use direct::DirectBindings;
pub(crate) use fanout::FanoutBindings;
pub(crate) use headers::{HeadersBindings, validate as validate_headers_binding};
pub(crate) use topic::TopicBindings;

/// The exchange types Charon routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Exact routing-key match.
    Direct,
    /// Every binding.
    Fanout,
    /// Dotted words with `*` (one word) and `#` (zero or more words).
    Topic,
    /// Message headers against binding arguments (`x-match`).
    Headers,
    /// RabbitMQ 4's `x-local-random`: one bound queue, picked at random.
    LocalRandom,
}

impl ExchangeKind {
    /// Parses a declared type name; unknown names get RabbitMQ's 406 text.
    ///
    /// # Errors
    /// `unknown exchange type '…'` for anything else.
    pub fn parse(name: &str) -> Result<Self, EngineError> {
        match name {
            "direct" => Ok(Self::Direct),
            "fanout" => Ok(Self::Fanout),
            "topic" => Ok(Self::Topic),
            "headers" => Ok(Self::Headers),
            local_random::NAME => Ok(Self::LocalRandom),
            other => Err(EngineError::Precondition(format!("unknown exchange type '{other}'"))),
        }
    }

    /// The type name as declared.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Fanout => "fanout",
            Self::Topic => "topic",
            Self::Headers => "headers",
            Self::LocalRandom => local_random::NAME,
        }
    }
}

/// Declared properties of an exchange.
#[derive(Clone, Debug)]
pub struct ExchangeInfo {
    /// Name; `""` is the default exchange.
    pub name: String,
    /// Type.
    pub kind: ExchangeKind,
    /// Survives restarts: with a data directory the vhost writes it to the metadata store
    /// ([`crate::persist`]) before answering, and restores it at start.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Refuses direct publishes; reachable only through exchange-to-exchange bindings.
    pub internal: bool,
    /// Declare arguments as given.
    pub arguments: Table,
}

impl ExchangeInfo {
    /// The `alternate-exchange` argument, if it names one.
    #[must_use]
    pub fn alternate_exchange(&self) -> Option<&str> {
        self.arguments.get("alternate-exchange").and_then(Value::as_str)
    }
}

/// The bindings of one exchange, indexed for its type.
#[derive(Debug)]
pub(crate) enum BindingSet {
    Direct(DirectBindings),
    Fanout(FanoutBindings),
    Topic(TopicBindings),
    Headers(HeadersBindings),
}

impl BindingSet {
    pub(crate) fn new(kind: ExchangeKind) -> Self {
        match kind {
            ExchangeKind::Direct => Self::Direct(DirectBindings::default()),
            // Every binding has the empty key: all match, and routing picks one of them.
            ExchangeKind::Fanout | ExchangeKind::LocalRandom => Self::Fanout(FanoutBindings::default()),
            ExchangeKind::Topic => Self::Topic(TopicBindings::default()),
            ExchangeKind::Headers => Self::Headers(HeadersBindings::default()),
        }
    }

    /// Adds a binding; false if an identical one exists.
    pub(crate) fn add(&mut self, binding: Binding) -> bool {
        match self {
            Self::Direct(b) => b.add(binding),
            Self::Fanout(b) => b.add(binding),
            Self::Topic(b) => b.add(binding),
            Self::Headers(b) => b.add(binding),
        }
    }

    /// Removes an identical binding; false if there was none.
    pub(crate) fn remove(&mut self, binding: &Binding) -> bool {
        match self {
            Self::Direct(b) => b.remove(binding),
            Self::Fanout(b) => b.remove(binding),
            Self::Topic(b) => b.remove(binding),
            Self::Headers(b) => b.remove(binding),
        }
    }

    /// Removes every binding to `destination`.
    pub(crate) fn remove_destination(&mut self, destination: &Destination) {
        match self {
            Self::Direct(b) => b.remove_destination(destination),
            Self::Fanout(b) => b.remove_destination(destination),
            Self::Topic(b) => b.remove_destination(destination),
            Self::Headers(b) => b.remove_destination(destination),
        }
    }

    /// Whether `binding` exists.
    pub(crate) fn contains(&self, binding: &Binding) -> bool {
        match self {
            Self::Direct(b) => b.contains(binding),
            Self::Fanout(b) => b.contains(binding),
            Self::Topic(b) => b.contains(binding),
            Self::Headers(b) => b.contains(binding),
        }
    }

    /// Whether any binding leads to `destination`.
    pub(crate) fn contains_destination(&self, destination: &Destination) -> bool {
        match self {
            Self::Direct(b) => b.contains_destination(destination),
            Self::Fanout(b) => b.contains_destination(destination),
            Self::Topic(b) => b.contains_destination(destination),
            Self::Headers(b) => b.contains_destination(destination),
        }
    }

    /// The bindings that lead to `destination`.
    pub(crate) fn to_destination(&self, destination: &Destination) -> Vec<Binding> {
        match self {
            Self::Direct(b) => b.to_destination(destination),
            Self::Fanout(b) => b.to_destination(destination),
            Self::Topic(b) => b.to_destination(destination),
            Self::Headers(b) => b.to_destination(destination),
        }
    }

    /// Whether there are no bindings at all.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            Self::Direct(b) => b.is_empty(),
            Self::Fanout(b) => b.is_empty(),
            Self::Topic(b) => b.is_empty(),
            Self::Headers(b) => b.is_empty(),
        }
    }

    /// Appends the destinations matching `key` (and `headers`, for headers exchanges).
    pub(crate) fn route<'a>(&'a self, key: &str, headers: &Table, out: &mut Vec<&'a Destination>) {
        match self {
            Self::Direct(b) => b.route(key, out),
            Self::Fanout(b) => b.route(out),
            Self::Topic(b) => b.route(key, out),
            Self::Headers(b) => b.route(headers, out),
        }
    }
}
