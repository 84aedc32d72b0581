//! Queues: the list (paged, filtered by name), one queue (depth, rates, consumers, arguments,
//! effective policy, bindings) and its purge and delete.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::Value as JsonValue;

use super::listing;
use crate::Ui;
use crate::api::segment;
use crate::form::Form;
use crate::format::{count, float, int, items, json, rate, size, text};
use crate::layout::{Tab, csrf, failure, page};
use crate::viewer::Viewer;

/// Queues on one page of the list.
const PAGE_SIZE: u64 = 100;

/// The link to a queue's page.
pub(crate) fn href(vhost: &str, name: &str) -> String {
    format!("/queues/{}/{}", segment(vhost), segment(name))
}

/// `GET /queues?page=&name=`.
pub(crate) async fn list(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let page_number = listing::page_number(&query);
    let filter = listing::name_filter(&query);
    let path = listing::api_path("queues", page_number, PAGE_SIZE, filter);
    let listed = ui.api.get(&viewer.user, &path).await;
    let content = html! {
        (listing::filter_form("/queues", filter, "queue name"))
        @match &listed {
            Err(error) => (failure("Queues", error)),
            Ok(listed) => {
                p.hint { (count(int(listed, "/filtered_count"))) " of " (count(int(listed, "/total_count"))) " queues" }
                table.data #queues data-src=(path) data-items="/items" data-key="vhost,name" {
                    thead {
                        tr.group { th colspan="5" { "Overview" } th colspan="3" { "Messages" } th colspan="3" { "Message rates" } }
                        tr {
                            th { "Virtual host" } th { "Name" } th { "Type" } th { "Features" } th { "State" }
                            th.num { "Ready" } th.num { "Unacked" } th.num { "Total" }
                            th.num { "incoming" } th.num { "deliver / get" } th.num { "ack" }
                        }
                    }
                    tbody {
                        @for queue in items(listed, "/items") { (row(queue)) }
                        @if items(listed, "/items").is_empty() { tr { td colspan="11" .empty { "No queues" } } }
                    }
                }
                (pager(page_number, int(listed, "/page_count"), filter))
            }
        }
    };
    page(&viewer, Tab::Queues, "Queues", content)
}

fn row(queue: &JsonValue) -> Markup {
    let (vhost, name) = (text(queue, "/vhost"), text(queue, "/name"));
    html! {
        tr data-key=(format!("{vhost}\u{1f}{name}")) {
            td { (vhost) }
            td { a href=(href(&vhost, &name)) { (name) } }
            td { (text(queue, "/type")) }
            td { (features(queue)) }
            td { span.state { (text(queue, "/state")) } }
            td.num data-ptr="/messages_ready" data-fmt="count" { (count(int(queue, "/messages_ready"))) }
            td.num data-ptr="/messages_unacknowledged" data-fmt="count" { (count(int(queue, "/messages_unacknowledged"))) }
            td.num data-ptr="/messages" data-fmt="count" { (count(int(queue, "/messages"))) }
            td.num data-ptr="/message_stats/publish_details/rate" data-fmt="rate" { (rate(float(queue, "/message_stats/publish_details/rate"))) }
            td.num data-ptr="/message_stats/deliver_get_details/rate" data-fmt="rate" { (rate(float(queue, "/message_stats/deliver_get_details/rate"))) }
            td.num data-ptr="/message_stats/ack_details/rate" data-fmt="rate" { (rate(float(queue, "/message_stats/ack_details/rate"))) }
        }
    }
}

