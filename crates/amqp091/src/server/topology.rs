//! `exchange.*` and `queue.*` methods.

use std::sync::Arc;

use amq_protocol::protocol::{AMQPClass, exchange, queue};
use amq_protocol::types::FieldTable;
use charon_engine::reply_to::PSEUDO_QUEUE;
use charon_engine::{Action, Destination, EngineError, ExchangeDeclare, QueueDeclare, QueueRef};
use charon_model::Table;

use super::channel::ChannelState;
use super::grants::Grants;
use super::{MethodError, MethodResult};
use crate::codec::decode_table;
use crate::proto::{Connection, ReplyCode};

/// Converts an amq-protocol argument table into the model's table (through the wire format,
/// so types come out exactly as our own decoder reads them).
pub(crate) fn arguments(table: &FieldTable) -> Table {
    use amq_protocol::types::generation::gen_field_table;
    let bytes: Vec<u8> = cookie_factory::gen_simple(gen_field_table(table), Vec::new()).unwrap_or_default();
    let mut input = bytes::Bytes::from(bytes);
    decode_table(&mut input).unwrap_or_default()
}

/// The `exchange.*` and `queue.*` methods of one channel, over what they touch: the
/// connection's grants, the channel (its last declared queue) and the exclusive queues the
/// connection declared.
pub(crate) struct Topology<'a> {
    pub(crate) grants: Grants<'a>,
    pub(crate) channel: &'a mut ChannelState,
    pub(crate) exclusive: &'a mut Vec<QueueRef>,
}

