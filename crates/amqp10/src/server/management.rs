//! The `/management` node: HTTP over AMQP on a link pair, as RabbitMQ 4's
//! `rabbit_amqp_management` implements it and `rabbitmq-amqp-python-client` uses it.
//! Requests carry the method in `subject`, the path in `to` and a map body; responses carry
//! the status in `subject` and correlate by `message-id`.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use fe2o3_amqp_types::messaging::Properties;
use serde_amqp::Value as Amqp;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::primitives::OrderedMap;

use charon_engine::{Broker, Client};

use super::frames::Credit;
use super::management_body::{Status, text};
use super::management_http::{HttpApi, Refusal};
use crate::codec::{decode_exact, decode_value, encoded_len};
use crate::proto::Connection;

#[derive(Debug, Default)]
struct Pair {
    requests: Option<(u16, u32)>,
    responses: Option<(u16, u32)>,
    credit: u32,
    delivery_count: u32,
    waiting: VecDeque<Vec<u8>>,
}

/// A management request that ends its session: the session's channel, the error condition
/// and its description.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct EndSession {
    pub(crate) channel: u16,
    pub(crate) condition: &'static str,
    pub(crate) description: String,
}

/// Management link pairs by link name.
#[derive(Debug, Default)]
pub(crate) struct ManagementPairs {
    pairs: HashMap<String, Pair>,
    /// Declared durability of the exclusive queues this connection declared. The engine keeps
    /// exclusive queues transient; RabbitMQ reports and compares the flag as declared.
    pub(super) exclusive_durable: HashMap<String, bool>,
}

impl ManagementPairs {
    pub(crate) fn attach_requests(&mut self, name: &str, channel: u16, handle: u32) {
        self.pairs.entry(name.to_owned()).or_default().requests = Some((channel, handle));
    }

    pub(crate) fn attach_responses(&mut self, name: &str, channel: u16, handle: u32) {
        let pair = self.pairs.entry(name.to_owned()).or_default();
        pair.responses = Some((channel, handle));
        pair.delivery_count = super::attach::INITIAL_DELIVERY_COUNT;
    }

    pub(crate) fn forget(&mut self, name: &str, channel: u16, handle: u32) {
        if let Some(pair) = self.pairs.get_mut(name) {
            if pair.requests == Some((channel, handle)) {
                pair.requests = None;
            }
            if pair.responses == Some((channel, handle)) {
                pair.responses = None;
            }
            if pair.requests.is_none() && pair.responses.is_none() {
                self.pairs.remove(name);
            }
        }
    }

    /// Handles one request on `pair` and queues its response on the pair's response link;
    /// the error ends the request's session, as RabbitMQ ends it.
    ///
    /// Like RabbitMQ, a request on a pair whose response link is missing or has no credit left
    /// ends the session with `amqp:precondition-failed`, unexecuted.
    pub(crate) async fn request(
        &mut self,
        (broker, client): (&Broker, &Client),
        pair: &str,
        payload: &Bytes,
        conn: &mut Connection,
    ) -> Result<(), EndSession> {
        let Some(entry) = self.pairs.get_mut(pair) else {
            return Ok(());
        };
        let channel = entry.requests.map(|(channel, _)| channel).unwrap_or_default();
        let end = |condition, description: &str| EndSession { channel, condition, description: description.to_owned() };
        match (entry.responses, entry.credit) {
            (None, _) => {
                return Err(end("amqp:precondition-failed", "received transfer on half open management link pair"));
            }
            (Some(_), 0) => {
                return Err(end(
                    "amqp:precondition-failed",
                    "insufficient credit (0) for management link from RabbitMQ to client",
                ));
            }
            (Some(_), _) => {}
        }
        // RabbitMQ crashes the session on a request it cannot decode.
        let (properties, body) = request_sections(payload)
            .ok_or_else(|| end("amqp:decode-error", "management request without properties or undecodable"))?;
        let method = properties.subject.clone().unwrap_or_default();
        let target = properties.to.clone().unwrap_or_default();
        let mut api = HttpApi { broker, client, exclusive_durable: &mut self.exclusive_durable };
        let (status, response) = match api.handle(&method, &target, &body).await {
            Ok(ok) => ok,
            Err(Refusal::Status(Status(status, explanation))) => {
                tracing::warn!(method, target, explanation, "management request failed");
                (status, Amqp::String(explanation))
            }
            Err(Refusal::Unauthorized(description)) => return Err(end("amqp:unauthorized-access", &description)),
        };
        let mut message = Vec::new();
        let correlation = properties.message_id.map(|id| crate::codec::encode_value(&id)).unwrap_or_else(|| vec![0x40]);
        response_sections(&mut message, status, &correlation, &response);
        let Some(entry) = self.pairs.get_mut(pair) else {
            return Ok(());
        };
        entry.waiting.push_back(message);
        self.send_responses(pair, conn);
        Ok(())
    }

