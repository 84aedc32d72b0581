//! The page chrome: the header with the user and log-out, RabbitMQ's tabs, the flash message.

use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::api::ApiFailure;
use crate::viewer::Viewer;

/// The logo: a small sail on the accent colour (an inline SVG, no font or file needed).
pub(crate) const LOGO: PreEscaped<&str> = PreEscaped(
    r##"<svg class="mark" width="26" height="26" viewBox="0 0 24 24" aria-hidden="true"><rect rx="5" width="24" height="24" fill="#f26522"/><path d="M4.5 15h15l-2.5 4h-10z M11 4.5h1.6v9.5h-1.6z M13.2 6l5 7.2h-5z" fill="#fff"/></svg>"##,
);

/// The tabs, in RabbitMQ's order, with Charon's Dead letters before Admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tab {
    Overview,
    Connections,
    Channels,
    Exchanges,
    Queues,
    DeadLetters,
    Admin,
}

const TABS: [(Tab, &str, &str); 7] = [
    (Tab::Overview, "Overview", "/"),
    (Tab::Connections, "Connections", "/connections"),
    (Tab::Channels, "Channels", "/channels"),
    (Tab::Exchanges, "Exchanges", "/exchanges"),
    (Tab::Queues, "Queues and Streams", "/queues"),
    (Tab::DeadLetters, "Dead letters", "/dead-letters"),
    (Tab::Admin, "Admin", "/admin"),
];

/// A whole page.
pub(crate) fn page(viewer: &Viewer, tab: Tab, title: &str, content: Markup) -> Response {
    let body = html! {
        header.top {
            a.logo href="/" { (LOGO) " Charon" }
            div.who {
                "User " strong { (viewer.user.name) }
                form.inline method="post" action="/logout" {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    button.link type="submit" { "Log out" }
                }
            }
        }
        nav.tabs {
            @for (t, label, href) in TABS {
                a class=(if t == tab { "tab active" } else { "tab" }) href=(href) { (label) }
            }
        }
        main {
            @if let Some(flash) = &viewer.flash {
                p class=(if flash.error { "flash error" } else { "flash ok" }) role="status" { (flash.text) }
            }
            h1 { (title) }
            (content)
        }
    };
    document(title, body)
}

/// An HTML document around `body`.
pub(crate) fn document(title: &str, body: Markup) -> Response {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · Charon" }
                    link rel="stylesheet" href="/static/app.css";
                    script src="/static/app.js" defer {}
                }
                body { (body) }
            }
        }
        .into_string(),
    )
    .into_response()
}

/// What a page shows where the API refused or failed.
pub(crate) fn failure(what: &str, failure: &ApiFailure) -> Markup {
    html! { p.flash.error { (what) ": " (failure.status.as_u16()) " " (failure.reason) } }
}

/// A hidden CSRF field for a form of this session.
pub(crate) fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}
