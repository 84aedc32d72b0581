//! Channel 0 before and around the handshake: start-ok (login), tune-ok (limits and
//! heartbeat), open (vhost), close and close-ok, in the order RabbitMQ 4.0.5 requires.

use std::time::{Duration, Instant};

use amq_protocol::protocol::{AMQPClass, connection};
use amq_protocol::types::AMQPValue;

use super::connection::{
    Connection, ConnectionState, FRAME_MIN_SIZE, HANDSHAKE_TIMEOUT, HardError, bool_value, unexpected_frame,
    well_formed,
};
use super::handshake::credentials;
use super::reply::ReplyCode;
use super::{ClientCapabilities, Event, Host};
use crate::codec::{FRAME_HEARTBEAT, FRAME_METHOD, RawFrame};

impl Connection {
    pub(super) fn handle_channel_zero(
        &mut self,
        frame: RawFrame,
        now: Instant,
        host: &mut dyn Host,
    ) -> Result<(), HardError> {
        if !well_formed(&frame) {
            return Err(self.unknown_frame(&frame));
        }
        match frame.kind {
            FRAME_HEARTBEAT => return Ok(()),
            FRAME_METHOD => {}
            _ => return Err(unexpected_frame(&frame)),
        }
        let Some(method) = Self::decode(&frame)? else {
            self.finish();
            return Ok(());
        };
        let ids = (method.get_amqp_class_id(), method.get_amqp_method_id());
        let AMQPClass::Connection(method) = method else {
            return Err(HardError::new(
                ReplyCode::ChannelError,
                format!("unexpected method in connection state {}", self.state_name()),
            )
            .during(ids));
        };
        match (self.state, method) {
            (ConnectionState::Starting, connection::AMQPMethod::StartOk(start_ok)) => {
                self.on_start_ok(start_ok, now, host)
            }
            (ConnectionState::Tuning, connection::AMQPMethod::TuneOk(tune_ok)) => self.on_tune_ok(&tune_ok, now),
            (ConnectionState::Opening, connection::AMQPMethod::Open(open)) => self.on_open(&open, now, host),
            (ConnectionState::Running, connection::AMQPMethod::Close(_)) => {
                self.close_ok(now);
                Ok(())
            }
            (ConnectionState::Running, connection::AMQPMethod::UpdateSecret(_)) => {
                self.send_method(
                    0,
                    &AMQPClass::Connection(connection::AMQPMethod::UpdateSecretOk(connection::UpdateSecretOk {})),
                );
                Ok(())
            }
            _ => Err(HardError::new(
                ReplyCode::ChannelError,
                format!("unexpected method in connection state {}", self.state_name()),
            )
            .during(ids)),
        }
    }

    fn state_name(&self) -> &'static str {
        match self.state {
            ConnectionState::Starting => "starting",
            ConnectionState::Tuning => "tuning",
            ConnectionState::Opening => "opening",
            ConnectionState::Running => "running",
            ConnectionState::Closing => "closing",
            ConnectionState::Lingering | ConnectionState::Closed => "closed",
        }
    }

    fn on_start_ok(
        &mut self,
        start_ok: connection::StartOk,
        now: Instant,
        host: &mut dyn Host,
    ) -> Result<(), HardError> {
        if let Some(AMQPValue::FieldTable(caps)) = start_ok.client_properties.inner().get("capabilities") {
            self.capabilities = ClientCapabilities {
                consumer_cancel_notify: bool_value(caps, "consumer_cancel_notify"),
                authentication_failure_close: bool_value(caps, "authentication_failure_close"),
                connection_blocked: bool_value(caps, "connection.blocked"),
            };
        }
        let mechanism = start_ok.mechanism.as_str().to_owned();
        let external = mechanism == "EXTERNAL" && self.config.sasl_external;
        let anonymous = mechanism == "ANONYMOUS" && self.config.sasl_anonymous;
        if mechanism != "PLAIN" && mechanism != "AMQPLAIN" && !external && !anonymous {
            return Err(HardError::new(
                ReplyCode::CommandInvalid,
                format!("unknown authentication mechanism '{mechanism}'"),
            ));
        }
        // ANONYMOUS ignores the response, as RabbitMQ's mechanism does.
        let login = if external {
            host.authenticate_external()
        } else if anonymous {
            host.authenticate_anonymous()
        } else {
            let Some((username, password)) = credentials(&mechanism, start_ok.response.as_bytes()) else {
                return Err(HardError::new(ReplyCode::SyntaxError, "response invalid"));
            };
            host.authenticate(&mechanism, &username, &password).then_some(username)
        };
        let Some(username) = login else {
            // The host logged the refusal (with the peer's address).
            tracing::debug!(mechanism, "login refused");
            if self.capabilities.authentication_failure_close {
                let explanation = format!(
                    "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
                );
                self.close(ReplyCode::AccessRefused, &explanation, (0, 0), now);
                self.input_dead = false;
            } else {
                self.close_silently(now);
            }
            return Ok(());
        };
        self.mechanism = mechanism;
        self.username = username;
        self.client_properties = start_ok.client_properties;
        let tune = connection::Tune {
            channel_max: self.config.channel_max,
            frame_max: self.config.frame_max,
            heartbeat: self.config.heartbeat,
        };
        self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::Tune(tune)));
        self.state = ConnectionState::Tuning;
        self.deadline = Some(now + HANDSHAKE_TIMEOUT);
        Ok(())
    }

    fn on_tune_ok(&mut self, tune_ok: &connection::TuneOk, now: Instant) -> Result<(), HardError> {
        let fail = |field: &str, value: u64, detail: &str, bound: &str, limit: u64| {
            let (s1, s2) = if bound == "min" { ("lower", "minimum") } else { ("higher", "maximum") };
            Err(HardError::new(
                ReplyCode::NotAllowed,
                format!("negotiated {field} = {value}{detail} is {s1} than the {s2} allowed value ({limit})"),
            )
            .during((10, 30)))
        };
        let frame_max = tune_ok.frame_max;
        if frame_max != 0 && frame_max < FRAME_MIN_SIZE {
            return fail("frame_max", frame_max.into(), "", "min", FRAME_MIN_SIZE.into());
        }
        if frame_max == 0 || frame_max > self.config.frame_max {
            return fail("frame_max", frame_max.into(), "", "max", self.config.frame_max.into());
        }
        let channel_max = tune_ok.channel_max;
        if channel_max == 0 || channel_max > self.config.channel_max {
            let detail = if channel_max == 0 { " (no limit)" } else { "" };
            return fail("channel_max", channel_max.into(), detail, "max", self.config.channel_max.into());
        }
        self.frame_max = frame_max;
        self.channel_max = channel_max;
        self.heartbeat = (tune_ok.heartbeat > 0).then(|| Duration::from_secs(tune_ok.heartbeat.into()));
        self.heartbeat_since = now;
        self.state = ConnectionState::Opening;
        self.deadline = Some(now + HANDSHAKE_TIMEOUT);
        Ok(())
    }

    fn on_open(&mut self, open: &connection::Open, now: Instant, host: &mut dyn Host) -> Result<(), HardError> {
        let vhost = open.virtual_host.as_str().to_owned();
        if let Err(explanation) = host.open_vhost(&self.username, &vhost) {
            return Err(HardError::new(ReplyCode::NotAllowed, explanation).during((10, 40)));
        }
        self.send_method(0, &AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {})));
        self.state = ConnectionState::Running;
        self.deadline = None;
        self.last_read = now;
        self.events.push_back(Event::Opened { username: self.username.clone(), vhost });
        Ok(())
    }
}