/// RabbitMQ's feature badges: D(urable), AD, Excl, arguments abbreviated, the policy.
fn features(queue: &JsonValue) -> Markup {
    const ABBREVIATIONS: [(&str, &str); 9] = [
        ("x-message-ttl", "TTL"),
        ("x-expires", "Exp"),
        ("x-max-length", "Lim"),
        ("x-max-length-bytes", "Lim B"),
        ("x-dead-letter-exchange", "DLX"),
        ("x-dead-letter-routing-key", "DLK"),
        ("x-overflow", "Ovfl"),
        ("x-delivery-limit", "DlvLim"),
        ("x-max-priority", "Pri"),
    ];
    let arguments = queue.pointer("/arguments").and_then(JsonValue::as_object);
    html! {
        @if queue.pointer("/durable").and_then(JsonValue::as_bool) == Some(true) { abbr.badge title="durable" { "D" } }
        @if queue.pointer("/auto_delete").and_then(JsonValue::as_bool) == Some(true) { abbr.badge title="auto-delete" { "AD" } }
        @if queue.pointer("/exclusive").and_then(JsonValue::as_bool) == Some(true) { abbr.badge title="exclusive" { "Excl" } }
        @for (key, short) in ABBREVIATIONS {
            @if let Some(value) = arguments.and_then(|a| a.get(key)) {
                abbr.badge title=(format!("{key}: {}", json(value))) { (short) }
            }
        }
        @if !text(queue, "/policy").is_empty() { span.badge.policy title="policy" { (text(queue, "/policy")) } }
    }
}

fn pager(current: u64, pages: u64, filter: &str) -> Markup {
    html! {
        @if pages > 1 {
            nav.pager {
                @if current > 1 { a href=(format!("/queues?page={}&name={}", current - 1, segment(filter))) { "‹ Previous" } }
                span { "Page " (current) " of " (pages) }
                @if current < pages { a href=(format!("/queues?page={}&name={}", current + 1, segment(filter))) { "Next ›" } }
            }
        }
    }
}

/// `GET /queues/{vhost}/{name}`.
pub(crate) async fn one(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, name)): Path<(String, String)>,
) -> Response {
    let path = format!("/api/queues/{}/{}", segment(&vhost), segment(&name));
    let queue = ui.api.get(&viewer.user, &path).await;
    let bindings = ui.api.get(&viewer.user, &format!("{path}/bindings")).await;
    let consumers = ui.api.get(&viewer.user, &format!("/api/consumers/{}", segment(&vhost))).await;
    let title = format!("Queue {name}");
    let content = match &queue {
        Err(error) => failure("Queue", error),
        Ok(queue) => html! {
            p.hint { "Virtual host " strong { (vhost) } " · type " (text(queue, "/type")) " · " span.state { (text(queue, "/state")) } }
            section data-src=(path) {
                div.cards {
                    @for (ptr, label) in [("/messages_ready", "Ready"), ("/messages_unacknowledged", "Unacked"), ("/messages", "Total"), ("/consumers", "Consumers")] {
                        div.card { span.label { (label) } span.value data-ptr=(ptr) data-fmt="count" { (count(int(queue, ptr))) } }
                    }
                    div.card { span.label { "Bytes" } span.value data-ptr="/message_bytes" data-fmt="size" { (size(int(queue, "/message_bytes"))) } }
                }
                h2 { "Message rates" }
                table.data.narrow {
                    tbody {
                        @for (key, label) in [("publish", "Incoming"), ("deliver_get", "Deliver / get"), ("ack", "Consumer ack"), ("redeliver", "Redelivered")] {
                            @let ptr = format!("/message_stats/{key}_details/rate");
                            tr { td { (label) } td.num data-ptr=(ptr) data-fmt="rate" { (rate(float(queue, &ptr))) } td.num data-ptr=(format!("/message_stats/{key}")) data-fmt="count" { (count(int(queue, &format!("/message_stats/{key}")))) } }
                        }
                    }
                }
            }
            div.columns {
                section {
                    h2 { "Arguments" }
                    (kv_table(queue.pointer("/arguments")))
                }
                section {
                    h2 { "Policy" }
                    p { @if text(queue, "/policy").is_empty() { "No policy applies." } @else { "Policy " strong { (text(queue, "/policy")) } } }
                    h3 { "Effective policy definition" }
                    (kv_table(queue.pointer("/effective_policy_definition")))
                }
            }
            section {
                h2 { "Consumers" }
                @match &consumers {
                    Err(error) => (failure("Consumers", error)),
                    Ok(consumers) => {
                        @let mine: Vec<&JsonValue> = items(consumers, "").iter().filter(|c| text(c, "/queue/name") == name).collect();
                        @if mine.is_empty() { p.empty { "No consumers" } }
                        @else {
                            table.data {
                                thead { tr { th { "Channel" } th { "Consumer tag" } th { "Ack required" } th { "Exclusive" } th.num { "Prefetch" } th { "Active" } } }
                                tbody { @for c in mine { tr {
                                    td { (text(c, "/channel_details/name")) } td { (text(c, "/consumer_tag")) }
                                    td { (text(c, "/ack_required")) } td { (text(c, "/exclusive")) }
                                    td.num { (int(c, "/prefetch_count")) } td { (text(c, "/activity_status")) }
                                } } }
                            }
                        }
                    }
                }
            }
            section {
                h2 { "Bindings" }
                @match &bindings {
                    Err(error) => (failure("Bindings", error)),
                    Ok(bindings) => (crate::pages::exchanges::bindings_table(items(bindings, ""), true)),
                }
            }
            section {
                h2 { "Dead letters" }
                p {
                    a.button href=(crate::pages::browser::href(&vhost, &name)) { "Browse messages" } " "
                    a.button href=(format!("/redrives?vhost={}&source={}", segment(&vhost), segment(&name))) { "Redrive…" }
                }
            }
            section.danger {
                h2 { "Purge and delete" }
                form.inline method="post" action=(format!("{}/purge", href(&vhost, &name))) data-confirm="Purge every ready message of this queue?" {
                    (csrf(&viewer)) button.warn type="submit" { "Purge messages" }
                }
                " "
                form.inline method="post" action=(format!("{}/delete", href(&vhost, &name))) data-confirm="Delete this queue and its messages?" {
                    (csrf(&viewer)) button.danger type="submit" { "Delete queue" }
                }
            }
        },
    };
    page(&viewer, Tab::Queues, &title, content)
}

