//! A dead-lettered message's history as a 0.9.1 consumer sees it (`mc_amqpl:protocol_state/2`,
//! `death_table/7`).

use charon_model::{Death, DeathCause, DeathHistory, Table, Value};

use super::convert::to_091;

/// The headers of a dead-lettered message: `x-death` (replacing any header of that name, such
/// as one a client published), the `x-first-death-*` / `x-last-death-*` long strings (which
/// win over client headers of the same names), all sorted by name, as RabbitMQ's dedup of
/// headers and annotations leaves them.
pub(crate) fn headers_with_deaths(headers: &Table, history: &DeathHistory) -> Table {
    let mut rendered = headers.clone();
    rendered.insert("x-death", Value::List(history.entries.iter().map(death_table).collect()));
    for (key, value) in history.summary_fields() {
        rendered.insert(key, Value::long_str(&value));
    }
    rendered.0.sort_by(|a, b| a.0.cmp(&b.0));
    rendered
}

/// One `x-death` entry: `[original-expiration,] count, reason, queue, time, exchange,
/// routing-keys` with RabbitMQ's types (long, longstr, timestamp in seconds, array).
fn death_table(death: &Death) -> Value {
    let mut table = Table::new();
    if let Some(ttl) = death.original_ttl {
        table.insert("original-expiration", Value::long_str(&ttl.to_string()));
    }
    table.insert("count", Value::I64(i64::try_from(death.count).unwrap_or(i64::MAX)));
    table.insert("reason", Value::long_str(death.reason.as_str()));
    table.insert("queue", Value::long_str(&death.queue));
    // 0.9.1 timestamps are seconds; the model keeps milliseconds and renders `T` as ms / 1000.
    table.insert("time", Value::Timestamp(death.first_time - death.first_time.rem_euclid(1000)));
    table.insert("exchange", Value::long_str(&death.exchange));
    let keys = death.routing_keys.iter().map(|k| Value::long_str(k)).collect();
    table.insert("routing-keys", Value::List(keys));
    if let Some(cause) = death.cause.as_deref() {
        cause_fields(&mut table, cause);
    }
    Value::Table(table)
}

/// What a refusing AMQP 1.0 consumer said, after RabbitMQ's fields (Charon's extension,
/// `docs/fidelity.md`): `error-condition` and `error-description` long strings, `error-info`
/// and `message-annotations` tables, each only when present — an entry without a cause is
/// exactly RabbitMQ 4.0.5's. The values convert as a 1.0 message's do for 0.9.1.
fn cause_fields(table: &mut Table, cause: &DeathCause) {
    if let Some(condition) = cause.condition() {
        table.insert("error-condition", Value::long_str(condition));
    }
    if let Some(description) = cause.description() {
        table.insert("error-description", Value::long_str(description));
    }
    let converted = |t: &Table| Value::Table(t.iter().map(|(k, v)| (k.to_owned(), to_091(v))).collect());
    if let Some(info) = cause.info() {
        table.insert("error-info", converted(info));
    }
    if let Some(annotations) = cause.annotations() {
        table.insert("message-annotations", converted(annotations));
    }
}

#[cfg(test)]
mod tests {
    use charon_model::{DeathReason, DeathRecord};

    use super::*;

    #[test]
    fn x_death_fields_types_and_order() {
        let keys = vec!["k".to_owned(), "cc".to_owned()];
        let record = |queue, now| DeathRecord {
            queue,
            reason: DeathReason::Expired,
            exchange: "x",
            routing_keys: &keys,
            ttl: Some(1),
            now,
            cause: None,
        };
        let mut history = DeathHistory::new(&record("q", 1_700_000_000_123));
        history.record(&record("q", 1_700_000_005_000));
        let mut client = Table::new();
        client.insert("b", Value::I32(1));
        client.insert("x-death", Value::long_str("forged"));
        client.insert("a", Value::I32(2));
        let h = headers_with_deaths(&client, &history);
        let names: Vec<&str> = h.iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "a",
                "b",
                "x-death",
                "x-first-death-exchange",
                "x-first-death-queue",
                "x-first-death-reason",
                "x-last-death-exchange",
                "x-last-death-queue",
                "x-last-death-reason"
            ]
        );
        let Some(Value::List(entries)) = h.get("x-death") else { panic!("x-death") };
        let Some(Value::Table(entry)) = entries.first() else { panic!("entry") };
        let fields: Vec<(&str, &Value)> = entry.iter().collect();
        assert_eq!(
            fields,
            [
                ("original-expiration", &Value::long_str("1")),
                ("count", &Value::I64(2)),
                ("reason", &Value::long_str("expired")),
                ("queue", &Value::long_str("q")),
                ("time", &Value::Timestamp(1_700_000_000_000)),
                ("exchange", &Value::long_str("x")),
                ("routing-keys", &Value::List(vec![Value::long_str("k"), Value::long_str("cc")])),
            ]
        );
    }

    #[test]
    fn a_cause_adds_its_fields_after_rabbitmqs_and_only_when_present() {
        let keys = vec!["k".to_owned()];
        let info: Table = [("attempt".to_owned(), Value::U64(3)), ("field".to_owned(), Value::Symbol("price".into()))]
            .into_iter()
            .collect();
        let annotations: Table = [("x-opt-why".to_owned(), Value::String("stale".into()))].into_iter().collect();
        let cause = std::sync::Arc::new(
            DeathCause::new(
                Some("app:bad-payload".into()),
                Some("schema v2 expected".into()),
                Some(info),
                Some(annotations),
            )
            .unwrap(),
        );
        let record = |cause| DeathRecord {
            queue: "q",
            reason: DeathReason::Rejected,
            exchange: "",
            routing_keys: &keys,
            ttl: None,
            now: 1_000,
            cause,
        };
        let fields = |history: &DeathHistory| {
            let h = headers_with_deaths(&Table::new(), history);
            let Some(Value::List(entries)) = h.get("x-death") else { panic!("x-death") };
            let Some(Value::Table(entry)) = entries.first() else { panic!("entry") };
            entry.clone()
        };
        let entry = fields(&DeathHistory::new(&record(Some(&cause))));
        let names: Vec<&str> = entry.iter().map(|(k, _)| k).collect();
        assert_eq!(
            names,
            [
                "count",
                "reason",
                "queue",
                "time",
                "exchange",
                "routing-keys",
                "error-condition",
                "error-description",
                "error-info",
                "message-annotations"
            ]
        );
        assert_eq!(entry.get("error-condition"), Some(&Value::long_str("app:bad-payload")));
        assert_eq!(entry.get("error-description"), Some(&Value::long_str("schema v2 expected")));
        // 1.0 values convert for 0.9.1: ulong to long, symbols and strings to long strings.
        let info: Table = [("attempt".to_owned(), Value::I64(3)), ("field".to_owned(), Value::long_str("price"))]
            .into_iter()
            .collect();
        assert_eq!(entry.get("error-info"), Some(&Value::Table(info)));
        let annotations: Table = [("x-opt-why".to_owned(), Value::long_str("stale"))].into_iter().collect();
        assert_eq!(entry.get("message-annotations"), Some(&Value::Table(annotations)));
        // Without a cause: RabbitMQ's six fields only.
        assert_eq!(fields(&DeathHistory::new(&record(None))).len(), 6);
    }
}
