//! Overview: totals, queued messages, message rates, alarms, dead letters by reason.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value as JsonValue;

use crate::Ui;
use crate::format::{count, float, int, items, rate, size, text};
use crate::layout::{Tab, failure};
use crate::pages::dead_letters::{REASONS, summaries};
use crate::viewer::Viewer;

/// The counters of `message_stats` the overview shows, with RabbitMQ's labels.
const MESSAGE_STATS: [(&str, &str); 8] = [
    ("publish", "Publish"),
    ("confirm", "Publisher confirm"),
    ("deliver_get", "Deliver (manual ack) / get"),
    ("redeliver", "Redelivered"),
    ("ack", "Consumer ack"),
    ("drop_unroutable", "Unroutable (drop)"),
    ("return_unroutable", "Unroutable (return)"),
    ("get_empty", "Get (empty)"),
];

/// `GET /`.
pub(crate) async fn page(State(ui): State<Arc<Ui>>, viewer: Viewer) -> Response {
    let overview = ui.api.get(&viewer.user, "/api/overview").await;
    let nodes = ui.api.get(&viewer.user, "/api/nodes").await;
    let dead = summaries(&ui, &viewer).await;
    let content = html! {
        @match &overview {
            Ok(overview) => (totals(overview)),
            Err(error) => (failure("Overview", error)),
        }
        @match &nodes {
            Ok(nodes) => (self::nodes(items(nodes, ""))),
            Err(error) => (failure("Nodes", error)),
        }
        section {
            h2 { "Dead letters by reason" }
            @match &dead {
                Ok(queues) => {
                    table.data #dead-by-reason {
                        thead { tr { th { "Reason" } th.num { "Dead-lettered" } th.num { "Rate" } } }
                        tbody {
                            @for reason in REASONS {
                                @let total: u64 = queues.iter().map(|(_, q)| int(q, &format!("/dead_lettered/{reason}"))).sum();
                                @let per_second: f64 = queues.iter().map(|(_, q)| float(q, &format!("/rates/{reason}"))).sum();
                                tr data-reason=(reason) { td { (reason) } td.num { (count(total)) } td.num { (rate(per_second)) } }
                            }
                        }
                    }
                    p.hint { a href="/dead-letters" { "Dead-letter queues, messages and redrives →" } }
                }
                Err(error) => (failure("Dead letters", error)),
            }
        }
    };
    crate::layout::page(&viewer, Tab::Overview, "Overview", content)
}

fn totals(overview: &JsonValue) -> Markup {
    html! {
        section data-src="/api/overview" {
            h2 { "Totals" }
            div.cards {
                @for (key, label) in [("connections", "Connections"), ("channels", "Channels"), ("exchanges", "Exchanges"), ("queues", "Queues"), ("consumers", "Consumers")] {
                    div.card { span.label { (label) } span.value data-ptr=(format!("/object_totals/{key}")) data-fmt="count" { (count(int(overview, &format!("/object_totals/{key}")))) } }
                }
            }
            h2 { "Queued messages" }
            div.cards {
                @for (key, label) in [("messages_ready", "Ready"), ("messages_unacknowledged", "Unacked"), ("messages", "Total")] {
                    div.card { span.label { (label) } span.value data-ptr=(format!("/queue_totals/{key}")) data-fmt="count" { (count(int(overview, &format!("/queue_totals/{key}")))) } }
                }
            }
            h2 { "Message rates" }
            table.data.narrow #message-rates {
                thead { tr { th { "" } th.num { "Total" } th.num { "Rate" } } }
                tbody {
                    @for (key, label) in MESSAGE_STATS {
                        tr {
                            td { (label) }
                            td.num data-ptr=(format!("/message_stats/{key}")) data-fmt="count" { (count(int(overview, &format!("/message_stats/{key}")))) }
                            @let details = format!("/message_stats/{key}_details/rate");
                            @if overview.pointer(&details).is_some() {
                                td.num data-ptr=(details) data-fmt="rate" { (rate(float(overview, &details))) }
                            } @else {
                                // The API gives the totals only: the script derives the rate
                                // from two polls.
                                td.num data-rate-of=(format!("/message_stats/{key}")) { "–" }
                            }
                        }
                    }
                }
            }
            p.hint { "Node " (text(overview, "/node")) " · " (text(overview, "/product_name")) " " (text(overview, "/product_version")) " compatible" }
        }
    }
}

/// Every node of the cluster (one on a single node), with its resources, and the alarms in
/// effect on any of them: one node's alarm blocks the publishers of all.
fn nodes(nodes: &[JsonValue]) -> Markup {
    let on = |node: &JsonValue, key: &str| node.pointer(key).and_then(JsonValue::as_bool).unwrap_or(false);
    let alarms: Vec<String> = nodes
        .iter()
        .flat_map(|node| {
            let name = text(node, "/name");
            let memory = on(node, "/mem_alarm").then(|| format!("Memory alarm on node {name}."));
            memory.into_iter().chain(on(node, "/disk_free_alarm").then(|| format!("Disk alarm on node {name}.")))
        })
        .collect();
    html! {
        section {
            h2 { "Alarms and resources" }
            @if alarms.is_empty() { p.ok-line #alarms { "No alarms in effect" } }
            @else {
                p.flash.error #alarms {
                    @for alarm in &alarms { (alarm) " " }
                    "Publishers are blocked."
                }
            }
            table.data #nodes {
                thead { tr { th { "Node" } th { "State" } th { "Memory" } th { "Disk free" } th { "File descriptors" } th { "Uptime" } } }
                tbody {
                    @for node in nodes {
                        @let (running, measured) = (on(node, "/running"), node.pointer("/mem_limit").is_some());
                        tr data-node=(text(node, "/name")) {
                            td { (text(node, "/name")) }
                            td class=(if running { "" } else { "alarm" }) { @if running { "running" } @else { "down" } }
                            @if measured {
                                td class=(if on(node, "/mem_alarm") { "alarm" } else { "" }) { (size(int(node, "/mem_used"))) " / " (size(int(node, "/mem_limit"))) " limit" }
                                td class=(if on(node, "/disk_free_alarm") { "alarm" } else { "" }) { (size(int(node, "/disk_free"))) " (limit " (size(int(node, "/disk_free_limit"))) ")" }
                                td { (count(int(node, "/fd_used"))) " / " (count(int(node, "/fd_total"))) }
                                td { (crate::format::age(int(node, "/uptime") / 1000)) }
                            } @else {
                                td colspan="4" { "–" }
                            }
                        }
                    }
                }
            }
        }
    }
}
