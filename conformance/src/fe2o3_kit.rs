//! Small helpers around the fe2o3-amqp client so AMQP 1.0 cases read as steps and checks.
//!
//! RabbitMQ 4 "v2" addresses are built here: `/queues/:q`, `/exchanges/:x`,
//! `/exchanges/:x/:key`, each name percent-encoded.

use crate::{Ctx, error::CaseError};
use fe2o3_amqp::{
    Connection, Delivery, Receiver, Sender, Session,
    connection::ConnectionHandle,
    link::receiver::CreditMode,
    sasl_profile::SaslProfile,
    session::SessionHandle,
    types::{
        messaging::{Body, Message, Outcome},
        primitives::{Binary, Value},
    },
};
use std::{fmt::Debug, time::Duration};

/// Maps any fe2o3 error into a [`CaseError`] naming the step.
pub(crate) fn err<E: Debug>(step: &'static str) -> impl Fn(E) -> CaseError {
    move |e| CaseError::new(format!("{step}: {e:?}"))
}

/// Percent-encodes a name for a v2 address (everything but RFC 3986 unreserved characters).
pub(crate) fn pct(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `/queues/:queue`
pub(crate) fn queue_addr(queue: &str) -> String {
    format!("/queues/{}", pct(queue))
}

/// `/exchanges/:exchange/:key`, or `/exchanges/:exchange` when `key` is `None`.
pub(crate) fn exchange_addr(exchange: &str, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("/exchanges/{}/{}", pct(exchange), pct(k)),
        None => format!("/exchanges/{}", pct(exchange)),
    }
}

/// The address a 0.9.1 `(exchange, routing key)` publish corresponds to in AMQP 1.0.
pub(crate) fn publish_addr(exchange: &str, key: &str) -> String {
    if exchange.is_empty() { queue_addr(key) } else { exchange_addr(exchange, Some(key)) }
}

/// Default wait for a delivery that must arrive.
pub(crate) const ARRIVE: Duration = Duration::from_secs(5);
/// Wait used by negative assertions.
pub(crate) const QUIET: Duration = Duration::from_millis(300);

/// One fe2o3 connection with one session.
pub(crate) struct Amqp10 {
    conn: ConnectionHandle<()>,
    /// The session links are attached on.
    pub(crate) session: SessionHandle<()>,
    links: usize,
}

impl Amqp10 {
    /// Opens a connection (SASL PLAIN with the broker's credentials, hostname `vhost:<vhost>`)
    /// and begins a session.
    pub(crate) async fn open(ctx: &Ctx) -> Result<Self, CaseError> {
        let b = ctx.broker();
        let hostname = format!("vhost:{}", b.vhost);
        let url = format!("amqp://{}", b.addr());
        let mut conn = Connection::builder()
            .container_id(ctx.name("c"))
            .hostname(hostname.as_str())
            .sasl_profile(SaslProfile::Plain { username: b.user.clone(), password: b.password.clone() })
            .open(url.as_str())
            .await
            .map_err(err("amqp 1.0 open"))?;
        let session = match Session::begin(&mut conn).await {
            Ok(s) => s,
            Err(e) => {
                let _ = conn.close().await;
                return Err(CaseError::new(format!("amqp 1.0 begin: {e:?}")));
            }
        };
        Ok(Self { conn, session, links: 0 })
    }

    fn link_name(&mut self, role: &str) -> String {
        self.links += 1;
        format!("{role}-{}", self.links)
    }

    /// Attaches a sender to `addr` (`None` = the anonymous null target).
    pub(crate) async fn sender(&mut self, addr: Option<&str>) -> Result<Sender, CaseError> {
        let name = self.link_name("sender");
        let builder = Sender::builder().name(name);
        let res = match addr {
            Some(a) => builder.target(a).attach(&mut self.session).await,
            None => {
                let t = fe2o3_amqp::types::messaging::Target::builder().build();
                builder.target(t).attach(&mut self.session).await
            }
        };
        res.map_err(err("attach sender"))
    }

    /// Attaches a receiver to `addr` with `credit` (0 = manual credit, none granted yet).
    pub(crate) async fn receiver(&mut self, addr: &str, credit: u32) -> Result<Receiver, CaseError> {
        let name = self.link_name("receiver");
        let mode = if credit == 0 { CreditMode::Manual } else { CreditMode::Auto(credit) };
        Receiver::builder()
            .name(name)
            .source(addr)
            .credit_mode(mode)
            .attach(&mut self.session)
            .await
            .map_err(err("attach receiver"))
    }

    /// Ends the session and closes the connection (errors ignored: cleanup only).
    pub(crate) async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            let _ = self.session.end().await;
            let _ = self.conn.close().await;
        })
        .await;
    }
}

/// A message whose body is one data section.
pub(crate) fn data_message(body: &[u8]) -> Message<fe2o3_amqp::types::messaging::Data> {
    Message::builder().data(Binary::from(body.to_vec())).build()
}

/// Sends unsettled and returns the broker's outcome.
pub(crate) async fn send(sender: &mut Sender, body: &[u8]) -> Result<Outcome, CaseError> {
    tokio::time::timeout(ARRIVE, sender.send(data_message(body)))
        .await
        .map_err(|_| CaseError::new("no disposition for a 1.0 send within 5 s"))?
        .map_err(err("send"))
}

/// Sends and fails unless the outcome is `accepted`.
pub(crate) async fn send_accepted(sender: &mut Sender, body: &[u8]) -> Result<(), CaseError> {
    match send(sender, body).await? {
        Outcome::Accepted(_) => Ok(()),
        other => Err(CaseError::new(format!("expected outcome accepted got {other:?}"))),
    }
}

/// A received delivery with any body.
pub(crate) type AnyDelivery = Delivery<Body<Value>>;

/// Waits up to `timeout` for the next delivery.
pub(crate) async fn recv(receiver: &mut Receiver, timeout: Duration) -> Result<AnyDelivery, CaseError> {
    match tokio::time::timeout(timeout, receiver.recv::<Body<Value>>()).await {
        Err(_) => Err(CaseError::new(format!("no 1.0 delivery within {} ms", timeout.as_millis()))),
        Ok(r) => r.map_err(err("recv")),
    }
}

/// Fails if a delivery arrives within `wait`.
pub(crate) async fn nothing(receiver: &mut Receiver, wait: Duration) -> Result<(), CaseError> {
    match tokio::time::timeout(wait, receiver.recv::<Body<Value>>()).await {
        Err(_) => Ok(()),
        Ok(Err(e)) => Err(CaseError::new(format!("expected no delivery, the link failed: {e:?}"))),
        Ok(Ok(d)) => Err(CaseError::new(format!("expected no delivery, got {:?}", text(&d)))),
    }
}

/// The body of a delivery as text when it is data sections, else a description.
pub(crate) fn text(d: &AnyDelivery) -> String {
    match d.body() {
        Body::Data(batch) => {
            let mut out = Vec::new();
            for data in batch.iter() {
                out.extend_from_slice(&data.0);
            }
            String::from_utf8_lossy(&out).into_owned()
        }
        other => format!("{other:?}"),
    }
}

/// The raw bytes of a data body (concatenated sections).
pub(crate) fn bytes(d: &AnyDelivery) -> Option<Vec<u8>> {
    match d.body() {
        Body::Data(batch) => {
            let mut out = Vec::new();
            for data in batch.iter() {
                out.extend_from_slice(&data.0);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Header delivery-count of a delivery (0 when there is no header).
pub(crate) fn delivery_count(d: &AnyDelivery) -> u32 {
    d.message().header.as_ref().map_or(0, |h| h.delivery_count)
}
