//! RabbitMQ's Prometheus endpoints (`rabbitmq_prometheus`, 4.0.5): `/metrics` aggregated (O(1)
//! in queues: per-queue figures are summed), `/metrics/per-object` (one series per queue,
//! streamed a slice of queues at a time) and `/metrics/detailed` (the families asked for by
//! `family=`, limited to the vhosts asked for by `vhost=`, with the `rabbitmq_detailed_`
//! prefix).

mod charon;
mod detailed;
mod family;
mod global;
mod identity;
mod stream;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use charon_engine::Broker;
use charon_engine::metrics::{Churn, global as counters};
use charon_engine::queue::GaugeValues;
use metrics_exporter_prometheus::PrometheusHandle;

pub(crate) use self::detailed::Selection;
use self::family::{
    CHANNELS, CHURN, CONNECTIONS, CONSUMERS, Family, PLAIN, QUEUE_BYTES, QUEUE_COARSE, QUEUE_CONSUMERS, QUEUES,
};
pub(crate) use self::identity::Identity;
pub(crate) use self::stream::{Piece, body};

/// What every scrape reads from.
#[derive(Clone)]
pub(crate) struct Scraper {
    broker: Arc<Broker>,
    facade: PrometheusHandle,
    identity: Identity,
}

impl Scraper {
    pub(crate) fn new(broker: Arc<Broker>, facade: PrometheusHandle, identity: Identity) -> Self {
        Self { broker, facade, identity }
    }

    /// `/metrics`: every family with per-queue figures summed over the queues.
    pub(crate) fn aggregated(&self) -> String {
        let mut out = String::new();
        churn(PLAIN, &mut out);
        out.push_str(&charon::render_resources(&self.broker));
        out.push_str(&charon::render_raft(&self.broker));
        let mut sum = GaugeValues::default();
        let mut queues = 0_u64;
        for vhost in self.broker.vhosts() {
            for queue in vhost.local_queues() {
                queues += 1;
                sum.add(&queue.gauges.load());
            }
        }
        for (family, read) in QUEUE_COARSE.iter().chain(&QUEUE_CONSUMERS).chain(&QUEUE_BYTES) {
            family.header(PLAIN, &mut out);
            family.sample(PLAIN, read(&sum), &mut out);
        }
        self.node_totals(sum.consumers, queues, &mut out);
        self.node_families(&mut out);
        out.push_str(&charon::render_vhost_counters(&self.broker));
        out
    }

    /// `/metrics/per-object`, as pieces rendered one at a time while the body is sent.
    pub(crate) fn per_object(&self) -> Vec<Piece> {
        let queues: Arc<[charon_engine::QueueRef]> = charon::sorted_queues(&self.broker).into();
        let mut head = String::new();
        churn(PLAIN, &mut head);
        head.push_str(&charon::render_resources(&self.broker));
        head.push_str(&charon::render_raft(&self.broker));
        let mut pieces = vec![Piece::Text(head)];
        for family in QUEUE_COARSE.iter().chain(&QUEUE_CONSUMERS).chain(&QUEUE_BYTES) {
            pieces.extend(Piece::queue_family(PLAIN, *family, &queues));
        }
        for series in charon::QueueSeries::ALL {
            pieces.extend(Piece::charon_series(series, &queues));
        }
        let consumers = queues.iter().map(|q| q.gauges.load().consumers).sum();
        let mut tail = charon::render_vhost_counters(&self.broker);
        self.node_totals(consumers, u64::try_from(queues.len()).unwrap_or(0), &mut tail);
        self.node_families(&mut tail);
        pieces.push(Piece::Text(tail));
        pieces
    }

    /// `/metrics/detailed?family=...&vhost=...`.
    pub(crate) fn detailed(&self, selection: &Selection) -> Vec<Piece> {
        let mut pieces = selection.pieces(&self.broker);
        let mut tail = String::new();
        self.identity.render(&mut tail);
        pieces.push(Piece::Text(tail));
        pieces
    }

    /// `rabbitmq_connections`, `_channels`, `_consumers`, `_queues`.
    fn node_totals(&self, consumers: u64, queues: u64, out: &mut String) {
        let totals: [(Family, u64); 4] = [
            (CONNECTIONS, counters().connections()),
            (CHANNELS, counters().channels()),
            (CONSUMERS, consumers),
            (QUEUES, queues),
        ];
        for (family, value) in totals {
            family.header(PLAIN, out);
            family.sample(PLAIN, value, out);
        }
    }

    /// Identity, the global counters, the facade's dead-letter counters and Charon's
    /// per-vhost counters: the same on the aggregated and per-object endpoints.
    fn node_families(&self, out: &mut String) {
        self.identity.render(out);
        global::render(out);
        out.push_str(&self.facade.render());
    }
}

/// `connection_churn_metrics` with `prefix`.
fn churn(prefix: &str, out: &mut String) {
    for (family, event) in CHURN.iter().zip(Churn::ALL) {
        family.header(prefix, out);
        family.sample(prefix, counters().churned(event), out);
    }
}
