//! Frames on channels other than 0: channel methods in each channel's phase, and content
//! (header and body frames) assembled into publishes.

use amq_protocol::protocol::{AMQPClass, basic, channel};
use bytes::BytesMut;
use charon_model::erlang;

use super::channel::{Assembly, ChannelSlot, PartialContent, Phase};
use super::connection::{Connection, HardError, qos_prefetch_size, unexpected_frame, well_formed};
use super::reply::ReplyCode;
use super::{Event, Host, PublishCommand};
use crate::codec::{
    FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, RawFrame, decode_method, decode_properties, decode_publish, is_publish,
};

impl Connection {
    pub(super) fn handle_channel_frame(&mut self, frame: RawFrame, host: &mut dyn Host) -> Result<(), HardError> {
        if !well_formed(&frame) {
            return Err(self.unknown_frame(&frame));
        }
        if frame.kind == FRAME_HEARTBEAT {
            return Err(unexpected_frame(&frame));
        }
        let id = frame.channel;
        if !self.channels.contains_key(&id) {
            let open = u16::try_from(self.channels.len()).unwrap_or(u16::MAX);
            if self.channel_max != 0 && open >= self.channel_max {
                return Err(HardError::new(
                    ReplyCode::NotAllowed,
                    format!(
                        "number of channels opened ({open}) has reached the negotiated channel_max ({})",
                        self.channel_max
                    ),
                ));
            }
            self.channels.insert(id, ChannelSlot::new());
        }
        let phase = self.channels.get(&id).map_or(Phase::Starting, |c| c.phase);
        match phase {
            Phase::Closing => return self.handle_closing_channel(id, &frame),
            // The client closed it: RabbitMQ's closing channel drops whatever else comes.
            Phase::ClientClosing => return Ok(()),
            Phase::Starting | Phase::Open => {}
        }
        match frame.kind {
            FRAME_METHOD => self.handle_channel_method(id, &frame, phase, host),
            FRAME_HEADER => self.handle_content_header(id, frame),
            _ => self.handle_content_body(id, frame),
        }
    }

    fn handle_closing_channel(&mut self, id: u16, frame: &RawFrame) -> Result<(), HardError> {
        if frame.kind != FRAME_METHOD {
            return Ok(());
        }
        match decode_method(&frame.payload) {
            Ok(AMQPClass::Channel(channel::AMQPMethod::CloseOk(_))) => {
                self.channels.remove(&id);
            }
            Ok(AMQPClass::Channel(channel::AMQPMethod::Close(_))) => {
                self.send_method(id, &AMQPClass::Channel(channel::AMQPMethod::CloseOk(channel::CloseOk {})));
            }
            _ => {}
        }
        Ok(())
    }

