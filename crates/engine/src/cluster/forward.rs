//! HTTP requests a node's gateway sends to another node: an HTTP service whose state lives
//! with a queue (Zaqar's claims and numbered messages) answers a request for a queue of another
//! node by having that node answer it, as if it had been asked there. The asking node has
//! authenticated the client; what it found (the caller) travels as the service's own
//! `context`, which the answering node trusts because the asking node is a member (the cluster
//! transport authenticated it). A forwarded request is never forwarded again.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use charon_cluster::transport::Connection;
use charon_cluster::transport::frame::Kind;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use super::queues::wire::{self, Envelope, Reply, Request};
use crate::error::EngineError;

/// How long the answering node may take (a Zaqar post waits up to 30 s for its confirms).
const TIMEOUT: Duration = Duration::from_secs(40);

/// Most bytes a forwarded body may have (Zaqar's own limit on a post is 256 KiB; a page of
/// the dead-letter browser, at most 500 messages, is the largest answer): in base64, within
/// the transport's 64 MiB frame.
pub const MAX_BODY: usize = 32 << 20;

/// A request for a service of another node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpForward {
    /// The service that answers it (`zaqar`).
    pub service: String,
    /// What the asking node's service found out about the caller, in the service's terms.
    pub context: String,
    /// The method.
    pub method: String,
    /// The path and query.
    pub uri: String,
    /// The headers (names lowercase).
    pub headers: Vec<(String, String)>,
    /// The body.
    #[serde(with = "base64_body")]
    pub body: Vec<u8>,
}

/// The answer to an [`HttpForward`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// The headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    #[serde(with = "base64_body")]
    pub body: Vec<u8>,
}

impl HttpForward {
    /// The request of `parts` and `body`, for `service` of another node, with what this node's
    /// service found out about the caller (`context`).
    #[must_use]
    pub fn new(service: &str, context: String, parts: &http::request::Parts, body: Vec<u8>) -> Self {
        let uri = parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
        Self {
            service: service.to_owned(),
            context,
            method: parts.method.as_str().to_owned(),
            uri,
            headers: headers_of(&parts.headers),
            body,
        }
    }

    /// The request again, as the answering node's service runs it.
    ///
    /// # Errors
    /// A method or URI that is none (a peer's bytes).
    pub fn into_request(self) -> Result<http::Request<Vec<u8>>, String> {
        let mut request = http::Request::new(self.body);
        *request.method_mut() = self.method.parse().map_err(|e: http::method::InvalidMethod| e.to_string())?;
        *request.uri_mut() = self.uri.parse().map_err(|e: http::uri::InvalidUri| e.to_string())?;
        fill(request.headers_mut(), self.headers);
        Ok(request)
    }
}

impl HttpAnswer {
    /// The answer of `parts` and `body`.
    #[must_use]
    pub fn new(parts: &http::response::Parts, body: Vec<u8>) -> Self {
        Self { status: parts.status.as_u16(), headers: headers_of(&parts.headers), body }
    }

    /// An answer with `status` and nothing else.
    #[must_use]
    pub fn status(status: http::StatusCode) -> Self {
        Self { status: status.as_u16(), headers: Vec::new(), body: Vec::new() }
    }

    /// The response again, as the asking node answers its client.
    #[must_use]
    pub fn into_response(self) -> http::Response<Vec<u8>> {
        let mut response = http::Response::new(self.body);
        *response.status_mut() = http::StatusCode::from_u16(self.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        fill(response.headers_mut(), self.headers);
        response
    }
}

/// The headers that are text (a header that is not travels no further).
fn headers_of(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter().filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))).collect()
}

/// Adds `headers` to `map`, leaving out what is no header (a peer's bytes).
fn fill(map: &mut http::HeaderMap, headers: Vec<(String, String)>) {
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (http::HeaderName::try_from(name), http::HeaderValue::try_from(value)) {
            map.append(name, value);
        }
    }
}

/// What a service answers a forwarded request with.
pub type Answering = Pin<Box<dyn Future<Output = HttpAnswer> + Send>>;

/// A service that answers forwarded requests.
pub type Service = Arc<dyn Fn(HttpForward) -> Answering + Send + Sync>;

/// The services of this node that answer requests forwarded by other nodes, by name.
#[derive(Default)]
pub struct Services(RwLock<HashMap<String, Service>>);

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.read().keys()).finish()
    }
}

