//! What an import refuses, with the reason RabbitMQ 4.0.5's `rabbit_definitions:format/1` gives
//! for the same input (observed), so that scripts matching on it work against either broker.

use charon_engine::{AccessError, EngineError, ErrorKind};
use charon_model::erlang;

use super::pretty::{self, Term};

/// An import that stopped: what was applied before the failing object stays, as in RabbitMQ
/// (its import is not a transaction either).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The body is not a JSON object: `failed_to_parse_json`.
    #[error("failed_to_parse_json")]
    NotJson,
    /// A vhost-scoped import names a vhost that does not exist.
    #[error("vhost_not_found")]
    NoSuchVhost,
    /// An object is invalid or could not be applied; the text is RabbitMQ's reason.
    #[error("{0}")]
    Invalid(String),
    /// The store could not record a change.
    #[error("{0}")]
    Store(String),
}

impl ImportError {
    /// `{no_such_vhost, V}` as RabbitMQ formats it.
    pub(crate) fn missing_vhost(vhost: &str) -> Self {
        Self::Invalid(format!("Please create virtual host \"{vhost}\" prior to importing definitions."))
    }

    /// A term RabbitMQ prints with `~p`, such as `{no_such_user,<<"u">>}`.
    pub(crate) fn term(tag: &str, name: &str) -> Self {
        Self::Invalid(pretty::print(&Term::Tuple(vec![Term::Atom(tag.to_owned()), Term::Binary(name.to_owned())])))
    }

    /// `{resources_missing,[{not_found,{resource,<<"v">>,queue,<<"q">>}}, ...]}` for a binding
    /// whose ends are missing (`(kind, name)` each).
    pub(crate) fn resources_missing(vhost: &str, missing: &[(&str, &str)]) -> Self {
        let resource = |(kind, name): &(&str, &str)| {
            Term::Tuple(vec![
                Term::Atom("not_found".into()),
                Term::Tuple(vec![
                    Term::Atom("resource".into()),
                    Term::Binary(vhost.to_owned()),
                    Term::Atom((*kind).to_owned()),
                    Term::Binary((*name).to_owned()),
                ]),
            ])
        };
        let term = Term::Tuple(vec![
            Term::Atom("resources_missing".into()),
            Term::List(missing.iter().map(resource).collect()),
        ]);
        Self::Invalid(pretty::print(&term))
    }

    /// A validation failure of a policy or parameter, as RabbitMQ's `exit/1` of an
    /// `error_string` carries it: the HTML-escaped text with ` (where)` appended, as a binary.
    pub(crate) fn validation(reason: &str, place: &str) -> Self {
        let text = format!("Validation failed\n\n{reason}\n ({place})");
        let escaped = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        Self::Invalid(erlang::unicode_binary(escaped.as_bytes()))
    }

    /// An engine refusal, as RabbitMQ formats an `#amqp_error{}`: `precondition_failed: text`.
    pub(crate) fn engine(error: EngineError) -> Self {
        let name = match error.kind() {
            ErrorKind::NotFound => "not_found",
            ErrorKind::AccessRefused => "access_refused",
            ErrorKind::ResourceLocked => "resource_locked",
            ErrorKind::PreconditionFailed => "precondition_failed",
            ErrorKind::NotAllowed => "not_allowed",
            ErrorKind::NotImplemented => "not_implemented",
            ErrorKind::InternalError => return Self::Store(error.to_string()),
        };
        Self::Invalid(format!("{name}: {error}"))
    }

    /// An access-registry refusal.
    pub(crate) fn access(error: AccessError) -> Self {
        match error {
            AccessError::BadRequest(reason) => Self::Invalid(reason),
            AccessError::NoSuchUser(user) => Self::term("no_such_user", &user),
            AccessError::NoSuchVhost(vhost) => Self::missing_vhost(&vhost),
            AccessError::Store(reason) => Self::Store(reason),
        }
    }
}
