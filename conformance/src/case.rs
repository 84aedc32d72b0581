//! What a conformance case is.

use crate::{ctx::Ctx, error::CaseResult};
use std::{future::Future, pin::Pin, time::Duration};

/// The future a case function returns.
pub type CaseFuture = Pin<Box<dyn Future<Output = CaseResult> + Send + 'static>>;

/// A case body: gets a fresh [`Ctx`] and returns `Ok(())` or a [`crate::CaseError`].
pub type CaseFn = fn(Ctx) -> CaseFuture;

/// A wire protocol a case (or one side of it) speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// AMQP 0.9.1.
    Amqp091,
    /// AMQP 1.0.
    Amqp10,
}

impl Protocol {
    /// Short label used in expanded case names (`091`, `10`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Amqp091 => "091",
            Self::Amqp10 => "10",
        }
    }
}

/// The queue type a dead-lettering case declares its source queue as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// `x-queue-type: classic`.
    Classic,
    /// `x-queue-type: quorum` (durable).
    Quorum,
}

impl QueueKind {
    /// `classic` / `quorum`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Quorum => "quorum",
        }
    }
}

/// One protocol combination a cross-protocol case runs in.
///
/// Cases that run in a matrix (publish over one protocol, consume over another) list the
/// variants they support; the runner expands each into its own named run
/// (`name[091>10]`) and hands the variant to the case through [`Ctx::variant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Protocol the publishing side uses.
    pub publish: Protocol,
    /// Protocol the consuming side uses.
    pub consume: Protocol,
    /// For cases that run against both queue types: which one this run uses.
    pub queue: Option<QueueKind>,
}

impl Variant {
    /// The plain AMQP 0.9.1 → 0.9.1 variant.
    pub const AMQP091: Self = Self { publish: Protocol::Amqp091, consume: Protocol::Amqp091, queue: None };

    /// A case that speaks AMQP 1.0 only (or 1.0 on both sides of a flow).
    pub const AMQP10: Self = Self { publish: Protocol::Amqp10, consume: Protocol::Amqp10, queue: None };

    /// Publish over 0.9.1, consume over 1.0 (conversion cases).
    pub const TO10: Self = Self { publish: Protocol::Amqp091, consume: Protocol::Amqp10, queue: None };

    /// Publish over 1.0, consume over 0.9.1 (conversion cases).
    pub const TO091: Self = Self { publish: Protocol::Amqp10, consume: Protocol::Amqp091, queue: None };

    /// Whether either side speaks AMQP 1.0.
    pub fn uses_amqp10(self) -> bool {
        self.publish == Protocol::Amqp10 || self.consume == Protocol::Amqp10
    }

    /// The four combinations of 0.9.1 and 1.0 publishers and consumers.
    pub const MATRIX: [Self; 4] = [Self::AMQP091, Self::TO10, Self::TO091, Self::AMQP10];

    /// This variant with a source queue of the given type.
    pub const fn on(self, queue: QueueKind) -> Self {
        Self { publish: self.publish, consume: self.consume, queue: Some(queue) }
    }

    /// 0.9.1 on both sides, for a classic and for a quorum source queue.
    pub const BOTH_QUEUES: [Self; 2] = [Self::AMQP091.on(QueueKind::Classic), Self::AMQP091.on(QueueKind::Quorum)];

    /// The protocol matrix for a classic and for a quorum source queue.
    pub const MATRIX_BOTH_QUEUES: [Self; 8] = [
        Self::AMQP091.on(QueueKind::Classic),
        Self::TO10.on(QueueKind::Classic),
        Self::TO091.on(QueueKind::Classic),
        Self::AMQP10.on(QueueKind::Classic),
        Self::AMQP091.on(QueueKind::Quorum),
        Self::TO10.on(QueueKind::Quorum),
        Self::TO091.on(QueueKind::Quorum),
        Self::AMQP10.on(QueueKind::Quorum),
    ];

    /// The protocol matrix for a classic source queue only.
    pub const MATRIX_CLASSIC: [Self; 4] = [
        Self::AMQP091.on(QueueKind::Classic),
        Self::TO10.on(QueueKind::Classic),
        Self::TO091.on(QueueKind::Classic),
        Self::AMQP10.on(QueueKind::Classic),
    ];

