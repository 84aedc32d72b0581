//! Who asks: every `/v2` request names its client (`Client-ID`, a UUID) and its project
//! (`X-Project-ID` in noauth mode; the token's project with token authentication, see
//! [`crate::access`]), checked in Zaqar's hook order (`require_client_id`, then
//! `extract_project_id`) before any handler runs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Zaqar;
use crate::auth::ZaqarAuth;
use crate::error::ZaqarError;

/// Zaqar's `PROJECT_ID_MAX_LEN`.
const PROJECT_ID_MAX_LEN: usize = 256;

/// The client and project of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The project, which names the vhost.
    pub(crate) project: String,
    /// The client's UUID as 32 lowercase hex digits (how it is compared for `echo`).
    pub(crate) client_id: String,
}

/// The UUID in `text` as 32 lowercase hex digits, accepting what Python's `uuid.UUID` does:
/// 32 hex digits (python-zaqarclient sends them without dashes), the dashed form, either in
/// braces or after `urn:uuid:`.
fn parse_uuid(text: &str) -> Option<String> {
    let text = text.trim();
    let text = text.strip_prefix("urn:").unwrap_or(text);
    let text = text.strip_prefix("uuid:").unwrap_or(text);
    let text = text.trim_start_matches('{').trim_end_matches('}');
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit())).then(|| hex.to_ascii_lowercase())
}

/// `require_accepts_json`: an `Accept` header that rules JSON out is refused (406).
fn check_accept(headers: &HeaderMap) -> Result<(), ZaqarError> {
    let Some(accept) = headers.get("accept").and_then(|v| v.to_str().ok()) else { return Ok(()) };
    let accepted = accept
        .split(',')
        .map(|range| range.split(';').next().unwrap_or_default().trim())
        .any(|range| matches!(range, "application/json" | "application/*" | "*/*" | ""));
    if accepted {
        return Ok(());
    }
    Err(ZaqarError::new(
        StatusCode::NOT_ACCEPTABLE,
        "Media type not acceptable",
        "\nEndpoint only serves `application/json`; specify client-side\nmedia type support with the \"Accept\" header.",
    ))
}

/// `require_content_type_be_non_urlencoded`: a form-encoded body is refused.
fn check_not_form(headers: &HeaderMap) -> Result<(), ZaqarError> {
    let has_body = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > 0);
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    if has_body && form {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Invalid Content-Type",
            "Endpoint does not accept `application/x-www-form-urlencoded` content; currently supported media type is `application/json`; specify proper client-side media type with the \"Content-Type\" header.",
        ));
    }
    Ok(())
}

/// Reads and checks the headers as Zaqar's hooks do, in their order; `token_project` (a
/// token's scope) replaces `X-Project-ID`, as keystonemiddleware replaces it.
pub(crate) fn caller(headers: &HeaderMap, token_project: Option<&str>) -> Result<Caller, ZaqarError> {
    check_accept(headers)?;
    let client = headers.get("client-id").and_then(|v| v.to_str().ok());
    let Some(client) = client else {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Missing header value",
            "The Client-ID header is required.",
        ));
    };
    let client_id = parse_uuid(client)
        .ok_or_else(|| ZaqarError::new(StatusCode::BAD_REQUEST, "Wrong UUID value", "Malformed hexadecimal UUID."))?;
    let project = token_project.or_else(|| headers.get("x-project-id").map(|v| v.to_str().unwrap_or_default()));
    match project {
        None => {
            Err(ZaqarError::new(StatusCode::BAD_REQUEST, "Project-Id Missing", "The header X-PROJECT-ID was missing"))
        }
        Some("") => Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Empty project header not allowed",
            "X-PROJECT-ID cannot be an empty string. Specify the right header X-PROJECT-ID and retry.",
        )),
        Some(project) => {
            check_not_form(headers)?;
            Ok(Caller { project: project.to_owned(), client_id })
        }
    }
}

/// Zaqar's `validate_queue_identification` hook: the name's rules (`^[a-zA-Z0-9_\-.]+$`, at
/// most 64 characters) and the project's length.
pub(crate) fn check_queue(caller: &Caller, queue: &str) -> Result<(), ZaqarError> {
    let valid_name = !queue.is_empty()
        && queue.len() <= 64
        && queue.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid_name && caller.project.len() <= PROJECT_ID_MAX_LEN {
        return Ok(());
    }
    Err(ZaqarError::new(
        StatusCode::BAD_REQUEST,
        "Invalid queue identification",
        "The format of the submitted queue name or project id is not valid.",
    ))
}

/// Whether `name` may be a Zaqar queue name (listing leaves other engine queues out).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The middleware: checks the headers of every `/v2` request (and, with token
/// authentication, its token and the user's permissions) and hands the [`Caller`] on.
pub(crate) async fn identify(State(zaqar): State<Arc<Zaqar>>, mut request: Request, next: Next) -> Response {
    // Identified by the node that forwarded it (see `forward.rs`).
    if let Some(crate::forward::Forwarded(caller)) = request.extensions().get().cloned() {
        request.extensions_mut().insert(caller);
        return next.run(request).await;
    }
    let caller = match zaqar.config.auth {
        ZaqarAuth::NoAuth => caller(request.headers(), None),
        ZaqarAuth::Tokens => {
            let token = match crate::access::token(&zaqar, request.headers()) {
                Ok(token) => token,
                Err(refused) => return refused.into_response(),
            };
            let caller = caller(request.headers(), token.project.as_deref());
            if let Ok(caller) = &caller
                && let Err(refused) = crate::access::authorize(&zaqar, &token, caller, request.method(), request.uri())
            {
                return refused.into_response();
            }
            caller
        }
    };
    match caller {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_read_as_python_reads_them() {
        let hex = "0123456789abcdef0123456789ABCDEF";
        assert_eq!(parse_uuid(hex).as_deref(), Some("0123456789abcdef0123456789abcdef"));
        assert!(parse_uuid("01234567-89ab-cdef-0123-456789abcdef").is_some());
        assert!(parse_uuid("{01234567-89ab-cdef-0123-456789abcdef}").is_some());
        assert!(parse_uuid("urn:uuid:01234567-89ab-cdef-0123-456789abcdef").is_some());
        assert_eq!(parse_uuid("0123456789abcdef0123456789abcde"), None);
        assert_eq!(parse_uuid("0123456789abcdef0123456789abcdeg"), None);
        assert_eq!(parse_uuid("not-a-uuid"), None);
    }
}
