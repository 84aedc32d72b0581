//! `/metrics/detailed`: the metric groups asked for with `family=` (repeatable; unknown names
//! are ignored, as 4.0.5 does), per-queue ones limited to the vhosts asked for with `vhost=`
//! (all when none is given).

use std::fmt::Write as _;
use std::sync::Arc;

use charon_engine::{Broker, QueueRef};

use super::Piece;
use super::family::{DETAILED, QUEUE_BYTES, QUEUE_COARSE, QUEUE_CONSUMERS};

/// The groups Charon serves, in the order 4.0.5 renders them (whatever the query's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    ConnectionChurn,
    QueueCoarse,
    QueueConsumerCount,
    QueueMetrics,
    VhostStatus,
}

impl Group {
    const ALL: [Self; 5] =
        [Self::ConnectionChurn, Self::QueueCoarse, Self::QueueConsumerCount, Self::QueueMetrics, Self::VhostStatus];

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "connection_churn_metrics" => Self::ConnectionChurn,
            "queue_coarse_metrics" => Self::QueueCoarse,
            "queue_consumer_count" => Self::QueueConsumerCount,
            "queue_metrics" => Self::QueueMetrics,
            "vhost_status" => Self::VhostStatus,
            _ => return None,
        })
    }
}

/// A parsed query.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Selection {
    groups: Vec<Group>,
    vhosts: Vec<String>,
}

impl Selection {
    /// From the raw query string (`family` and `vhost`, each repeatable, percent-encoded).
    pub(crate) fn parse(query: Option<&str>) -> Self {
        let mut selection = Self::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "family" => selection.groups.extend(Group::parse(&value)),
                "vhost" => selection.vhosts.push(value.into_owned()),
                _ => {}
            }
        }
        selection
    }

    fn wants(&self, group: Group) -> bool {
        self.groups.contains(&group)
    }

    /// The pieces of the selected groups.
    pub(crate) fn pieces(&self, broker: &Broker) -> Vec<Piece> {
        let vhosts: Vec<_> = broker
            .vhosts()
            .into_iter()
            .filter(|v| self.vhosts.is_empty() || self.vhosts.iter().any(|name| name == v.name()))
            .collect();
        let queues: Arc<[QueueRef]> = vhosts
            .iter()
            .flat_map(|v| {
                let mut queues = v.local_queues();
                queues.sort_by(|a, b| a.name().cmp(b.name()));
                queues
            })
            .collect();
        let mut pieces = Vec::new();
        for group in Group::ALL.into_iter().filter(|g| self.wants(*g)) {
            match group {
                Group::ConnectionChurn => {
                    let mut text = String::new();
                    super::churn(DETAILED, &mut text);
                    pieces.push(Piece::Text(text));
                }
                Group::QueueCoarse => {
                    for family in QUEUE_COARSE {
                        pieces.extend(Piece::queue_family(DETAILED, family, &queues));
                    }
                }
                // `queue_metrics` carries the consumer count too; rendered once.
                Group::QueueConsumerCount => {
                    for family in QUEUE_CONSUMERS {
                        pieces.extend(Piece::queue_family(DETAILED, family, &queues));
                    }
                }
                Group::QueueMetrics => {
                    let consumers = (!self.wants(Group::QueueConsumerCount)).then_some(QUEUE_CONSUMERS).into_iter();
                    for family in consumers.flatten().chain(QUEUE_BYTES) {
                        pieces.extend(Piece::queue_family(DETAILED, family, &queues));
                    }
                }
                Group::VhostStatus => {
                    let mut text = String::from(
                        "# TYPE rabbitmq_cluster_vhost_status gauge\n\
                         # HELP rabbitmq_cluster_vhost_status Whether a given vhost is running\n",
                    );
                    for vhost in &vhosts {
                        let name = super::charon::escape_label(vhost.name());
                        let _ = writeln!(text, "rabbitmq_cluster_vhost_status{{vhost=\"{name}\"}} 1");
                    }
                    pieces.push(Piece::Text(text));
                }
            }
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_vhosts_repeat_and_unknown_families_are_ignored() {
        let selection =
            Selection::parse(Some("family=queue_metrics&family=nonsense&vhost=%2F&vhost=a%20b&family=vhost_status"));
        assert_eq!(selection.groups, vec![Group::QueueMetrics, Group::VhostStatus]);
        assert_eq!(selection.vhosts, vec!["/".to_owned(), "a b".to_owned()]);
        assert_eq!(Selection::parse(None), Selection::default());
    }
}
