//! RabbitMQ's list query parameters (`rabbit_mgmt_util`), shared by every list endpoint:
//! `sort`/`sort_reverse`, pagination (`page`, `page_size`, `name`, `use_regex`) with its
//! envelope, and `columns`.
//!
//! As 4.0.5 (observed): the list is sorted first, by `sort` (a dotted path) and then the
//! endpoint's default keys, and `sort_reverse=true` reverses the whole list; a page is taken
//! only when `page` is given (`page_size` alone, and `name`, do nothing then); `name` filters
//! the sorted list by the items' `name`, a case-insensitive substring or, with
//! `use_regex=true`, a case-insensitive regular expression; `columns` (comma-separated dotted
//! paths) applies last, to the items of the page.
//!
//! Deliberate difference: Charon applies them to every list. 4.0.5 does so for queues,
//! exchanges, bindings, connections, channels and users, but not uniformly elsewhere (observed):
//! `/api/vhosts` sorts, ignores `columns` and crashes (500) on `page=1`; `/api/policies` sorts
//! and takes `columns` but ignores `page=1` (500 on `page=0`); `/api/consumers` ignores
//! `page=1` (500 on `page=0`). Those answers are RabbitMQ's accidents, not something a client
//! relies on, so Charon answers them as the other lists do.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::{Map, Value as JsonValue, json};

use crate::error::ApiError;

/// The query string's parameters, as handlers extract them (`Query<Params>`).
pub(crate) type Params = HashMap<String, String>;

/// RabbitMQ's page size when `page` comes without `page_size`.
const DEFAULT_PAGE_SIZE: u64 = 100;
/// The largest `page_size` RabbitMQ accepts.
const MAX_PAGE_SIZE: u64 = 500;

/// Objects RabbitMQ holds as Erlang maps, which `columns` does not descend into (observed:
/// `columns=arguments.x` keeps all of a queue's arguments).
const MAP_FIELDS: &[&str] = &["arguments", "effective_policy_definition", "definition", "properties", "headers"];

