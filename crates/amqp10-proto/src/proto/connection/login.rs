//! Logging in: the SASL exchange (PLAIN, AMQPLAIN, ANONYMOUS and EXTERNAL when configured) and the
//! `open` that picks the vhost and the limits, answered as RabbitMQ 4.0.5 answers them.

use std::time::{Duration, Instant};

use bytes::Bytes;
use fe2o3_amqp_types::performatives::{ChannelMax, MaxFrameSize, Open};
use fe2o3_amqp_types::primitives::{Array, OrderedMap, Symbol};
use fe2o3_amqp_types::sasl::{SaslCode, SaslOutcome};
use serde_amqp::Value as Amqp;

use crate::codec::{FRAME_TYPE_SASL, SaslFrame, decode_sasl};
use crate::proto::{Event, Failure, Host};

use super::{Connection, MIN_MAX_FRAME_SIZE, State};

impl Connection {
    pub(super) fn handle_sasl(&mut self, body: &Bytes, now: Instant, host: &mut dyn Host) -> Result<(), Failure> {
        let Ok(SaslFrame::Init(init)) = decode_sasl(body) else {
            self.close_silently(now);
            return Ok(());
        };
        let response = init.initial_response.map(|b| b.into_vec()).unwrap_or_default();
        init.mechanism.as_str().clone_into(&mut self.mechanism);
        let user = match init.mechanism.as_str() {
            "PLAIN" => plain_credentials(&response),
            "AMQPLAIN" => amqplain_credentials(&response),
            "ANONYMOUS" if self.anonymous => {
                self.sasl_done(host.anonymous_user(), now);
                return Ok(());
            }
            "EXTERNAL" if self.config.sasl_external => {
                self.sasl_done(host.authenticate_external(), now);
                return Ok(());
            }
            _ => {
                // RabbitMQ sends no outcome for a mechanism it does not offer.
                self.close_silently(now);
                return Ok(());
            }
        };
        let mechanism = init.mechanism.as_str();
        let user = user.filter(|(u, p)| host.authenticate(mechanism, u, p)).map(|(u, _)| u);
        self.sasl_done(user, now);
        Ok(())
    }

    fn sasl_done(&mut self, user: Option<String>, now: Instant) {
        match user {
            Some(username) => {
                self.username = username;
                self.send_frame(FRAME_TYPE_SASL, 0, &SaslOutcome { code: SaslCode::Ok, additional_data: None }, &[]);
                self.state = State::AwaitHeader;
            }
            None => {
                // RabbitMQ answers a refused login with sasl-outcome `auth`, but only after its
                // silent-close delay, then drops the connection.
                self.refused_login = true;
                self.close_silently(now);
            }
        }
    }

    pub(super) fn on_open(&mut self, open: &Open, now: Instant, host: &mut dyn Host) -> Result<(), Failure> {
        let vhost = match open.hostname.as_deref() {
            Some(hostname) if hostname.starts_with("vhost:") => hostname.trim_start_matches("vhost:").to_owned(),
            _ => "/".to_owned(),
        };
        // RabbitMQ 4.0.5 answers a refused open with no frame at all: the socket is dropped
        // after its silent-close delay. The reason only goes to the log.
        let refusal = match host.open_vhost(&self.username, &vhost) {
            Err(description) => Some(description),
            Ok(()) if open.max_frame_size.0 < MIN_MAX_FRAME_SIZE => Some(format!(
                "max_frame_size ({}) < minimum maximum frame size ({MIN_MAX_FRAME_SIZE})",
                open.max_frame_size.0
            )),
            Ok(()) => match open.idle_time_out {
                Some(interval) if interval > 0 && interval < 1000 => {
                    Some(format!("idle-time-out ({interval} ms) < minimum idle-time-out (1000 ms)"))
                }
                _ => None,
            },
        };
        if let Some(reason) = refusal {
            tracing::warn!(user = self.username, vhost, reason, "AMQP 1.0 open refused");
            self.close_silently(now);
            return Ok(());
        }
        let client_max = open.max_frame_size.0;
        if let Some(interval) = open.idle_time_out.filter(|i| *i > 0) {
            self.send_interval = Some(Duration::from_millis(u64::from(interval)) / 2);
        }
        self.remote_max_frame_size = usize::try_from(client_max).unwrap_or(usize::MAX);
        self.incoming_max_frame_size = self.config.max_frame_size;
        self.channel_max = open.channel_max.0.min(self.config.channel_max);
        self.client_properties = open.properties.clone();
        let mut properties = OrderedMap::new();
        // RabbitMQ's keys and order: node first, then the 0.9.1 server properties.
        for (key, value) in [
            ("node", self.config.container_id.clone()),
            ("cluster_name", self.config.container_id.clone()),
            ("copyright", charon_model::identity::COPYRIGHT.to_owned()),
            ("information", charon_model::identity::information()),
            ("platform", charon_model::identity::PLATFORM.to_owned()),
            ("product", self.config.product.clone()),
            ("version", self.config.version.clone()),
        ] {
            properties.insert(Symbol::from(key), Amqp::String(value));
        }
        let reply = Open {
            container_id: self.config.container_id.clone(),
            hostname: None,
            max_frame_size: MaxFrameSize(self.config.max_frame_size),
            channel_max: ChannelMax(self.channel_max),
            idle_time_out: Some(u32::try_from(self.config.idle_timeout.as_millis() / 2).unwrap_or(u32::MAX)),
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: Some(Array::from(vec![
                Symbol::from("LINK_PAIR_V1_0"),
                Symbol::from("ANONYMOUS-RELAY"),
            ])),
            desired_capabilities: None,
            properties: Some(properties),
        };
        self.send_performative(0, &reply);
        self.state = State::Open;
        self.deadline = None;
        self.last_read = now;
        self.events.push_back(Event::Opened {
            username: self.username.clone(),
            vhost,
            container_id: open.container_id.clone(),
            mechanism: self.mechanism.clone(),
        });
        Ok(())
    }
}

/// AMQPLAIN: a 0.9.1 field table without its length prefix, holding `LOGIN` and `PASSWORD` as
/// long strings. Other entries and types make the response invalid.
fn amqplain_credentials(mut response: &[u8]) -> Option<(String, String)> {
    let (mut login, mut password) = (None, None);
    while let Some((&key_len, rest)) = response.split_first() {
        let (key, rest) = rest.split_at_checked(usize::from(key_len))?;
        let (&kind, rest) = rest.split_first()?;
        let (len, rest) = rest.split_at_checked(4)?;
        let len = usize::try_from(u32::from_be_bytes(len.try_into().ok()?)).ok()?;
        let (value, rest) = rest.split_at_checked(len)?;
        let value = (kind == b'S').then(|| String::from_utf8(value.to_vec()).ok()).flatten()?;
        match key {
            b"LOGIN" => login = Some(value),
            b"PASSWORD" => password = Some(value),
            _ => return None,
        }
        response = rest;
    }
    Some((login?, password?))
}

/// `\0user\0password` (an authorization id before the first NUL is ignored).
fn plain_credentials(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = String::from_utf8(parts.next()?.to_vec()).ok()?;
    let password = String::from_utf8(parts.next()?.to_vec()).ok()?;
    parts.next().is_none().then_some((user, password))
}