    /// The client granted credit on `pair`'s response link.
    pub(crate) fn credit(&mut self, pair: &str, credit: &Credit, conn: &mut Connection) {
        let &Credit { delivery_count, link_credit, drain, echo, .. } = credit;
        let Some(entry) = self.pairs.get_mut(pair) else {
            return;
        };
        let rcv = delivery_count.unwrap_or(super::attach::INITIAL_DELIVERY_COUNT);
        entry.credit = charon_model::link_credit_snd(rcv, link_credit, entry.delivery_count);
        self.send_responses(pair, conn);
        let Some(entry) = self.pairs.get_mut(pair) else {
            return;
        };
        if drain {
            entry.delivery_count = entry.delivery_count.wrapping_add(entry.credit);
            entry.credit = 0;
        }
        if drain || echo {
            let (count, credit) = (entry.delivery_count, entry.credit);
            if let Some((channel, handle)) = entry.responses {
                conn.consumer_flow(channel, handle, count, credit, drain, 0);
            }
        }
    }

    fn send_responses(&mut self, pair: &str, conn: &mut Connection) {
        let Some(entry) = self.pairs.get_mut(pair) else {
            return;
        };
        let Some((channel, handle)) = entry.responses else {
            return;
        };
        while entry.credit > 0 {
            let Some(message) = entry.waiting.pop_front() else {
                break;
            };
            entry.credit -= 1;
            entry.delivery_count = entry.delivery_count.wrapping_add(1);
            conn.send_transfer(channel, handle, &[], true, &message);
        }
    }
}

/// The request's properties and amqp-value body (`null` when absent), taken from its sections
/// in whatever order they come, as RabbitMQ's `decode_req/2` does (rabbitmq-amqp-python-client
/// puts a null body before the properties).
fn request_sections(payload: &[u8]) -> Option<(Properties, Amqp)> {
    let mut properties = None;
    let mut body = Amqp::Null;
    let mut at = 0;
    while let Some(rest) = payload.get(at..).filter(|rest| !rest.is_empty()) {
        let len = encoded_len(rest).ok()?;
        let section = rest.get(..len)?;
        let Amqp::Described(described) = decode_value(section).ok()? else {
            return None;
        };
        let code = match &described.descriptor {
            Descriptor::Code(code) => *code,
            Descriptor::Name(name) if name.as_str() == "amqp:properties:list" => 0x73,
            Descriptor::Name(name) if name.as_str() == "amqp:amqp-value:*" => 0x77,
            Descriptor::Name(_) => 0,
        };
        match code {
            0x73 => properties = Some(decode_exact::<Properties>(section).ok()?),
            0x77 => body = described.value,
            _ => {}
        }
        at += len;
    }
    Some((properties?, body))
}

/// Response sections: properties (subject = status, correlation-id = request message-id),
/// application-properties `http:response = 1.1`, and an `amqp-value` body.
fn response_sections(out: &mut Vec<u8>, status: &str, correlation_id: &[u8], body: &Amqp) {
    // properties: described list [message-id, user-id, to, subject, reply-to, correlation-id]
    let mut fields = Vec::new();
    fields.extend([0x40, 0x40, 0x40]);
    fields.extend(crate::codec::encode_value(&Amqp::String(status.to_owned())));
    fields.push(0x40);
    fields.extend_from_slice(correlation_id);
    out.extend([0x00, 0x53, 0x73, 0xd0]);
    out.extend(u32::try_from(fields.len() + 4).unwrap_or(0).to_be_bytes());
    out.extend(6u32.to_be_bytes());
    out.extend(fields);
    let mut app = OrderedMap::new();
    app.insert(text("http:response"), text("1.1"));
    out.extend([0x00, 0x53, 0x74]);
    out.extend(crate::codec::encode_value(&Amqp::Map(app)));
    out.extend([0x00, 0x53, 0x77]);
    out.extend(crate::codec::encode_value(body));
}