/// A list endpoint's answer for `items` under the query's parameters: the (sorted, columned)
/// array, or the page envelope when `page` is given.
///
/// `default_sort` is the endpoint's own order (`["vhost", "name"]` for queues), applied after
/// `sort`.
///
/// # Errors
/// RabbitMQ's 400s for bad pagination parameters, an invalid `name` regex or a page out of
/// range, and its empty 500 for a `sort_reverse` other than `true`/`false`.
pub(crate) fn respond(
    mut items: Vec<JsonValue>,
    params: &Params,
    default_sort: &[&str],
) -> Result<JsonValue, ApiError> {
    let pagination = Pagination::parse(params)?;
    let reverse = match params.get("sort_reverse").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(ApiError::crash()),
    };
    let mut keys: Vec<Vec<&str>> = Vec::with_capacity(default_sort.len() + 1);
    if let Some(sort) = params.get("sort").filter(|s| !s.is_empty()) {
        keys.push(sort.split('.').filter(|s| !s.is_empty()).collect());
    }
    keys.extend(default_sort.iter().map(|k| vec![*k]));
    items.sort_by(|a, b| {
        keys.iter()
            .map(|path| compare(&sort_value(a, path), &sort_value(b, path)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
    if reverse {
        items.reverse();
    }
    let columns = Columns::parse(params);
    let Some(pagination) = pagination else {
        return Ok(JsonValue::Array(items.into_iter().map(|i| columns.apply(i)).collect()));
    };
    let total = items.len();
    let items = pagination.filter(items)?;
    let filtered = items.len() as u64;
    let skip = (pagination.page - 1).saturating_mul(pagination.page_size);
    if pagination.page > 1 && skip >= filtered {
        return Err(ApiError::bad_request_named(
            "page_out_of_range",
            format!(
                "Page out of range, page: {} page size: {}, len: {filtered}",
                pagination.page, pagination.page_size
            ),
        ));
    }
    let page: Vec<JsonValue> = items
        .into_iter()
        .skip(usize::try_from(skip).unwrap_or(usize::MAX))
        .take(usize::try_from(pagination.page_size).unwrap_or(usize::MAX))
        .map(|i| columns.apply(i))
        .collect();
    Ok(json!({
        "filtered_count": filtered,
        "item_count": page.len(),
        "items": page,
        "page": pagination.page,
        "page_count": filtered.div_ceil(pagination.page_size),
        "page_size": pagination.page_size,
        "total_count": total,
    }))
}

/// A single object's answer: `columns` applies to it too (observed on 4.0.5).
pub(crate) fn one(item: JsonValue, params: &Params) -> JsonValue {
    Columns::parse(params).apply(item)
}

/// `page`, `page_size`, `name`, `use_regex`.
struct Pagination {
    page: u64,
    page_size: u64,
    name: Option<Name>,
}

/// The `name` filter.
enum Name {
    Substring(String),
    Regex(regex::Regex),
}

impl Pagination {
    fn parse(params: &Params) -> Result<Option<Self>, ApiError> {
        let invalid = || ApiError::bad_request("Pagination parameters are invalid");
        let integer = |key: &str| params.get(key).map(|v| v.parse::<i64>().map_err(|_| invalid())).transpose();
        let (page, page_size) = (integer("page")?, integer("page_size")?);
        let Some(page) = page else { return Ok(None) };
        let size = page_size.unwrap_or(DEFAULT_PAGE_SIZE as i64);
        let valid = page > 0 && size > 0 && size <= MAX_PAGE_SIZE as i64;
        let (Ok(page), Ok(size), true) = (u64::try_from(page), u64::try_from(size), valid) else {
            let shown = page_size.map_or_else(|| "undefined".to_owned(), |s| s.to_string());
            return Err(ApiError::bad_request_named(
                "invalid_pagination_parameters",
                format!("Invalid pagination parameters: page number {page}, page size {shown}"),
            ));
        };
        let name = match params.get("name").filter(|n| !n.is_empty()) {
            None => None,
            Some(name) if params.get("use_regex").is_some_and(|v| v == "true") => {
                Some(Name::Regex(regex::RegexBuilder::new(name).case_insensitive(true).build().map_err(|_| invalid())?))
            }
            Some(name) => Some(Name::Substring(name.to_lowercase())),
        };
        Ok(Some(Self { page, page_size: size, name }))
    }

    fn filter(&self, items: Vec<JsonValue>) -> Result<Vec<JsonValue>, ApiError> {
        let Some(name) = &self.name else { return Ok(items) };
        Ok(items
            .into_iter()
            .filter(|item| {
                let value = item.get("name").and_then(JsonValue::as_str).unwrap_or_default();
                match name {
                    Name::Substring(needle) => value.to_lowercase().contains(needle.as_str()),
                    Name::Regex(regex) => regex.is_match(value),
                }
            })
            .collect())
    }
}

/// `columns`: the dotted paths to keep, or everything.
struct Columns(Option<Vec<Vec<String>>>);

impl Columns {
    fn parse(params: &Params) -> Self {
        Self(params.get("columns").map(|columns| {
            columns
                .split(',')
                .filter(|c| !c.is_empty())
                .map(|c| c.split('.').filter(|s| !s.is_empty()).map(str::to_owned).collect())
                .collect()
        }))
    }

    fn apply(&self, item: JsonValue) -> JsonValue {
        match &self.0 {
            None => item,
            Some(paths) => {
                let paths: Vec<&[String]> = paths.iter().map(Vec::as_slice).collect();
                keep(item, &paths)
            }
        }
    }
}

/// The fields of `item` named by the first segment of `paths`, descending into nested objects
/// for longer paths. An object left with no field is `[]`, as RabbitMQ renders an empty
/// property list (observed: `columns=nonexistent` gives `[[],[],…]`).
fn keep(item: JsonValue, paths: &[&[String]]) -> JsonValue {
    let JsonValue::Object(fields) = item else { return item };
    let mut kept = Map::new();
    for (key, value) in fields {
        let below: Vec<&[String]> = paths
            .iter()
            .filter_map(|p| p.split_first())
            .filter(|(first, _)| **first == key)
            .map(|(_, rest)| rest)
            .collect();
        if below.is_empty() {
            continue;
        }
        let whole = below.iter().any(|rest| rest.is_empty()) || MAP_FIELDS.contains(&key.as_str());
        let value = if whole || !value.is_object() { value } else { keep(value, &below) };
        kept.insert(key, value);
    }
    if kept.is_empty() { JsonValue::Array(Vec::new()) } else { JsonValue::Object(kept) }
}

/// The value at a dotted path; missing is `-1`, which RabbitMQ puts "before everything else".
fn sort_value(item: &JsonValue, path: &[&str]) -> JsonValue {
    path.iter().try_fold(item, |value, key| value.get(*key)).cloned().unwrap_or_else(|| JsonValue::from(-1))
}

/// Erlang's term order over the JSON values as RabbitMQ holds them: numbers < atoms (`false`,
/// `null`, `true`) < objects (maps, smaller first) < lists < strings (binaries).
fn compare(a: &JsonValue, b: &JsonValue) -> Ordering {
    fn rank(value: &JsonValue) -> u8 {
        match value {
            JsonValue::Number(_) => 0,
            JsonValue::Bool(_) | JsonValue::Null => 1,
            JsonValue::Object(_) => 2,
            JsonValue::Array(_) => 3,
            JsonValue::String(_) => 4,
        }
    }
    fn atom(value: &JsonValue) -> &'static str {
        match value {
            JsonValue::Bool(true) => "true",
            JsonValue::Bool(false) => "false",
            _ => "null",
        }
    }
    match (a, b) {
        (JsonValue::Number(x), JsonValue::Number(y)) => {
            x.as_f64().unwrap_or_default().partial_cmp(&y.as_f64().unwrap_or_default()).unwrap_or(Ordering::Equal)
        }
        (JsonValue::String(x), JsonValue::String(y)) => x.cmp(y),
        (JsonValue::Object(x), JsonValue::Object(y)) => {
            x.len().cmp(&y.len()).then_with(|| a.to_string().cmp(&b.to_string()))
        }
        (JsonValue::Array(x), JsonValue::Array(y)) => {
            x.iter().zip(y).map(|(p, q)| compare(p, q)).find(|o| o.is_ne()).unwrap_or_else(|| x.len().cmp(&y.len()))
        }
        _ if rank(a) == 1 && rank(b) == 1 => atom(a).cmp(atom(b)),
        _ => rank(a).cmp(&rank(b)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn params(query: &[(&str, &str)]) -> Params {
        query.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn exchanges() -> Vec<JsonValue> {
        [("", "direct"), ("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"), ("x1", "topic")]
            .iter()
            .rev()
            .map(|(name, kind)| json!({"name": name, "type": kind, "vhost": "/", "arguments": {"a": 1}}))
            .collect()
    }

    fn reason(error: &ApiError) -> String {
        format!("{error:?}")
    }

    #[test]
    fn without_page_the_list_is_sorted_and_columned_but_not_filtered() {
        let got = respond(exchanges(), &params(&[("name", "fanout"), ("columns", "name")]), &["vhost", "name"]);
        let names: Vec<_> = got.unwrap().as_array().unwrap().iter().map(|i| i["name"].clone()).collect();
        assert_eq!(names, ["", "amq.direct", "amq.fanout", "amq.topic", "x1"]);
        let got = respond(
            exchanges(),
            &params(&[("sort", "type"), ("sort_reverse", "true"), ("columns", "name")]),
            &["name"],
        );
        assert_eq!(got.unwrap()[0], json!({"name": "x1"}));
    }

    #[test]
    fn a_page_has_rabbitmqs_envelope() {
        let query = params(&[("page", "2"), ("page_size", "2"), ("columns", "name,arguments.b")]);
        let got = respond(exchanges(), &query, &["name"]).unwrap();
        assert_eq!(
            got,
            json!({"filtered_count": 5, "item_count": 2, "page": 2, "page_count": 3, "page_size": 2, "total_count": 5,
                   "items": [{"name": "amq.fanout", "arguments": {"a": 1}}, {"name": "amq.topic", "arguments": {"a": 1}}]})
        );
        let query = params(&[("page", "1"), ("name", "AMQ.D")]);
        assert_eq!(respond(exchanges(), &query, &["name"]).unwrap()["filtered_count"], 1);
        let query = params(&[("page", "1"), ("name", "^amq\\.(d|f)"), ("use_regex", "true"), ("columns", "nope")]);
        let got = respond(exchanges(), &query, &["name"]).unwrap();
        assert_eq!((got["filtered_count"].clone(), got["items"][0].clone()), (json!(2), json!([])));
    }

    #[test]
    fn bad_parameters_get_rabbitmqs_errors() {
        let run = |query: &[(&str, &str)]| reason(&respond(exchanges(), &params(query), &["name"]).unwrap_err());
        assert!(run(&[("page", "0")]).contains("Invalid pagination parameters: page number 0, page size undefined"));
        assert!(run(&[("page", "1"), ("page_size", "501")]).contains("page number 1, page size 501"));
        assert!(run(&[("page", "x")]).contains("Pagination parameters are invalid"));
        assert!(
            run(&[("page", "1"), ("name", "["), ("use_regex", "true")]).contains("Pagination parameters are invalid")
        );
        assert!(run(&[("page", "9")]).contains("Page out of range, page: 9 page size: 100, len: 5"));
        assert!(run(&[("sort_reverse", "bogus")]).contains("status: 500"));
        assert!(respond(Vec::new(), &params(&[("page", "1")]), &[]).is_ok());
    }

    #[test]
    fn missing_sort_values_come_first_and_erlang_term_order_applies() {
        let items = vec![json!({"name": "b", "n": 3}), json!({"name": "a"}), json!({"name": "c", "n": "s"})];
        let got = respond(items, &params(&[("sort", "n"), ("columns", "name")]), &["name"]).unwrap();
        assert_eq!(got, json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));
    }
}
