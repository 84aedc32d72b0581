//! One link's protocol state: its credit and delivery-count, and the message a client sender
//! is part way through sending.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Error, Role};
use fe2o3_amqp_types::performatives::{Attach, Transfer};
use serde_bytes::ByteBuf;

use super::erlang::NO_TRACE;
use super::errors::error;

/// RabbitMQ's `?INITIAL_DELIVERY_COUNT` (close to wrap-around on purpose, so that serial
/// arithmetic is exercised early).
pub(super) const INITIAL_DELIVERY_COUNT: u32 = u32::MAX - 4;
/// Credit granted to a publisher link (RabbitMQ's `max_link_credit`).
pub(super) const MAX_LINK_CREDIT: u32 = 170;

/// Which way messages flow on a link, from the broker's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRole {
    /// The client sends, we receive (a publisher).
    Incoming,
    /// We send, the client receives (a consumer).
    Outgoing,
}

/// Why a link refuses a transfer, and how far the failure reaches: RabbitMQ checks some
/// things in the link (which it detaches) and some in the session (which it ends).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Refusal {
    /// Detach the link with this error.
    Link(Error),
    /// End the session with this error.
    Session(Error),
}

/// A message whose last transfer frame arrived.
#[derive(Debug, PartialEq)]
pub(super) struct Arrival {
    /// Delivery id of the first transfer.
    pub(super) delivery_id: u32,
    /// Delivery tag of the first transfer.
    pub(super) delivery_tag: Bytes,
    /// Settled by the sender on any of its transfers.
    pub(super) settled: bool,
    /// The message bytes, zero-copy when they came in one frame.
    pub(super) payload: Bytes,
    /// The link's delivery-count when this message made it top the sender's credit up to
    /// [`MAX_LINK_CREDIT`] (the sender must be told with a flow); `None` when it did not.
    pub(super) regranted: Option<u32>,
}

/// A message arriving in several transfer frames.
#[derive(Debug)]
struct Partial {
    delivery_id: u32,
    delivery_tag: Bytes,
    settled: bool,
    /// The only chunk so far, kept as it came so that a one-frame message is not copied.
    first: Option<Bytes>,
    /// The chunks once there is more than one.
    rest: BytesMut,
    size: usize,
}

impl Partial {
    fn push(&mut self, chunk: Bytes) {
        self.size += chunk.len();
        match self.first.take() {
            None if self.rest.is_empty() => self.first = Some(chunk),
            Some(first) => {
                self.rest.extend_from_slice(&first);
                self.rest.extend_from_slice(&chunk);
            }
            None => self.rest.extend_from_slice(&chunk),
        }
    }

    fn take(&mut self) -> Bytes {
        match self.first.take() {
            Some(only) => only,
            None => std::mem::take(&mut self.rest).freeze(),
        }
    }
}

/// An attached link.
#[derive(Debug)]
pub(super) struct Link {
    role: LinkRole,
    /// Incoming: transfers the sender may still send. Outgoing: unused.
    credit: u32,
    /// Incoming: the sender's delivery-count as we track it. Outgoing: ours.
    delivery_count: u32,
    partial: Option<Partial>,
}

impl Link {
    /// The link our attach `reply` accepts. A publisher link starts with the full credit (the
    /// flow announcing it follows once the sender's delivery-count is known); a consumer link
    /// counts deliveries from the count the reply announces.
    pub(super) fn attached(reply: &Attach) -> Self {
        let (role, credit) =
            if reply.role == Role::Receiver { (LinkRole::Incoming, MAX_LINK_CREDIT) } else { (LinkRole::Outgoing, 0) };
        let delivery_count = match role {
            LinkRole::Incoming => INITIAL_DELIVERY_COUNT,
            LinkRole::Outgoing => reply.initial_delivery_count.unwrap_or(INITIAL_DELIVERY_COUNT),
        };
        Self { role, credit, delivery_count, partial: None }
    }

    /// Which way messages flow.
    pub(super) fn role(&self) -> LinkRole {
        self.role
    }

    /// Takes the sender's delivery-count and the credit granted to it.
    pub(super) fn grant(&mut self, sender_delivery_count: u32, credit: u32) {
        self.delivery_count = sender_delivery_count;
        self.credit = credit;
    }

    /// Takes the delivery-count of a consumer link as the broker tracks it.
    pub(super) fn set_delivery_count(&mut self, delivery_count: u32) {
        self.delivery_count = delivery_count;
    }

    /// Counts a message we send on a consumer link.
    pub(super) fn count_sent(&mut self) {
        self.delivery_count = self.delivery_count.wrapping_add(1);
    }

    /// Tops a publisher link that is down to half its credit or less back up (publishing
    /// resumed). Returns the delivery-count to announce with the new credit, `None` when the
    /// link needs nothing.
    pub(super) fn top_up(&mut self) -> Option<u32> {
        if self.role == LinkRole::Incoming && self.credit <= MAX_LINK_CREDIT / 2 {
            self.credit = MAX_LINK_CREDIT;
            return Some(self.delivery_count);
        }
        None
    }

