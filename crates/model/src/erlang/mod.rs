//! Erlang term printing, the one copy every adapter uses.
//!
//! RabbitMQ builds many texts clients see (connection-close reasons, management error bodies,
//! policy and argument validation failures) with `io_lib:format("~tp", ...)`, so Charon prints
//! the same values the way Erlang does. The RabbitMQ paths print binaries in slightly
//! different ways, and each caller picks the function that matches what RabbitMQ 4.0.5 was
//! observed to send on its path (the texts are pinned in the callers' unit tests and in
//! `conformance/`):
//!
//! - [`binary`]: the AMQP 0.9.1 reader's frame errors (`cannot decode <<...>>`, `all octets =
//!   <<>>`): an empty binary is `<<>>`.
//! - [`parsed_binary`]: the AMQP 1.0 reader's parser exceptions and `Unexpected frame` texts,
//!   which print the values `amqp10_binary_parser` produced: an empty binary is `<<"">>`.
//! - [`unicode_binary`]: the AMQP 1.0 management bodies, which print UTF-8 text as
//!   `<<"é"/utf8>>` and escape control characters the way `io_lib` does.
//! - [`text`]: names and JSON strings printed verbatim between `<<"` and `">>` (policy,
//!   limit and `x-match` validation, attach rejections).
//! - [`term`]: a JSON-born [`Value`](crate::Value) (policy definitions).
//! - [`ErlangText`]: `~tp` with its 80-column line breaking, for the 0.9.1 frame-error texts.

mod pretty;
mod terms;

pub use pretty::ErlangText;
pub use terms::{binary, char_string, float, list, parsed_binary, term, text, tuple, unicode_binary};
