//! The dead-letter browser: a queue's messages without consuming them, paged and filtered, each
//! with its properties, body preview and death history; delete or move the selected ones.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::{Value as JsonValue, json};

use crate::Ui;
use crate::api::segment;
use crate::form::Form;
use crate::format::{count, int, items, json as show, text};
use crate::layout::{Tab, csrf, failure};
use crate::pages::dead_letters::REASONS;
use crate::pages::redrives::{destination, destination_fields, utc};
use crate::viewer::Viewer;

/// Messages on one page.
const PAGE_SIZE: u64 = 20;
/// Body bytes shown per message.
const TRUNCATE: u64 = 2048;
/// The browser's query parameters the page passes on to the API as they are.
const FILTERS: [&str; 6] = ["order", "reason", "source_queue", "message_id", "died_after", "died_before"];

/// The link to a queue's browser.
pub(crate) fn href(vhost: &str, queue: &str) -> String {
    format!("/dead-letters/{}/{}", segment(vhost), segment(queue))
}

/// `GET /dead-letters/{vhost}/{queue}?page=&order=&reason=&source_queue=&message_id=`.
pub(crate) async fn page(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, queue)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let page_number = super::listing::page_number(&query);
    let filters: Vec<(&str, &str)> = FILTERS
        .iter()
        .filter_map(|key| query.get(*key).map(|v| (*key, v.trim())).filter(|(_, v)| !v.is_empty()))
        .collect();
    let filter_query: String = filters.iter().map(|(k, v)| format!("&{k}={}", segment(v))).collect();
    let path = format!(
        "/api/charon/queues/{}/{}/messages?page={page_number}&page_size={PAGE_SIZE}&truncate={TRUNCATE}{filter_query}",
        segment(&vhost),
        segment(&queue)
    );
    let listed = ui.api.get(&viewer.user, &path).await;
    let chosen = |key: &str| query.get(key).map_or("", String::as_str).to_owned();
    let here = href(&vhost, &queue);
    let content = html! {
        p.hint {
            "Virtual host " strong { (vhost) } " · "
            a href=(crate::pages::queues::href(&vhost, &queue)) { "queue details" } " · "
            a href=(format!("/redrives?vhost={}&source={}", segment(&vhost), segment(&queue))) { "redrive this queue…" }
        }
        form.filter method="get" action=(here) {
            label { "Order "
                select name="order" {
                    option value="oldest" selected[chosen("order") != "newest"] { "oldest first" }
                    option value="newest" selected[chosen("order") == "newest"] { "newest first" }
                }
            }
            label { "Reason "
                select name="reason" {
                    option value="" { "any" }
                    @for reason in REASONS { option value=(reason) selected[chosen("reason") == reason] { (reason) } }
                }
            }
            label { "Source queue " input type="text" name="source_queue" value=(chosen("source_queue")) size="14"; }
            label { "Message id " input type="text" name="message_id" value=(chosen("message_id")) size="14"; }
            button type="submit" { "Filter" }
        }
        @match &listed {
            Err(error) => (failure("Messages", error)),
            Ok(listed) => {
                @let messages = items(listed, "/items");
                form #selection method="post" action=(format!("{here}/delete")) {
                    (csrf(&viewer))
                    input type="hidden" name="back" value=(format!("{here}?page={page_number}{filter_query}"));
                    @if messages.is_empty() { p.empty { "No messages on this page" } }
                    @else {
                        p.selection {
                            label { input type="checkbox" data-select-all="ids"; " select all on this page" }
                        }
                        @for message in messages { (message_card(message)) }
                        div.actions-bar {
                            button.danger type="submit" formaction=(format!("{here}/delete")) data-confirm="Delete the selected messages?" { "Delete selected" }
                            fieldset.move {
                                legend { "Move selected to" }
                                (destination_fields("move"))
                                button.primary type="submit" formaction=(format!("{here}/move")) { "Move selected" }
                            }
                        }
                    }
                }
                nav.pager {
                    @if page_number > 1 { a href=(format!("{here}?page={}{filter_query}", page_number - 1)) { "‹ Previous" } }
                    span { "Page " (page_number) }
                    @if listed.pointer("/has_more").and_then(JsonValue::as_bool) == Some(true) {
                        a href=(format!("{here}?page={}{filter_query}", page_number + 1)) { "Next ›" }
                    }
                }
            }
        }
    };
    crate::layout::page(&viewer, Tab::DeadLetters, &format!("Messages of {queue}"), content)
}

