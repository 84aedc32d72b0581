//! Redrive jobs: the list with the form that starts one (filter, destination, rate, dry run),
//! one job with its live progress, and pause, resume, cancel, delete.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::Method;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::{Map, Value as JsonValue, json};

use charon_model::calendar::UtcTime;

use crate::Ui;
use crate::api::segment;
use crate::form::Form;
use crate::format::{age, count, float, int, items, json as show, rate, text};
use crate::layout::{Tab, csrf, failure, page};
use crate::pages::dead_letters::REASONS;
use crate::viewer::Viewer;

/// The actions a job page posts, and the API call each one is.
const ACTIONS: [(&str, &str); 4] =
    [("pause", "Pause"), ("resume", "Resume"), ("cancel", "Cancel"), ("delete", "Delete")];

/// The link to a job's page.
fn href(vhost: &str, id: &str) -> String {
    format!("/redrives/{}/{}", segment(vhost), segment(id))
}

/// The destination choice of a form, its fields named `{prefix}_…`.
pub(crate) fn destination_fields(prefix: &str) -> Markup {
    html! {
        div.destination {
            div.option {
                label.choice { input type="radio" name=(format!("{prefix}_type")) value="original" checked; " the queue each message died in, from its" }
                select name=(format!("{prefix}_death")) {
                    option value="first" { "first death" }
                    option value="last" { "last death" }
                }
            }
            div.option {
                label.choice { input type="radio" name=(format!("{prefix}_type")) value="queue"; " queue" }
                input type="text" name=(format!("{prefix}_queue")) placeholder="queue name" size="16";
            }
            div.option {
                label.choice { input type="radio" name=(format!("{prefix}_type")) value="exchange"; " exchange" }
                input type="text" name=(format!("{prefix}_exchange")) placeholder="exchange" size="12";
                span { "routing key" }
                input type="text" name=(format!("{prefix}_routing_key")) placeholder="routing key" size="12";
            }
        }
    }
}

/// The destination JSON of the API from a form's `{prefix}_…` fields.
pub(crate) fn destination(form: &Form, prefix: &str) -> Result<JsonValue, String> {
    let field = |name: &str| form.some(&format!("{prefix}_{name}")).map(str::to_owned);
    match form.get(&format!("{prefix}_type")) {
        "" | "original" => {
            Ok(json!({ "type": "original", "death": field("death").unwrap_or_else(|| "first".to_owned()) }))
        }
        "queue" => field("queue")
            .map(|queue| json!({ "type": "queue", "queue": queue }))
            .ok_or_else(|| "Name the destination queue".to_owned()),
        "exchange" => Ok(json!({
            "type": "exchange",
            "exchange": form.get(&format!("{prefix}_exchange")).trim(),
            "routing_key": form.get(&format!("{prefix}_routing_key")),
        })),
        other => Err(format!("Unknown destination type {other}")),
    }
}

/// The filter JSON of the API from the form: reasons (checkboxes), source queues and message ids
/// (separated by commas or white space), a death time window, `name=value` header lines.
pub(crate) fn filter(form: &Form) -> Result<JsonValue, String> {
    let list = |name: &str| -> Vec<String> {
        form.get(name)
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut filter = Map::new();
    let reasons: Vec<&str> = form.all("reasons");
    if !reasons.is_empty() {
        filter.insert("reasons".into(), json!(reasons));
    }
    for (field, key) in [("source_queues", "source_queues"), ("message_ids", "message_ids")] {
        let values = list(field);
        if !values.is_empty() {
            filter.insert(key.into(), json!(values));
        }
    }
    for key in ["died_after", "died_before"] {
        if let Some(value) = form.some(key) {
            let seconds = parse_time(value).ok_or_else(|| format!("{key}: not a time (YYYY-MM-DDTHH:MM, UTC)"))?;
            filter.insert(key.into(), json!(seconds));
        }
    }
    let mut headers = Map::new();
    for line in form.get("headers").lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once('=').ok_or_else(|| format!("header {line}: expected name=value"))?;
        headers.insert(name.trim().to_owned(), json!(value.trim()));
    }
    if !headers.is_empty() {
        filter.insert("headers".into(), JsonValue::Object(headers));
    }
    Ok(JsonValue::Object(filter))
}

