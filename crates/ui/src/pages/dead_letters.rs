//! Dead letters: per dead-letter queue the reasons, rates and oldest age
//! (`GET /api/charon/dead-letters/{vhost}`), with links to the browser and to redrive.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use maud::html;
use serde_json::Value as JsonValue;

use crate::Ui;
use crate::api::{ApiFailure, segment};
use crate::format::{age, count, float, int, items, rate, text};
use crate::layout::{Tab, failure, page};
use crate::viewer::Viewer;

/// The death reasons, in the order the pages show them (the API's keys).
pub(crate) const REASONS: [&str; 4] = ["rejected", "expired", "maxlen", "delivery_limit"];

/// Every vhost's dead-letter queues this user may see: `(vhost, queue summary)`.
pub(crate) async fn summaries(ui: &Ui, viewer: &Viewer) -> Result<Vec<(String, JsonValue)>, ApiFailure> {
    let vhosts = ui.api.get(&viewer.user, "/api/vhosts").await?;
    let mut all = Vec::new();
    for vhost in items(&vhosts, "") {
        let name = text(vhost, "/name");
        let queues = ui.api.get(&viewer.user, &format!("/api/charon/dead-letters/{}", segment(&name))).await?;
        all.extend(items(&queues, "").iter().map(|q| (name.clone(), q.clone())));
    }
    Ok(all)
}

/// `GET /dead-letters`.
pub(crate) async fn summary(State(ui): State<Arc<Ui>>, viewer: Viewer) -> Response {
    let vhosts = ui.api.get(&viewer.user, "/api/vhosts").await;
    let mut sections = Vec::new();
    if let Ok(vhosts) = &vhosts {
        for vhost in items(vhosts, "") {
            let name = text(vhost, "/name");
            let path = format!("/api/charon/dead-letters/{}", segment(&name));
            let queues = ui.api.get(&viewer.user, &path).await;
            sections.push((name, path, queues));
        }
    }
    let content = html! {
        p.hint { "Queues that dead-lettered messages, by reason, and the queues that receive dead letters. Browse a queue to see each message's death history, delete or move messages, or start a redrive job to send them back." }
        p { a.button href="/redrives" { "Redrive jobs" } }
        @if let Err(error) = &vhosts { (failure("Virtual hosts", error)) }
        @for (vhost, path, queues) in &sections {
            section {
                h2 { "Virtual host " (vhost) }
                @match queues {
                    Err(error) => (failure("Dead letters", error)),
                    Ok(queues) if items(queues, "").is_empty() => p.empty { "No dead-lettered messages" },
                    Ok(queues) => table.data.dead-letters data-src=(path) data-items="" data-key="queue" {
                        thead {
                            tr.group { th { "" } th colspan="4" { "Dead-lettered from this queue" } th colspan="4" { "Rate" } th colspan="2" { "Held now" } th {} }
                            tr {
                                th { "Queue" }
                                @for reason in REASONS { th.num { (reason) } }
                                @for reason in REASONS { th.num { (reason) } }
                                th.num { "Messages" } th.num { "Oldest" } th {}
                            }
                        }
                        tbody { @for q in items(queues, "") {
                            @let queue = text(q, "/queue");
                            tr data-key=(queue) {
                                td { a href=(crate::pages::browser::href(vhost, &queue)) { (queue) } }
                                @for reason in REASONS {
                                    @let ptr = format!("/dead_lettered/{reason}");
                                    td.num data-ptr=(ptr) data-fmt="count" { (count(int(q, &ptr))) }
                                }
                                @for reason in REASONS {
                                    @let ptr = format!("/rates/{reason}");
                                    td.num data-ptr=(ptr) data-fmt="rate" { (rate(float(q, &ptr))) }
                                }
                                td.num data-ptr="/messages" data-fmt="count" { (count(int(q, "/messages"))) }
                                td.num data-ptr="/oldest_message_age_seconds" data-fmt="age" {
                                    @if int(q, "/messages") > 0 { (age(int(q, "/oldest_message_age_seconds"))) } @else { "–" }
                                }
                                td.actions {
                                    a.small.button href=(crate::pages::browser::href(vhost, &queue)) { "Browse" } " "
                                    a.small.button href=(format!("/redrives?vhost={}&source={}", segment(vhost), segment(&queue))) { "Redrive" }
                                }
                            }
                        } }
                    },
                }
            }
        }
    };
    page(&viewer, Tab::DeadLetters, "Dead letters", content)
}
