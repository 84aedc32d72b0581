//! Exchanges: the list, and one exchange with its bindings in both directions.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value as JsonValue;

use super::listing;
use crate::Ui;
use crate::api::segment;
use crate::format::{count, int, items, json, text};
use crate::layout::{Tab, failure, page};
use crate::viewer::Viewer;

/// Exchanges on one page of the list.
const PAGE_SIZE: u64 = 100;

/// The link to an exchange's page (the default exchange's name is empty: `amq.default`).
pub(crate) fn href(vhost: &str, name: &str) -> String {
    let name = if name.is_empty() { "amq.default" } else { name };
    format!("/exchanges/{}/{}", segment(vhost), segment(name))
}

/// `GET /exchanges?page=&name=`.
pub(crate) async fn list(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let page_number = listing::page_number(&query);
    let filter = listing::name_filter(&query);
    let path = listing::api_path("exchanges", page_number, PAGE_SIZE, filter);
    let listed = ui.api.get(&viewer.user, &path).await;
    let content = html! {
        (listing::filter_form("/exchanges", filter, "exchange name"))
        @match &listed {
            Err(error) => (failure("Exchanges", error)),
            Ok(listed) => {
                p.hint { (count(int(listed, "/filtered_count"))) " of " (count(int(listed, "/total_count"))) " exchanges" }
                table.data #exchanges {
                    thead { tr { th { "Virtual host" } th { "Name" } th { "Type" } th { "Features" } } }
                    tbody {
                        @for exchange in items(listed, "/items") {
                            @let (vhost, name) = (text(exchange, "/vhost"), text(exchange, "/name"));
                            tr {
                                td { (vhost) }
                                td { a href=(href(&vhost, &name)) { @if name.is_empty() { "(AMQP default)" } @else { (name) } } }
                                td { (text(exchange, "/type")) }
                                td {
                                    @if exchange.pointer("/durable").and_then(JsonValue::as_bool) == Some(true) { abbr.badge title="durable" { "D" } }
                                    @if exchange.pointer("/auto_delete").and_then(JsonValue::as_bool) == Some(true) { abbr.badge title="auto-delete" { "AD" } }
                                    @if exchange.pointer("/internal").and_then(JsonValue::as_bool) == Some(true) { abbr.badge title="internal" { "I" } }
                                    @if let Some(arguments) = exchange.pointer("/arguments").and_then(JsonValue::as_object) {
                                        @for (key, value) in arguments { abbr.badge title=(format!("{key}: {}", json(value))) { "Args" } }
                                    }
                                }
                            }
                        }
                    }
                }
                @let pages = int(listed, "/page_count");
                @if pages > 1 {
                    nav.pager {
                        @if page_number > 1 { a href=(format!("/exchanges?page={}&name={}", page_number - 1, segment(filter))) { "‹ Previous" } }
                        span { "Page " (page_number) " of " (pages) }
                        @if page_number < pages { a href=(format!("/exchanges?page={}&name={}", page_number + 1, segment(filter))) { "Next ›" } }
                    }
                }
            }
        }
    };
    page(&viewer, Tab::Exchanges, "Exchanges", content)
}

/// `GET /exchanges/{vhost}/{name}` (`amq.default`: the default exchange).
pub(crate) async fn one(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, name)): Path<(String, String)>,
) -> Response {
    let path = format!("/api/exchanges/{}/{}", segment(&vhost), segment(&name));
    let exchange = ui.api.get(&viewer.user, &path).await;
    let source = ui.api.get(&viewer.user, &format!("{path}/bindings/source")).await;
    let destination = ui.api.get(&viewer.user, &format!("{path}/bindings/destination")).await;
    let content = match &exchange {
        Err(error) => failure("Exchange", error),
        Ok(exchange) => html! {
            p.hint { "Virtual host " strong { (vhost) } " · type " (text(exchange, "/type")) }
            h2 { "Arguments" }
            (crate::pages::queues::kv_table(exchange.pointer("/arguments")))
            h2 { "Bindings from this exchange" }
            @match &source { Ok(b) => (bindings_table(items(b, ""), false)), Err(e) => (failure("Bindings", e)) }
            h2 { "Bindings to this exchange" }
            @match &destination { Ok(b) => (bindings_table(items(b, ""), true)), Err(e) => (failure("Bindings", e)) }
        },
    };
    page(&viewer, Tab::Exchanges, &format!("Exchange {name}"), content)
}

/// Bindings: by their source (`show_source`, a queue's or an exchange's incoming bindings) or
/// their destination.
pub(crate) fn bindings_table(bindings: &[JsonValue], show_source: bool) -> Markup {
    html! {
        @if bindings.is_empty() { p.empty { "No bindings" } }
        @else {
            table.data {
                thead { tr { th { @if show_source { "From" } @else { "To" } } th { "Routing key" } th { "Arguments" } } }
                tbody {
                    @for binding in bindings {
                        @let vhost = text(binding, "/vhost");
                        tr {
                            @if show_source {
                                @let source = text(binding, "/source");
                                td { a href=(href(&vhost, &source)) { @if source.is_empty() { "(AMQP default)" } @else { (source) } } }
                            } @else {
                                @let destination = text(binding, "/destination");
                                td {
                                    @if text(binding, "/destination_type") == "queue" {
                                        "queue " a href=(crate::pages::queues::href(&vhost, &destination)) { (destination) }
                                    } @else {
                                        "exchange " a href=(href(&vhost, &destination)) { (destination) }
                                    }
                                }
                            }
                            td { code { (text(binding, "/routing_key")) } }
                            td { @if let Some(a) = binding.pointer("/arguments").filter(|a| a.as_object().is_some_and(|o| !o.is_empty())) { code { (json(a)) } } }
                        }
                    }
                }
            }
        }
    }
}