impl Services {
    /// Has `service` answer the requests forwarded to it.
    pub fn serve(&self, name: &str, service: Service) {
        self.0.write().insert(name.to_owned(), service);
    }

    /// Answers `request` by its service; `None` when this node has no such service.
    pub(crate) async fn answer(&self, request: HttpForward) -> Option<HttpAnswer> {
        let service = self.0.read().get(&request.service).cloned()?;
        Some(service(request).await)
    }
}

impl super::Cluster {
    /// Has member `node` answer `request`.
    ///
    /// # Errors
    /// [`EngineError::Store`] when `node` is no running member, does not answer in time, or has
    /// no such service.
    pub async fn forward_http(&self, node: &str, request: HttpForward) -> Result<HttpAnswer, EngineError> {
        let down = || EngineError::Store(format!("node '{node}' is down or inaccessible"));
        let address = self.address_of(node).ok_or_else(down)?;
        if request.body.len() > MAX_BODY {
            return Err(EngineError::Store(format!("a forwarded body is at most {MAX_BODY} bytes")));
        }
        let queues = self.queues();
        let mut connection = Connection::new(queues.identity().clone(), address);
        let envelope =
            Envelope { from: queues.identity().name.clone(), boot: super::boot(), request: Request::Http(request) };
        let answer = tokio::time::timeout(
            self.patience(node, TIMEOUT),
            connection.call(0, Kind::Queue, wire::encode(&envelope, &[])),
        );
        match answer.await {
            Ok(Ok(body)) => match wire::decode::<Reply>(body) {
                Ok((Reply::Http(answer), _)) => Ok(answer),
                Ok((Reply::Refused(refusal), _)) => Err(EngineError::Store(format!("{refusal:?}"))),
                _ => Err(down()),
            },
            _ => Err(down()),
        }
    }
}

/// A body as base64 text in the JSON header (the bytes a peer sends are decoded here, bounded
/// by the frame's own limit).
mod base64_body {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(body: &[u8], out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&base64::engine::general_purpose::STANDARD.encode(body))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(input)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_forwarded_request_reaches_its_service_and_its_answer_comes_back_whole() {
        let services = Services::default();
        services.serve(
            "echo",
            Arc::new(|request: HttpForward| {
                Box::pin(async move {
                    let headers = vec![("x-context".to_owned(), request.context)];
                    HttpAnswer { status: 201, headers, body: request.body }
                }) as Answering
            }),
        );
        let body: Vec<u8> = (0..=255u8).collect();
        let request = HttpForward {
            service: "echo".into(),
            context: "p1".into(),
            method: "POST".into(),
            uri: "/v2/queues/q/messages?x=1".into(),
            headers: vec![("client-id".into(), "abc".into())],
            body: body.clone(),
        };
        // Through the wire's encoding, as a peer sends it.
        let envelope = Envelope { from: "n2".into(), boot: 1, request: Request::Http(request) };
        let (Envelope { request: Request::Http(request), .. }, _) =
            wire::decode::<Envelope>(wire::encode(&envelope, &[])).unwrap()
        else {
            panic!("not an HTTP request")
        };
        let answer = services.answer(request.clone()).await.unwrap();
        assert_eq!((answer.status, answer.body, answer.headers[0].1.as_str()), (201, body, "p1"));
        assert!(services.answer(HttpForward { service: "none".into(), ..request.clone() }).await.is_none());
        // Back into a request, and an answer into a response; what is no method, URI or
        // header from a peer is refused or left out, never a panic.
        let again = request.clone().into_request().unwrap();
        assert_eq!(
            (again.method().as_str(), again.uri().query(), again.headers()["client-id"].to_str().unwrap()),
            ("POST", Some("x=1"), "abc")
        );
        assert!(HttpForward { method: "P OST".into(), ..request.clone() }.into_request().is_err());
        assert!(HttpForward { uri: "http://[".into(), ..request.clone() }.into_request().is_err());
        let strange = HttpAnswer { status: 99, headers: vec![("bad name".into(), "v".into())], body: vec![] };
        let response = strange.into_response();
        assert_eq!((response.status().as_u16(), response.headers().len()), (502, 0));
        // A body that is no base64 is an error, not a panic.
        let bad = br#"{"status":200,"headers":[],"body":"!!"}"#;
        assert!(serde_json::from_slice::<HttpAnswer>(bad).is_err());
    }
}