fn message_card(message: &JsonValue) -> Markup {
    let id = message.pointer("/id").cloned().unwrap_or(JsonValue::Null);
    let properties = message.pointer("/properties").and_then(JsonValue::as_object);
    let payload_bytes = int(message, "/payload_bytes");
    let payload = text(message, "/payload");
    html! {
        article.message data-id=(show(&id)) {
            header {
                label { input type="checkbox" name="ids" value=(id.to_string()); " " strong { "#" (show(&id)) } }
                @if let Some(mid) = properties.and_then(|p| p.get("message_id")) { span.mid { "message id " code { (show(mid)) } } }
                span.size { (count(payload_bytes)) " bytes" }
            }
            div.body {
                div.payload {
                    h4 { "Payload " small { "(" (text(message, "/payload_encoding")) @if (payload.len() as u64) < payload_bytes && text(message, "/payload_encoding") == "string" { ", truncated" } ")" } }
                    pre { (payload) }
                }
                div.props {
                    h4 { "Properties" }
                    table.kv { tbody {
                        @if let Some(properties) = properties {
                            @for (key, value) in properties.iter().filter(|(k, _)| *k != "headers") {
                                tr { th { (key) } td { code { (show(value)) } } }
                            }
                            @if let Some(headers) = properties.get("headers").and_then(JsonValue::as_object) {
                                @for (key, value) in headers.iter().filter(|(k, _)| !k.starts_with("x-death") && !k.starts_with("x-first-death") && !k.starts_with("x-last-death")) {
                                    tr { th { "header " (key) } td { code { (show(value)) } } }
                                }
                            }
                        }
                    } }
                }
            }
            h4 { "Death history" }
            table.data.deaths {
                thead { tr {
                    th { "Reason" } th { "Queue" } th { "Exchange" } th { "Routing keys" } th.num { "Count" }
                    th { "First time" } th { "Last time" } th { "Error" }
                } }
                tbody {
                    @for death in items(message, "/deaths") {
                        tr {
                            td { span class=(format!("reason reason-{}", text(death, "/reason"))) { (text(death, "/reason")) } }
                            td { (text(death, "/queue")) }
                            td { @let e = text(death, "/exchange"); @if e.is_empty() { "(AMQP default)" } @else { (e) } }
                            td { (items(death, "/routing_keys").iter().map(show).collect::<Vec<_>>().join(", ")) }
                            td.num { (int(death, "/count")) }
                            td { (time(death.pointer("/first_time"))) }
                            td { (time(death.pointer("/last_time"))) }
                            td { (text(death, "/error_condition")) @let d = text(death, "/error_description"); @if !d.is_empty() { br; small { (d) } } }
                        }
                    }
                }
            }
        }
    }
}

/// A death time: seconds since the epoch as UTC, anything else as it is.
fn time(value: Option<&JsonValue>) -> String {
    match value {
        Some(JsonValue::Number(n)) => n.as_u64().map_or_else(|| n.to_string(), utc),
        Some(JsonValue::Null) | None => String::new(),
        Some(other) => show(other),
    }
}

/// The selected ids, as the API gave them (each checkbox holds its id as JSON).
fn selected(form: &Form) -> Vec<JsonValue> {
    form.all("ids").into_iter().filter_map(|id| serde_json::from_str(id).ok()).collect()
}

/// Where to go after a form: the page it came from (only a browser page of this server).
fn back(form: &Form, fallback: String) -> Redirect {
    let back = form.get("back");
    Redirect::to(if back.starts_with("/dead-letters/") { back } else { &fallback })
}

/// `POST /dead-letters/{vhost}/{queue}/delete`.
pub(crate) async fn delete(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, queue)): Path<(String, String)>,
    form: Form,
) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let ids = selected(&form);
    if ids.is_empty() {
        viewer.flash(&ui, true, "No message selected");
    } else {
        let path = format!("/api/charon/queues/{}/{}/messages/delete", segment(&vhost), segment(&queue));
        match ui.api.call(&viewer.user, Method::POST, &path, Some(&json!({ "ids": ids }))).await {
            Ok(answer) => viewer.flash(&ui, false, format!("Deleted {} message(s)", int(&answer, "/deleted"))),
            Err(error) => viewer.flash(&ui, true, format!("Delete failed: {error}")),
        }
    }
    back(&form, href(&vhost, &queue)).into_response()
}

/// `POST /dead-letters/{vhost}/{queue}/move`.
pub(crate) async fn move_selected(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, queue)): Path<(String, String)>,
    form: Form,
) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let ids = selected(&form);
    match (ids.is_empty(), destination(&form, "move")) {
        (true, _) => viewer.flash(&ui, true, "No message selected"),
        (false, Err(problem)) => viewer.flash(&ui, true, problem),
        (false, Ok(destination)) => {
            let path = format!("/api/charon/queues/{}/{}/messages/move", segment(&vhost), segment(&queue));
            let body = json!({ "ids": ids, "destination": destination });
            match ui.api.call(&viewer.user, Method::POST, &path, Some(&body)).await {
                Ok(answer) => viewer.flash(
                    &ui,
                    int(&answer, "/failed") > 0,
                    format!("Moved {} message(s), {} failed", int(&answer, "/moved"), int(&answer, "/failed")),
                ),
                Err(error) => viewer.flash(&ui, true, format!("Move failed: {error}")),
            }
        }
    }
    back(&form, href(&vhost, &queue)).into_response()
}