/// A two-column table of a JSON object.
pub(crate) fn kv_table(object: Option<&JsonValue>) -> Markup {
    let entries = object.and_then(JsonValue::as_object);
    html! {
        @match entries.filter(|e| !e.is_empty()) {
            None => p.empty { "None" },
            Some(entries) => table.data.narrow.kv { tbody { @for (k, v) in entries { tr { th { (k) } td { code { (json(v)) } } } } } },
        }
    }
}

/// `POST /queues/{vhost}/{name}/purge`.
pub(crate) async fn purge(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, name)): Path<(String, String)>,
    form: Form,
) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let path = format!("/api/queues/{}/{}/contents", segment(&vhost), segment(&name));
    match ui.api.call(&viewer.user, Method::DELETE, &path, None).await {
        Ok(_) => viewer.flash(&ui, false, format!("Queue {name} purged")),
        Err(error) => viewer.flash(&ui, true, format!("Purge failed: {error}")),
    }
    Redirect::to(&href(&vhost, &name)).into_response()
}

/// `POST /queues/{vhost}/{name}/delete`.
pub(crate) async fn delete(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, name)): Path<(String, String)>,
    form: Form,
) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let path = format!("/api/queues/{}/{}", segment(&vhost), segment(&name));
    match ui.api.call(&viewer.user, Method::DELETE, &path, None).await {
        Ok(_) => {
            viewer.flash(&ui, false, format!("Queue {name} deleted"));
            Redirect::to("/queues").into_response()
        }
        Err(error) => {
            viewer.flash(&ui, true, format!("Delete failed: {error}"));
            Redirect::to(&href(&vhost, &name)).into_response()
        }
    }
}
