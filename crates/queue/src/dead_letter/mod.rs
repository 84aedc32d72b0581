//! Dead lettering, at most once, as RabbitMQ 4.0.5 does it (`rabbit_dead_letter:publish/5`).
//!
//! A queue hands every message that leaves it other than by acknowledgement to its dead-letter
//! sink ([`sink`]) with the reason and its dead-letter settings. Without a dead-letter exchange, or when
//! that exchange does not exist, the message is dropped and counted under the `disabled`
//! strategy. Otherwise its copy gets one more death in its history, loses its TTL, takes the
//! dead-letter exchange as its exchange (and the dead-letter routing key, when set, as its only
//! routing key), is routed through the exchange graph (internal exchanges allowed, alternate
//! exchanges honoured), and goes to every target queue except those where the cycle rule drops
//! it. The queue then forwards the copies through its own outbox ([`crate::outbox`]), so a slow
//! target pushes back on the dead-lettering queue only. What RabbitMQ would drop silently goes
//! to the vhost's fallback queue instead ([`drops`]).
//!
//! Every death, dead-lettered or dropped, is also reported to the vhost's dead-letter event
//! stream ([`events`]) when something listens to it.

mod copy;
pub mod counts;
mod drops;
pub mod events;
mod route;
mod sink;

pub use copy::{dead_lettered_copy, is_cycle};
// Gateways that move messages to a dead-letter queue themselves (Zaqar's claim-count move)
// count them like the queues do.
pub use counts::{DeadLetterCounts, DeadLetterStrategy, count_dead_letter};
pub use drops::{DROP_REASON_ANNOTATION, DROP_REASON_HEADER, DropReason, Drops, FALLBACK_QUEUE, marked_dropped};
pub use route::Router;
pub use sink::DeadLetterSink;
pub(crate) use sink::{DeadLetterer, Forward, Outcome};
