//! What the paginated list pages share: the page asked for, the management API's filtered
//! listing of a collection (`/api/queues`, `/api/exchanges`), and the name filter form.

use std::collections::HashMap;

use maud::{Markup, html};

use crate::api::segment;

/// The `page` query parameter: 1 when absent or not a positive number.
pub(crate) fn page_number(query: &HashMap<String, String>) -> u64 {
    query.get("page").and_then(|p| p.parse::<u64>().ok()).filter(|p| *p > 0).unwrap_or(1)
}

/// The `name` query parameter (a plain substring, as RabbitMQ's UI filters without regex).
pub(crate) fn name_filter(query: &HashMap<String, String>) -> &str {
    query.get("name").map_or("", String::as_str)
}

/// The management API path of page `page` of `collection` (e.g. `queues`), `page_size` a page,
/// filtered by `name`.
pub(crate) fn api_path(collection: &str, page: u64, page_size: u64, name: &str) -> String {
    format!(
        "/api/{collection}?page={page}&page_size={page_size}&pagination=true&use_regex=false&name={}",
        segment(name)
    )
}

/// The filter form above a list page at `action`.
pub(crate) fn filter_form(action: &str, name: &str, placeholder: &str) -> Markup {
    html! {
        form.filter method="get" action=(action) {
            label { "Filter " input type="search" name="name" value=(name) placeholder=(placeholder); }
            button type="submit" { "Apply" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_the_filter_come_from_the_query() {
        let query = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        assert_eq!(page_number(&query(&[])), 1);
        assert_eq!(page_number(&query(&[("page", "0")])), 1);
        assert_eq!(page_number(&query(&[("page", "x")])), 1);
        assert_eq!(page_number(&query(&[("page", "3")])), 3);
        assert_eq!(
            api_path("queues", 2, 100, "a b"),
            "/api/queues?page=2&page_size=100&pagination=true&use_regex=false&name=a%20b"
        );
        assert_eq!(name_filter(&query(&[("name", "orders")])), "orders");
    }
}