    /// A transfer frame from the client sender. Returns the message once its last frame is in
    /// (`None` while more frames follow). A message takes one credit when it completes; when
    /// that leaves half the credit or less and publishing is not `paused`, the credit is
    /// topped up again, as RabbitMQ does.
    ///
    /// # Errors
    /// A transfer without credit or a message over `max_message_size` detaches the link; a
    /// first transfer without a delivery id, or a continuation naming another one, ends the
    /// session (RabbitMQ's session process checks those).
    pub(super) fn on_transfer(
        &mut self,
        transfer: Transfer,
        payload: Bytes,
        max_message_size: usize,
        paused: bool,
    ) -> Result<Option<Arrival>, Refusal> {
        match self.partial.as_ref() {
            None => {
                if self.credit == 0 {
                    return Err(Refusal::Link(error("amqp:link:transfer-limit-exceeded", "")));
                }
                let Some(delivery_id) = transfer.delivery_id else {
                    // RabbitMQ's session process crashes matching the missing id.
                    let text = format!("{{badmatch,undefined}}{NO_TRACE}");
                    return Err(Refusal::Session(error("amqp:internal-error", text)));
                };
                self.partial = Some(Partial {
                    delivery_id,
                    delivery_tag: Bytes::from(transfer.delivery_tag.map(ByteBuf::into_vec).unwrap_or_default()),
                    settled: transfer.settled.unwrap_or(false),
                    first: None,
                    rest: BytesMut::new(),
                    size: 0,
                });
            }
            Some(partial) => {
                if let Some(id) = transfer.delivery_id
                    && id != partial.delivery_id
                {
                    // RabbitMQ prints the field as its Erlang term and checks it in the session.
                    let text = format!(
                        "delivery-id of continuation transfer ({{uint,{id}}}) differs from delivery-id on first transfer ({})",
                        partial.delivery_id
                    );
                    return Err(Refusal::Session(error("amqp:connection:framing-error", text)));
                }
            }
        }
        let Some(partial) = self.partial.as_mut() else {
            return Ok(None);
        };
        partial.push(payload);
        partial.settled |= transfer.settled.unwrap_or(false);
        if partial.size > max_message_size {
            let text =
                format!("message size ({} bytes) > maximum message size ({max_message_size} bytes)", partial.size);
            return Err(Refusal::Link(error("amqp:link:message-size-exceeded", text)));
        }
        if transfer.more {
            return Ok(None);
        }
        let Some(mut partial) = self.partial.take() else {
            return Ok(None);
        };
        self.credit = self.credit.saturating_sub(1);
        self.delivery_count = self.delivery_count.wrapping_add(1);
        let regrant = self.credit <= MAX_LINK_CREDIT / 2 && !paused;
        if regrant {
            self.credit = MAX_LINK_CREDIT;
        }
        let payload = partial.take();
        Ok(Some(Arrival {
            delivery_id: partial.delivery_id,
            delivery_tag: partial.delivery_tag,
            settled: partial.settled,
            payload,
            regranted: regrant.then_some(self.delivery_count),
        }))
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::definitions::{Handle, SenderSettleMode};

    use super::*;

    fn reply(role: Role, initial_delivery_count: Option<u32>) -> Attach {
        Attach {
            name: "link".into(),
            handle: Handle(0),
            role,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: Default::default(),
            source: None,
            target: None,
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    fn publisher() -> Link {
        Link::attached(&reply(Role::Receiver, None))
    }

    fn transfer(delivery_id: Option<u32>, more: bool) -> Transfer {
        Transfer {
            handle: Handle(0),
            delivery_id,
            delivery_tag: delivery_id.map(|id| ByteBuf::from(id.to_be_bytes().to_vec())),
            message_format: Some(0),
            settled: Some(false),
            more,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        }
    }

    /// Sends one whole message; returns the delivery-count announced with new credit, if any.
    fn one(link: &mut Link, id: u32, paused: bool) -> Option<u32> {
        let arrival = link.on_transfer(transfer(Some(id), false), Bytes::from_static(b"m"), 100, paused);
        arrival.unwrap().unwrap().regranted
    }

    #[test]
    fn attach_reply_sets_role_credit_and_count() {
        let publisher = publisher();
        assert_eq!(
            (publisher.role(), publisher.credit, publisher.delivery_count),
            (LinkRole::Incoming, 170, u32::MAX - 4)
        );
        let consumer = Link::attached(&reply(Role::Sender, Some(7)));
        assert_eq!((consumer.role(), consumer.credit, consumer.delivery_count), (LinkRole::Outgoing, 0, 7));
        let consumer = Link::attached(&reply(Role::Sender, None));
        assert_eq!(consumer.delivery_count, u32::MAX - 4);
    }

    #[test]
    fn credit_is_regranted_at_half_of_max_link_credit() {
        let mut link = publisher();
        link.grant(10, MAX_LINK_CREDIT);
        // 170 → 86 after 84 messages: more than half left, no flow.
        for id in 0..84 {
            assert_eq!(one(&mut link, id, false), None, "message {id}");
        }
        assert_eq!((link.credit, link.delivery_count), (86, 94));
        // The 85th leaves 85 = 170 / 2: topped up, announced with delivery-count 95.
        assert_eq!(one(&mut link, 84, false), Some(95));
        assert_eq!(link.credit, 170);
    }

    #[test]
    fn no_regrant_while_paused_until_topped_up() {
        let mut link = publisher();
        link.grant(0, 86);
        assert_eq!(one(&mut link, 0, true), None);
        assert_eq!(link.credit, 85);
        assert_eq!(link.top_up(), Some(1));
        assert_eq!(link.credit, 170);
        // Above half: nothing to top up.
        assert_eq!(link.top_up(), None);
        // A consumer link is never topped up.
        let mut consumer = Link::attached(&reply(Role::Sender, Some(0)));
        assert_eq!(consumer.top_up(), None);
    }

    #[test]
    fn delivery_count_wraps_as_a_serial_number() {
        let mut link = publisher();
        link.grant(u32::MAX - 2, MAX_LINK_CREDIT);
        for id in 0..3 {
            assert_eq!(one(&mut link, id, false), None);
        }
        assert_eq!(link.delivery_count, 0);
        let mut consumer = Link::attached(&reply(Role::Sender, None));
        for _ in 0..6 {
            consumer.count_sent();
        }
        assert_eq!(consumer.delivery_count, 1);
    }

    #[test]
    fn a_transfer_without_credit_detaches_the_link() {
        let mut link = publisher();
        link.grant(0, 0);
        let refused = link.on_transfer(transfer(Some(0), false), Bytes::new(), 100, false);
        assert_eq!(refused, Err(Refusal::Link(error("amqp:link:transfer-limit-exceeded", ""))));
    }

    #[test]
    fn a_first_transfer_without_delivery_id_ends_the_session() {
        let mut link = publisher();
        let refused = link.on_transfer(transfer(None, false), Bytes::new(), 100, false);
        let text = format!("{{badmatch,undefined}}{NO_TRACE}");
        assert_eq!(refused, Err(Refusal::Session(error("amqp:internal-error", text))));
    }

    #[test]
    fn frames_are_assembled_into_one_message() {
        let mut link = publisher();
        link.grant(0, MAX_LINK_CREDIT);
        let mut first = transfer(Some(5), true);
        first.settled = Some(false);
        assert_eq!(link.on_transfer(first, Bytes::from_static(b"ab"), 100, false), Ok(None));
        // Continuations may leave the id out, and may settle the delivery.
        let mut middle = transfer(None, true);
        middle.settled = Some(true);
        assert_eq!(link.on_transfer(middle, Bytes::from_static(b"cd"), 100, false), Ok(None));
        let arrival = link.on_transfer(transfer(Some(5), false), Bytes::from_static(b"e"), 100, false);
        let arrival = arrival.unwrap().unwrap();
        assert_eq!(arrival.delivery_id, 5);
        assert_eq!(&arrival.delivery_tag[..], &5u32.to_be_bytes());
        assert!(arrival.settled);
        assert_eq!(&arrival.payload[..], b"abcde");
        assert_eq!((link.credit, link.delivery_count), (169, 1));
        assert!(link.partial.is_none());
    }

    #[test]
    fn a_one_frame_message_is_not_copied() {
        let mut link = publisher();
        let payload = Bytes::from(vec![1, 2, 3]);
        let pointer = payload.as_ptr();
        let arrival = link.on_transfer(transfer(Some(0), false), payload, 100, false).unwrap().unwrap();
        assert_eq!(arrival.payload.as_ptr(), pointer);
    }

    #[test]
    fn a_message_over_the_size_limit_detaches_the_link() {
        let mut link = publisher();
        assert_eq!(link.on_transfer(transfer(Some(0), true), Bytes::from_static(b"123456"), 10, false), Ok(None));
        let refused = link.on_transfer(transfer(None, false), Bytes::from_static(b"789012"), 10, false);
        let text = "message size (12 bytes) > maximum message size (10 bytes)";
        assert_eq!(refused, Err(Refusal::Link(error("amqp:link:message-size-exceeded", text))));
        // Exactly at the limit is accepted.
        let mut link = publisher();
        let arrival = link.on_transfer(transfer(Some(0), false), Bytes::from_static(b"1234567890"), 10, false);
        assert_eq!(arrival.unwrap().unwrap().payload.len(), 10);
    }

    #[test]
    fn a_continuation_with_another_delivery_id_ends_the_session() {
        let mut link = publisher();
        assert_eq!(link.on_transfer(transfer(Some(3), true), Bytes::from_static(b"a"), 100, false), Ok(None));
        let refused = link.on_transfer(transfer(Some(4), false), Bytes::from_static(b"b"), 100, false);
        let text = "delivery-id of continuation transfer ({uint,4}) differs from delivery-id on first transfer (3)";
        assert_eq!(refused, Err(Refusal::Session(error("amqp:connection:framing-error", text))));
    }
}
