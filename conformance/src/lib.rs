//! Charon's wire-conformance suite: named cases that run against any AMQP broker.
//!
//! The suite is a product on its own: point it at a broker URL and it tells you, case by case,
//! whether that broker behaves like RabbitMQ 4.0.5 on the wire. Every case uses only
//! third-party clients ([`lapin`], [`amqprs`], [`fe2o3_amqp`]) or hand-built raw frames
//! ([`raw`] for AMQP 0.9.1, [`raw10`] for AMQP 1.0), never Charon's own crates, so a codec bug
//! shared with the broker cannot hide. AMQP 1.0 uses the same URL (host, port, credentials;
//! the vhost goes into the open's hostname as `vhost:<name>`).
//!
//! ```no_run
//! # async fn demo() {
//! let summary = conformance::run(conformance::RunConfig {
//!     url: "amqp://guest:guest@127.0.0.1:5682/".into(),
//!     filter: None,
//!     jobs: 4,
//!     ..Default::default()
//! })
//! .await;
//! assert_eq!(summary.failed, 0, "{summary}");
//! # }
//! ```
//!
//! # Layout
//! - [`case`]: what a case is (name, description, tags, protocol variants, function).
//! - [`error`]: [`CaseError`], the "expected X, saw Y" failure every case returns.
//! - [`ctx`]: the per-case context: unique names, client connections, cleanup tracking.
//! - [`broker`]: parsing of the `amqp://` URL into the pieces raw sockets and amqprs need.
//! - [`session`]: the plan of a run ([`Planned`] case-runs: each case once per variant, with
//!   the area that defines it) and the [`Session`] that runs one with a timeout and cleans up.
//! - [`runner`]: the CLI's run: parallel execution and a [`Summary`]; cases marked
//!   [`Case::deliberate`] that fail are reported as deliberate differences.
//! - [`harness`]: the same case-runs as one named test each under `cargo test`
//!   (libtest-mimic, `harness = false`), for `tests/conformance.rs` and `tests/reference.rs`.
//! - [`admin`]: the HTTP management API and Prometheus calls cases make (policies, limits,
//!   counters).
//! - [`raw`]: a byte-by-byte AMQP 0.9.1 frame builder and reader for malformed-input cases.
//! - [`raw10`]: a hand-driven AMQP 1.0 peer (SASL, open, sessions, links, transfers, exact
//!   message sections) for drain, outcomes, malformed frames and byte-exact checks.
//! - `fe2o3_kit` (private): the fe2o3-amqp client and RabbitMQ's v2 addresses
//!   (`/queues/:q`, `/exchanges/:x/:key`); `wire` (private): protocol-neutral publish and
//!   drain for cases that run in the publish × consume matrix.
//! - `lapin_kit` / `amqprs_kit` (private): small helpers so cases read as steps and checks;
//!   amqprs callbacks are turned into an event stream to assert closes, returns and confirms.
//! - `dlx_kit` (private): the setup the `dlx.*` cases share: a source queue of the variant's
//!   type dead-lettering to a direct exchange, and a dead-letter queue bound to it.
//! - `cases/*` (private): the cases themselves, one file (or folder) per area.
//!
//! Exact RabbitMQ 4.0.5 behaviour the cases encode is written up in `OBSERVED-0.9.1.md`,
//! `OBSERVED-1.0.md` and `OBSERVED-alarms-limits.md`.

pub mod broker;
pub mod case;
pub mod ctx;
pub mod error;
pub mod harness;
pub mod raw;
pub mod runner;
pub mod session;

pub mod admin;
pub mod raw10;

mod amqprs_kit;
mod cases;
mod dlx_kit;
mod fe2o3_kit;
mod lapin_kit;
mod wire;

pub use case::{Case, Protocol, QueueKind, Variant};
pub use ctx::Ctx;
pub use error::{CaseError, CaseResult, wire_text};
pub use harness::{Harness, Target};
pub use runner::{CaseOutcome, RunConfig, Summary, all_cases, run, run_with};
pub use session::{Planned, Session, plan};