impl Topology<'_> {
    pub(crate) async fn exchange_method(
        &mut self,
        channel: u16,
        method: exchange::AMQPMethod,
        conn: &mut Connection,
    ) -> MethodResult {
        let vhost = self.grants.vhost()?;
        match method {
            exchange::AMQPMethod::Declare(d) => {
                vhost
                    .declare_exchange_as(
                        &ExchangeDeclare {
                            name: d.exchange.as_str().to_owned(),
                            kind: d.kind.as_str().to_owned(),
                            passive: d.passive,
                            durable: d.durable,
                            auto_delete: d.auto_delete,
                            internal: d.internal,
                            arguments: arguments(&d.arguments),
                        },
                        Some(self.grants.principal()?),
                    )
                    .await?;
                if !d.nowait {
                    conn.send_method(
                        channel,
                        &AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {})),
                    );
                }
            }
            exchange::AMQPMethod::Delete(d) => {
                // The default and `amq.*` exchanges are refused first, as RabbitMQ does.
                let name = d.exchange.as_str();
                if !name.is_empty() && !name.starts_with("amq.") {
                    self.grants.authorize(Action::Configure, &self.grants.exchange_resource(name))?;
                }
                vhost.delete_exchange(d.exchange.as_str(), d.if_unused).await?;
                if !d.nowait {
                    conn.send_method(
                        channel,
                        &AMQPClass::Exchange(exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {})),
                    );
                }
            }
            exchange::AMQPMethod::Bind(b) => {
                self.grants.authorize_binding(
                    &self.grants.exchange_resource(b.destination.as_str()),
                    b.source.as_str(),
                    b.routing_key.as_str(),
                )?;
                let destination = Destination::Exchange(b.destination.as_str().to_owned());
                vhost
                    .bind(
                        b.source.as_str(),
                        destination,
                        b.routing_key.as_str(),
                        &arguments(&b.arguments),
                        self.grants.client.id(),
                    )
                    .await?;
                if !b.nowait {
                    conn.send_method(channel, &AMQPClass::Exchange(exchange::AMQPMethod::BindOk(exchange::BindOk {})));
                }
            }
            exchange::AMQPMethod::Unbind(u) => {
                self.grants.authorize_binding(
                    &self.grants.exchange_resource(u.destination.as_str()),
                    u.source.as_str(),
                    u.routing_key.as_str(),
                )?;
                let destination = Destination::Exchange(u.destination.as_str().to_owned());
                vhost
                    .unbind(
                        u.source.as_str(),
                        destination,
                        u.routing_key.as_str(),
                        &arguments(&u.arguments),
                        self.grants.client.id(),
                    )
                    .await?;
                if !u.nowait {
                    conn.send_method(
                        channel,
                        &AMQPClass::Exchange(exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {})),
                    );
                }
            }
            _ => {
                return Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method"));
            }
        }
        Ok(())
    }

    pub(crate) async fn queue_method(
        &mut self,
        channel: u16,
        method: queue::AMQPMethod,
        conn: &mut Connection,
    ) -> MethodResult {
        let vhost = self.grants.vhost()?;
        match method {
            queue::AMQPMethod::Declare(d) if d.queue.as_str().starts_with(PSEUDO_QUEUE) => {
                let name = d.queue.as_str();
                // As RabbitMQ answers it, passive or not: the pseudo-queue itself and a live
                // reply consumer's address exist (no messages, one consumer); any other such
                // name is not found.
                if name != PSEUDO_QUEUE && !self.grants.broker.reply_is_live(name).await {
                    return Err(EngineError::NotFound(self.grants.queue_resource(name)).into());
                }
                self.channel.last_queue = Some(name.to_owned());
                if !d.nowait {
                    let reply = queue::DeclareOk { queue: name.into(), message_count: 0, consumer_count: 1 };
                    conn.send_method(channel, &AMQPClass::Queue(queue::AMQPMethod::DeclareOk(reply)));
                }
            }
            queue::AMQPMethod::Declare(d) => {
                let declare = QueueDeclare {
                    name: d.queue.as_str().to_owned(),
                    passive: d.passive,
                    durable: d.durable,
                    exclusive: d.exclusive,
                    auto_delete: d.auto_delete,
                    arguments: arguments(&d.arguments),
                };
                let client = self.grants.client;
                let ok = vhost.declare_queue_as(&declare, client.id(), Some(self.grants.principal()?)).await?;
                if d.exclusive
                    && !d.passive
                    && let Ok(queue) = vhost.queue(&ok.name, client.id())
                    && !self.exclusive.iter().any(|q| Arc::ptr_eq(q, &queue))
                {
                    self.exclusive.push(queue);
                }
                self.channel.last_queue = Some(ok.name.clone());
                if !d.nowait {
                    let reply = queue::DeclareOk {
                        queue: ok.name.as_str().into(),
                        message_count: ok.messages,
                        consumer_count: ok.consumers,
                    };
                    conn.send_method(channel, &AMQPClass::Queue(queue::AMQPMethod::DeclareOk(reply)));
                }
            }
            queue::AMQPMethod::Bind(b) => {
                let name = self.channel.queue_name(b.queue.as_str())?;
                let key = if b.queue.as_str().is_empty() && b.routing_key.as_str().is_empty() {
                    name.clone()
                } else {
                    b.routing_key.as_str().to_owned()
                };
                self.grants.authorize_binding(&self.grants.queue_resource(&name), b.exchange.as_str(), &key)?;
                vhost
                    .bind(
                        b.exchange.as_str(),
                        Destination::Queue(name),
                        &key,
                        &arguments(&b.arguments),
                        self.grants.client.id(),
                    )
                    .await?;
                if !b.nowait {
                    conn.send_method(channel, &AMQPClass::Queue(queue::AMQPMethod::BindOk(queue::BindOk {})));
                }
            }
            queue::AMQPMethod::Unbind(u) => {
                let name = self.channel.queue_name(u.queue.as_str())?;
                let key = if u.queue.as_str().is_empty() && u.routing_key.as_str().is_empty() {
                    name.clone()
                } else {
                    u.routing_key.as_str().to_owned()
                };
                self.grants.authorize_binding(&self.grants.queue_resource(&name), u.exchange.as_str(), &key)?;
                vhost
                    .unbind(
                        u.exchange.as_str(),
                        Destination::Queue(name),
                        &key,
                        &arguments(&u.arguments),
                        self.grants.client.id(),
                    )
                    .await?;
                conn.send_method(channel, &AMQPClass::Queue(queue::AMQPMethod::UnbindOk(queue::UnbindOk {})));
            }
            queue::AMQPMethod::Purge(p) => {
                let name = self.channel.queue_name(p.queue.as_str())?;
                self.grants.authorize(Action::Read, &self.grants.queue_resource(&name))?;
                let count = vhost.queue(&name, self.grants.client.id())?.purge().await?;
                if !p.nowait {
                    conn.send_method(
                        channel,
                        &AMQPClass::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk { message_count: count })),
                    );
                }
            }
            queue::AMQPMethod::Delete(d) => {
                let name = self.channel.queue_name(d.queue.as_str())?;
                self.grants.authorize(Action::Configure, &self.grants.queue_resource(&name))?;
                let count = vhost.delete_queue(&name, self.grants.client.id(), d.if_unused, d.if_empty).await?;
                self.exclusive.retain(|q| q.name() != name);
                if !d.nowait {
                    conn.send_method(
                        channel,
                        &AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk { message_count: count })),
                    );
                }
            }
            _ => {
                return Err(MethodError::new(ReplyCode::CommandInvalid, "unimplemented method"));
            }
        }
        Ok(())
    }
}