    /// The protocol matrix for a quorum source queue only.
    pub const MATRIX_QUORUM: [Self; 4] = [
        Self::AMQP091.on(QueueKind::Quorum),
        Self::TO10.on(QueueKind::Quorum),
        Self::TO091.on(QueueKind::Quorum),
        Self::AMQP10.on(QueueKind::Quorum),
    ];

    /// Suffix appended to a case name when the case runs in more than one variant:
    /// `[091>10]`, or `[quorum,091>10]` when the queue type varies too.
    pub fn suffix(self) -> String {
        match self.queue {
            None => format!("[{}>{}]", self.publish.label(), self.consume.label()),
            Some(q) => format!("[{},{}>{}]", q.label(), self.publish.label(), self.consume.label()),
        }
    }
}

/// A named conformance case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Stable dotted name, `area.topic.behaviour`; used by `--filter` and in reports.
    pub name: &'static str,
    /// One line saying what RabbitMQ does that the case checks.
    pub description: &'static str,
    /// Free-form tags (`raw`, `slow`, `amqprs`, ...) for selection and reporting.
    pub tags: &'static [&'static str],
    /// Protocol combinations the case supports. A single entry runs under the plain name;
    /// several entries run once each, with [`Variant::suffix`] appended to the name.
    pub variants: &'static [Variant],
    /// The case body.
    pub run: CaseFn,
    /// `Some(why)` when the case deliberately asserts behaviour that differs from RabbitMQ
    /// 4.0.5 (where RabbitMQ crashes or does something no client can use). The runner reports
    /// a failure of such a case separately, as a known difference, not as a failure.
    pub deliberate: Option<&'static str>,
    /// A longer time limit than the run's, for a case that waits on a broker timer
    /// (RabbitMQ checks consumer timeouts on a 60-second channel tick).
    pub timeout: Option<Duration>,
}

impl Case {
    /// Marks the case as a deliberate, documented difference from RabbitMQ 4.0.5.
    pub const fn deliberate(mut self, why: &'static str) -> Self {
        self.deliberate = Some(why);
        self
    }

    /// Gives the case at least `secs` seconds, whatever the run's per-case limit.
    pub const fn timeout(mut self, secs: u64) -> Self {
        self.timeout = Some(Duration::from_secs(secs));
        self
    }
}

/// Builds a [`Case`] for a plain 0.9.1 case from an `async fn(Ctx) -> CaseResult`.
#[macro_export]
#[doc(hidden)]
macro_rules! case {
    ($name:expr, $desc:expr, $f:path) => {
        $crate::case!($name, $desc, [], $f)
    };
    ($name:expr, $desc:expr, [$($tag:expr),*], $f:path) => {
        $crate::Case {
            name: $name,
            description: $desc,
            tags: &[$($tag),*],
            variants: &[$crate::Variant::AMQP091],
            run: |ctx| Box::pin($f(ctx)),
            deliberate: None,
            timeout: None,
        }
    };
}

/// Builds a [`Case`] that runs in the given variants (`[Variant::AMQP10]`, `Variant::MATRIX`...).
#[macro_export]
#[doc(hidden)]
macro_rules! case_v {
    ($name:expr, $desc:expr, $variants:expr, [$($tag:expr),*], $f:path) => {
        $crate::Case {
            name: $name,
            description: $desc,
            tags: &[$($tag),*],
            variants: $variants,
            run: |ctx| Box::pin($f(ctx)),
            deliberate: None,
            timeout: None,
        }
    };
}

/// Builds a plain AMQP 1.0 [`Case`] (tagged `amqp10`).
#[macro_export]
#[doc(hidden)]
macro_rules! case10 {
    ($name:expr, $desc:expr, $f:path) => {
        $crate::case_v!($name, $desc, &[$crate::Variant::AMQP10], ["amqp10"], $f)
    };
    ($name:expr, $desc:expr, [$($tag:expr),*], $f:path) => {
        $crate::case_v!($name, $desc, &[$crate::Variant::AMQP10], ["amqp10" $(, $tag)*], $f)
    };
}

/// Builds a [`Case`] that runs in all four protocol combinations ([`Variant::MATRIX`]).
#[macro_export]
#[doc(hidden)]
macro_rules! case_matrix {
    ($name:expr, $desc:expr, $f:path) => {
        $crate::case_v!($name, $desc, &$crate::Variant::MATRIX, ["matrix"], $f)
    };
}