/// Seconds since the epoch from `YYYY-MM-DDTHH:MM[:SS]` (UTC; what `datetime-local` sends) or
/// a number of seconds.
pub(crate) fn parse_time(value: &str) -> Option<u64> {
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(seconds);
    }
    let (date, clock) = value.split_once('T').or_else(|| value.split_once(' '))?;
    let mut date = date.split('-').map(str::parse::<i64>);
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let mut clock = clock.trim_end_matches('Z').split(':').map(str::parse::<i64>);
    let (hour, minute) = (clock.next()?.ok()?, clock.next()?.ok()?);
    let second = clock.next().transpose().ok()?.unwrap_or(0);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    u64::try_from(UtcTime { year, month, day, hour, minute, second }.to_epoch()).ok()
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS` UTC.
pub(crate) fn utc(seconds: u64) -> String {
    UtcTime::from_epoch(i64::try_from(seconds).unwrap_or(i64::MAX)).format(' ')
}

/// `GET /redrives?vhost=&source=`: the jobs of every vhost, and the form.
pub(crate) async fn list(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let vhosts = ui.api.get(&viewer.user, "/api/vhosts").await;
    let names: Vec<String> =
        vhosts.as_ref().map(|v| items(v, "").iter().map(|v| text(v, "/name")).collect()).unwrap_or_default();
    let mut jobs = Vec::new();
    let mut problems = Vec::new();
    for vhost in &names {
        match ui.api.get(&viewer.user, &format!("/api/charon/redrives/{}", segment(vhost))).await {
            Ok(listed) => jobs.extend(items(&listed, "").iter().cloned()),
            Err(error) => problems.push(error),
        }
    }
    let chosen_vhost = query.get("vhost").cloned().unwrap_or_else(|| "/".to_owned());
    let source = query.get("source").map_or("", String::as_str);
    let content = html! {
        @if let Err(error) = &vhosts { (failure("Virtual hosts", error)) }
        @for problem in &problems { (failure("Redrive jobs", problem)) }
        section {
            h2 { "Jobs" }
            @if jobs.is_empty() { p.empty { "No redrive jobs" } }
            @else {
                table.data #jobs {
                    thead { tr { th { "Job" } th { "Virtual host" } th { "Source" } th { "Destination" } th { "State" } th { "Progress" } th.num { "Moved" } th.num { "Remaining" } } }
                    tbody { @for job in &jobs {
                        @let id = text(job, "/id");
                        @let vhost = text(job, "/vhost");
                        tr {
                            td { a href=(href(&vhost, &id)) { (id) } @if job.pointer("/dry_run").and_then(JsonValue::as_bool) == Some(true) { " " span.badge { "dry run" } } }
                            td { (vhost) }
                            td { (text(job, "/source")) }
                            td { (describe_destination(job.pointer("/destination"))) }
                            td { span class=(format!("state state-{}", text(job, "/state"))) { (text(job, "/state")) } }
                            td { (progress_bar(job)) }
                            td.num { (count(int(job, "/progress/moved"))) }
                            td.num { (count(int(job, "/progress/remaining"))) }
                        }
                    } }
                }
            }
        }
        section {
            h2 { "New redrive" }
            form.redrive method="post" action="/redrives" {
                (csrf(&viewer))
                div.grid {
                    label { "Virtual host"
                        select name="vhost" { @for name in &names { option value=(name) selected[*name == chosen_vhost] { (name) } } }
                    }
                    label { "Source queue" input type="text" name="source" value=(source) required; }
                }
                fieldset { legend { "Destination" } (destination_fields("destination")) }
                fieldset.filter-fields {
                    legend { "Filter (all optional)" }
                    div { "Reasons " @for reason in REASONS { label.choice { input type="checkbox" name="reasons" value=(reason); " " (reason) } " " } }
                    div.grid {
                        label { "Source queues" input type="text" name="source_queues" placeholder="orders, payments"; }
                        label { "Message ids" input type="text" name="message_ids" placeholder="id1, id2"; }
                        label { "Died after (UTC)" input type="datetime-local" name="died_after"; }
                        label { "Died before (UTC)" input type="datetime-local" name="died_before"; }
                    }
                    label { "Headers (name=value, one a line)" textarea name="headers" rows="2" {} }
                }
                fieldset {
                    legend { "Pace" }
                    div.grid {
                        label { "Rate (messages/s, empty: unlimited)" input type="number" name="rate" min="1" step="1"; }
                        label { "At most (messages, empty: all)" input type="number" name="max_messages" min="1"; }
                    }
                    label.choice { input type="checkbox" name="dry_run" value="true" checked; " Dry run: only count what would move, by reason and source" }
                }
                button.primary type="submit" { "Start redrive" }
            }
        }
    };
    page(&viewer, Tab::DeadLetters, "Redrive jobs", content)
}

fn describe_destination(destination: Option<&JsonValue>) -> String {
    let Some(d) = destination else { return String::new() };
    match text(d, "/type").as_str() {
        "original" => format!("original queue ({} death)", text(d, "/death")),
        "queue" => format!("queue {}", text(d, "/queue")),
        "exchange" => format!("exchange {} / {}", text(d, "/exchange"), text(d, "/routing_key")),
        _ => show(d),
    }
}

/// The criteria of a filter that are set, in words ("none" when it takes every message).
fn describe_filter(filter: Option<&JsonValue>) -> String {
    let Some(filter) = filter.and_then(JsonValue::as_object) else { return "none".to_owned() };
    let parts: Vec<String> = filter
        .iter()
        .filter_map(|(key, value)| match value {
            JsonValue::Null => None,
            JsonValue::Array(a) if a.is_empty() => None,
            JsonValue::Object(o) if o.is_empty() => None,
            JsonValue::Array(a) => Some(format!("{key}: {}", a.iter().map(show).collect::<Vec<_>>().join(", "))),
            JsonValue::Number(n) if key.starts_with("died_") => {
                Some(format!("{key}: {} UTC", n.as_u64().map_or_else(|| n.to_string(), utc)))
            }
            other => Some(format!("{key}: {}", show(other))),
        })
        .collect();
    if parts.is_empty() { "none (every message)".to_owned() } else { parts.join("; ") }
}

/// A job's time: milliseconds (or seconds) since the epoch as UTC.
fn when(value: Option<&JsonValue>) -> String {
    match value.and_then(JsonValue::as_u64) {
        Some(ms) if ms > 100_000_000_000 => format!("{} UTC", utc(ms / 1000)),
        Some(seconds) => format!("{} UTC", utc(seconds)),
        None => value.map(show).unwrap_or_default(),
    }
}

/// Moved, skipped and failed of all the job has seen, as a bar.
fn progress_bar(job: &JsonValue) -> Markup {
    let done = int(job, "/progress/moved") + int(job, "/progress/skipped") + int(job, "/progress/failed");
    let total = done + int(job, "/progress/remaining");
    let percent = if total == 0 { 0.0 } else { done as f64 * 100.0 / total as f64 };
    html! {
        div.progress data-progress role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow=(format!("{percent:.0}")) {
            div.bar style=(format!("width: {percent:.1}%")) {}
            span.label { (format!("{percent:.0}%")) }
        }
    }
}

/// `POST /redrives`: starts a job and shows it.
pub(crate) async fn create(State(ui): State<Arc<Ui>>, viewer: Viewer, form: Form) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let vhost = form.get("vhost").to_owned();
    let back = format!("/redrives?vhost={}&source={}", segment(&vhost), segment(form.get("source")));
    let body = match job_body(&form) {
        Ok(body) => body,
        Err(problem) => {
            viewer.flash(&ui, true, problem);
            return Redirect::to(&back).into_response();
        }
    };
    let path = format!("/api/charon/redrives/{}", segment(&vhost));
    match ui.api.call(&viewer.user, Method::POST, &path, Some(&body)).await {
        Ok(job) => {
            let dry_run = job.pointer("/dry_run").and_then(JsonValue::as_bool) == Some(true);
            viewer.flash(&ui, false, if dry_run { "Dry run started" } else { "Redrive started" });
            Redirect::to(&href(&vhost, &text(&job, "/id"))).into_response()
        }
        Err(error) => {
            viewer.flash(&ui, true, format!("Redrive refused: {error}"));
            Redirect::to(&back).into_response()
        }
    }
}

/// The API's job request from the form.
pub(crate) fn job_body(form: &Form) -> Result<JsonValue, String> {
    let source = form.some("source").ok_or("Name the source queue")?;
    let mut body = Map::new();
    body.insert("source".into(), json!(source));
    body.insert("destination".into(), destination(form, "destination")?);
    body.insert("filter".into(), filter(form)?);
    body.insert("dry_run".into(), json!(form.get("dry_run") == "true"));
    if let Some(rate) = form.some("rate") {
        let rate: u32 =
            rate.parse().ok().filter(|r| *r > 0).ok_or("Rate: a positive whole number of messages per second")?;
        body.insert("rate".into(), json!(rate));
    }
    if let Some(max) = form.some("max_messages") {
        let max: u64 = max.parse().ok().filter(|m| *m > 0).ok_or("At most: a positive number of messages")?;
        body.insert("max_messages".into(), json!(max));
    }
    Ok(JsonValue::Object(body))
}

/// `GET /redrives/{vhost}/{id}`.
pub(crate) async fn one(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, id)): Path<(String, String)>,
) -> Response {
    let path = format!("/api/charon/redrives/{}/{}", segment(&vhost), segment(&id));
    let job = ui.api.get(&viewer.user, &path).await;
    let content = match &job {
        Err(error) => failure("Redrive job", error),
        Ok(job) => {
            let state = text(job, "/state");
            html! {
                section.job data-src=(path) {
                    p.hint { a href="/redrives" { "← all jobs" } }
                    table.data.narrow.kv { tbody {
                        tr { th { "State" } td { span #job-state class=(format!("state state-{state}")) data-ptr="/state" data-reload { (state) } @let reason = text(job, "/reason"); @if !reason.is_empty() { " — " span #job-reason { (reason) } } } }
                        tr { th { "Source" } td { "queue " (text(job, "/source")) " in virtual host " (text(job, "/vhost")) } }
                        tr { th { "Destination" } td { (describe_destination(job.pointer("/destination"))) } }
                        tr { th { "Filter" } td { (describe_filter(job.pointer("/filter"))) } }
                        tr { th { "Dry run" } td { (text(job, "/dry_run")) } }
                        tr { th { "Rate limit" } td { @if job.pointer("/rate").is_some_and(|r| !r.is_null()) { (rate(float(job, "/rate"))) } @else { "unlimited" } } }
                        tr { th { "At most" } td { @if job.pointer("/max_messages").is_some_and(|r| !r.is_null()) { (count(int(job, "/max_messages"))) } @else { "all" } } }
                        tr { th { "Created" } td { (when(job.pointer("/created_at"))) } }
                        tr { th { "Updated" } td { (when(job.pointer("/updated_at"))) } }
                    } }
                    @let dry_run = job.pointer("/dry_run").and_then(JsonValue::as_bool) == Some(true);
                    h2 { "Progress" }
                    @if dry_run { p.hint { "A dry run moves nothing: it counts what would move." } }
                    @else { (progress_bar(job)) }
                    div.cards {
                        @for (key, label) in [("moved", "Moved"), ("skipped", "Skipped"), ("failed", "Failed"), ("remaining", "Remaining")] {
                            @let ptr = format!("/progress/{key}");
                            div.card { span.label { (label) } span.value id=(format!("progress-{key}")) data-ptr=(ptr) data-fmt="count" { (count(int(job, &ptr))) } }
                        }
                        div.card { span.label { "Rate" } span.value #progress-rate data-ptr="/progress/rate" data-fmt="rate" { (rate(float(job, "/progress/rate"))) } }
                        div.card { span.label { "ETA" } span.value #progress-eta data-ptr="/progress/eta_seconds" data-fmt="age" {
                            @if job.pointer("/progress/eta_seconds").is_some_and(|v| !v.is_null()) { (age(int(job, "/progress/eta_seconds"))) } @else { "–" }
                        } }
                    }
                    @if let Some(result) = job.pointer("/dry_run_result").filter(|r| !r.is_null()) {
                        h2 { "Dry run result" }
                        p #dry-run-total { strong { (count(int(result, "/total"))) } " message(s) would move" }
                        div.columns {
                            (breakdown("By reason", "dry-run-by-reason", result.pointer("/by_reason")))
                            (breakdown("By source queue", "dry-run-by-source", result.pointer("/by_source")))
                        }
                    }
                    div.actions-bar {
                        @for (action, label) in ACTIONS {
                            @if allowed(&state, action) {
                                form.inline method="post" action=(format!("{}/{action}", href(&vhost, &id))) {
                                    (csrf(&viewer))
                                    button type="submit" class=(if matches!(action, "cancel" | "delete") { "danger" } else { "primary" }) id=(format!("job-{action}")) { (label) }
                                }
                                " "
                            }
                        }
                    }
                }
            }
        }
    };
    page(&viewer, Tab::DeadLetters, &format!("Redrive job {id}"), content)
}

/// Whether a job in `state` offers `action`.
fn allowed(state: &str, action: &str) -> bool {
    match action {
        "pause" => state == "running",
        "resume" => state == "paused",
        "cancel" => matches!(state, "running" | "paused"),
        _ => matches!(state, "completed" | "cancelled" | "failed"),
    }
}

fn breakdown(title: &str, id: &str, counts: Option<&JsonValue>) -> Markup {
    html! {
        section {
            h3 { (title) }
            table.data.narrow id=(id) { tbody {
                @for (key, value) in counts.and_then(JsonValue::as_object).into_iter().flatten() {
                    tr data-key=(key) { td { (key) } td.num { (count(value.as_u64().unwrap_or(0))) } }
                }
            } }
        }
    }
}

/// `POST /redrives/{vhost}/{id}/{pause|resume|cancel|delete}`.
pub(crate) async fn act(
    State(ui): State<Arc<Ui>>,
    viewer: Viewer,
    Path((vhost, id, action)): Path<(String, String, String)>,
    form: Form,
) -> Response {
    if let Some(refused) = viewer.forged(&ui, &form) {
        return refused;
    }
    let path = format!("/api/charon/redrives/{}/{}", segment(&vhost), segment(&id));
    let outcome = match action.as_str() {
        "pause" | "resume" | "cancel" => {
            ui.api.call(&viewer.user, Method::POST, &format!("{path}/{action}"), None).await
        }
        "delete" => ui.api.call(&viewer.user, Method::DELETE, &path, None).await,
        _ => return (axum::http::StatusCode::NOT_FOUND, "Unknown action").into_response(),
    };
    match outcome {
        Ok(_) if action == "delete" => {
            viewer.flash(&ui, false, format!("Job {id} deleted"));
            return Redirect::to("/redrives").into_response();
        }
        Ok(_) => viewer.flash(&ui, false, format!("Job {id}: {action} done")),
        Err(error) => viewer.flash(&ui, true, format!("{action} failed: {error}")),
    }
    Redirect::to(&href(&vhost, &id)).into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn jobs_read_in_words() {
        assert_eq!(
            describe_filter(Some(&json!({"reasons": [], "died_after": null, "headers": {}}))),
            "none (every message)"
        );
        assert_eq!(
            describe_filter(Some(&json!({"reasons": ["expired", "maxlen"], "died_after": 0, "headers": {"t": "a"}}))),
            r#"died_after: 1970-01-01 00:00:00 UTC; headers: {"t":"a"}; reasons: expired, maxlen"#
        );
        assert_eq!(when(Some(&json!(1_795_681_377_298u64))), "2026-11-26 08:22:57 UTC");
        assert_eq!(when(Some(&json!(1_795_681_377u64))), "2026-11-26 08:22:57 UTC");
    }

    #[test]
    fn times_convert_both_ways() {
        assert_eq!(parse_time("1970-01-01T00:00"), Some(0));
        assert_eq!(parse_time("2026-11-26T07:30"), Some(1_795_678_200));
        assert_eq!(parse_time("2026-11-26T07:30:15"), Some(1_795_678_215));
        assert_eq!(parse_time("1795678200"), Some(1_795_678_200));
        assert_eq!(parse_time("2026-13-01T00:00"), None);
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(utc(1_795_678_215), "2026-11-26 07:30:15");
        assert_eq!(utc(0), "1970-01-01 00:00:00");
    }

    #[test]
    fn the_form_becomes_the_api_request() {
        let form = Form::parse(
            b"source=dlq&destination_type=original&destination_death=last&reasons=rejected&reasons=expired\
              &source_queues=a%2C+b&message_ids=&died_after=2026-11-26T07%3A30&headers=tenant%3Dacme\
              &rate=50&max_messages=&dry_run=true",
        );
        let body = job_body(&form).unwrap();
        assert_eq!(
            body,
            json!({
                "source": "dlq",
                "destination": {"type": "original", "death": "last"},
                "filter": {"reasons": ["rejected", "expired"], "source_queues": ["a", "b"], "died_after": 1_795_678_200u64, "headers": {"tenant": "acme"}},
                "dry_run": true,
                "rate": 50,
            })
        );
        let form = Form::parse(
            b"source=dlq&destination_type=exchange&destination_exchange=amq.direct&destination_routing_key=k",
        );
        assert_eq!(
            job_body(&form).unwrap()["destination"],
            json!({"type": "exchange", "exchange": "amq.direct", "routing_key": "k"})
        );
        assert_eq!(job_body(&form).unwrap()["dry_run"], json!(false));
        assert!(job_body(&Form::parse(b"source=dlq&destination_type=queue")).is_err());
        assert!(job_body(&Form::parse(b"source=dlq&rate=-1")).is_err());
        assert!(job_body(&Form::parse(b"source=dlq&rate=2.5")).is_err(), "the API takes whole messages per second");
        assert!(job_body(&Form::parse(b"destination_type=original")).is_err());
    }
}