    fn handle_channel_method(
        &mut self,
        id: u16,
        frame: &RawFrame,
        phase: Phase,
        host: &mut dyn Host,
    ) -> Result<(), HardError> {
        let awaiting = match self.channels.get(&id).map(|c| &c.assembly) {
            Some(Assembly::Header(_)) => {
                Some("expected content header for class 60, got non content header frame instead")
            }
            Some(Assembly::Body(_)) => Some("expected content body, got non content body frame instead"),
            _ => None,
        };
        if let Some(explanation) = awaiting {
            return Err(HardError::new(ReplyCode::UnexpectedFrame, explanation).during((60, 40)));
        }
        if is_publish(&frame.payload) {
            // Once per message: decoded by hand (see `codec::publish`).
            let publish = decode_publish(&frame.payload).map_err(|_| Self::cannot_decode(frame, (60, 40)))?;
            if phase == Phase::Starting {
                return Err(HardError::new(ReplyCode::ChannelError, "expected 'channel.open'").during((60, 40)));
            }
            if let Some(slot) = self.channels.get_mut(&id) {
                slot.assembly = Assembly::Header(publish);
            }
            return Ok(());
        }
        let Some(method) = Self::decode(frame)? else {
            self.finish();
            return Ok(());
        };
        let ids = (method.get_amqp_class_id(), method.get_amqp_method_id());
        match (phase, method) {
            (Phase::Starting, AMQPClass::Channel(channel::AMQPMethod::Open(_))) => {
                host.open_channel(id).map_err(|explanation| HardError::new(ReplyCode::NotAllowed, explanation))?;
                if let Some(slot) = self.channels.get_mut(&id) {
                    slot.phase = Phase::Open;
                }
                self.send_method(id, &AMQPClass::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {})));
                self.events.push_back(Event::ChannelOpened(id));
                Ok(())
            }
            (Phase::Starting, _) => Err(HardError::new(ReplyCode::ChannelError, "expected 'channel.open'").during(ids)),
            (_, AMQPClass::Channel(channel::AMQPMethod::Open(_))) => {
                Err(HardError::new(ReplyCode::ChannelError, "second 'channel.open' seen").during(ids))
            }
            (_, AMQPClass::Channel(channel::AMQPMethod::Close(_))) => {
                // close-ok waits for the broker: the confirms it owes for publishes before the
                // close go first, as RabbitMQ's do (a client frees the channel at close-ok).
                if let Some(slot) = self.channels.get_mut(&id) {
                    slot.phase = Phase::ClientClosing;
                    slot.assembly = Assembly::Idle;
                }
                self.events.push_back(Event::ChannelClosing(id));
                Ok(())
            }
            (_, AMQPClass::Channel(channel::AMQPMethod::Flow(flow))) => {
                if !flow.active {
                    return Err(HardError::new(ReplyCode::NotImplemented, "active=false").during(ids));
                }
                let ok = channel::FlowOk { active: true };
                self.send_method(id, &AMQPClass::Channel(channel::AMQPMethod::FlowOk(ok)));
                Ok(())
            }
            (_, AMQPClass::Basic(basic::AMQPMethod::Qos(_))) if qos_prefetch_size(&frame.payload) != 0 => {
                // amq-protocol drops prefetch_size; RabbitMQ refuses a non-zero one.
                let size = qos_prefetch_size(&frame.payload);
                Err(HardError::new(ReplyCode::NotImplemented, format!("prefetch_size!=0 ({size})")).during(ids))
            }
            (_, method) => {
                self.events.push_back(Event::Method(id, Box::new(method)));
                Ok(())
            }
        }
    }

    fn handle_content_header(&mut self, id: u16, frame: RawFrame) -> Result<(), HardError> {
        let max_message_size = self.config.max_message_size;
        let Some(slot) = self.channels.get_mut(&id) else {
            return Ok(());
        };
        let publish = match std::mem::take(&mut slot.assembly) {
            Assembly::Header(publish) => publish,
            Assembly::Idle => {
                return Err(HardError::new(
                    ReplyCode::UnexpectedFrame,
                    "expected method frame, got non method frame instead",
                ));
            }
            Assembly::Body(_) => {
                return Err(HardError::new(
                    ReplyCode::UnexpectedFrame,
                    "expected content body, got non content body frame instead",
                )
                .during((60, 40)));
            }
        };
        let payload = frame.payload;
        let header = payload.get(..12).unwrap_or_default();
        if header.len() < 12 {
            return Err(HardError::new(ReplyCode::FrameError, format!("cannot decode {}", erlang::binary(&payload)))
                .during((60, 40)));
        }
        let class = u16::from_be_bytes([header.first().copied().unwrap_or(0), header.get(1).copied().unwrap_or(0)]);
        let weight = u16::from_be_bytes([header.get(2).copied().unwrap_or(0), header.get(3).copied().unwrap_or(0)]);
        let size_bytes: [u8; 8] = header.get(4..12).and_then(|s| s.try_into().ok()).unwrap_or_default();
        let size = u64::from_be_bytes(size_bytes);
        if class != 60 {
            return Err(HardError::new(
                ReplyCode::UnexpectedFrame,
                format!("expected content header for class 60, got one for class {class} instead"),
            )
            .during((60, 40)));
        }
        if weight != 0 {
            return Err(HardError::new(
                ReplyCode::UnexpectedFrame,
                "expected content header for class 60, got non content header frame instead",
            )
            .during((60, 40)));
        }
        let raw_properties = payload.slice(12..);
        let properties = decode_properties(&raw_properties).map_err(|_| {
            HardError::new(
                ReplyCode::SyntaxError,
                format!("cannot decode properties {}", erlang::binary(&raw_properties)),
            )
            .during((60, 40))
        })?;
        let content = PartialContent {
            method: publish,
            raw_properties,
            properties,
            size,
            remaining: i128::from(size),
            first: None,
            rest: BytesMut::new(),
            discard: size > max_message_size,
        };
        slot.assembly = Assembly::Body(Box::new(content));
        self.complete_if_done(id);
        Ok(())
    }

    fn handle_content_body(&mut self, id: u16, frame: RawFrame) -> Result<(), HardError> {
        let Some(slot) = self.channels.get_mut(&id) else {
            return Ok(());
        };
        match &mut slot.assembly {
            Assembly::Body(content) => content.push(frame.payload),
            Assembly::Header(_) => {
                return Err(HardError::new(
                    ReplyCode::UnexpectedFrame,
                    "expected content header for class 60, got non content header frame instead",
                )
                .during((60, 40)));
            }
            Assembly::Idle => {
                return Err(HardError::new(
                    ReplyCode::UnexpectedFrame,
                    "expected method frame, got non method frame instead",
                ));
            }
        }
        self.complete_if_done(id);
        Ok(())
    }

    fn complete_if_done(&mut self, id: u16) {
        let Some(slot) = self.channels.get_mut(&id) else {
            return;
        };
        let done = matches!(&slot.assembly, Assembly::Body(c) if c.remaining == 0);
        if !done {
            return;
        }
        let Assembly::Body(mut content) = std::mem::take(&mut slot.assembly) else {
            return;
        };
        if content.discard {
            self.events.push_back(Event::PublishTooLarge { channel: id, size: content.size });
            return;
        }
        let body = content.take_body();
        let content = *content;
        self.events.push_back(Event::Publish(
            id,
            Box::new(PublishCommand {
                method: content.method,
                raw_properties: content.raw_properties,
                properties: content.properties,
                body,
            }),
        ));
    }
}
