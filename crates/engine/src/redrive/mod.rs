//! Redrive jobs (issue 20): moving dead letters back, durably, at a chosen rate.
//!
//! A job takes messages from a source queue (a dead-letter queue) and re-publishes them to a
//! destination — back where each died from (its death record), an exchange, or a queue —
//! with at-least-once safety: a source message is acknowledged only after every destination
//! queue confirmed its copy, so a crash can duplicate a message but never lose one. Jobs are
//! kept in the metadata store and resume after a restart.
//!
//! # Layout
//! - [`spec`]: what a job is asked to do (the API's JSON); [`filter`]: which messages it
//!   selects; [`route`]: where one message goes and the copy that goes there;
//! - [`job`]: a job's view, state and control; [`progress`]: its counts and dry-run result;
//! - [`bucket`]: the rate limit;
//! - `pass` (private): one pass over the source — take (consume, or browse with a filter),
//!   publish with confirms, ack or remove; [`sweep`]: a browsing job's durable cursor;
//! - `runner` (private): a job's task; `lifecycle` (private): state changes, saved and
//!   announced ([`events`]);
//! - [`oneshot`]: moving chosen messages once (the dead-letter browser);
//! - [`registry`]: the broker's jobs, as the API uses them; [`error`]: its errors.

pub mod bucket;
pub mod error;
pub mod events;
pub mod filter;
pub mod job;
mod lifecycle;
pub mod oneshot;
mod pass;
pub mod progress;
pub mod registry;
pub mod route;
mod runner;
pub mod spec;
pub mod sweep;

pub use error::RedriveError;
pub use job::{JobState, JobView};
pub use progress::{DryRunResult, Progress};
pub use registry::Redrives;
pub use spec::{DeathChoice, Filter, JobSpec, Target};
