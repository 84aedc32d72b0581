//! Numbers, rates, sizes and ages as the pages show them, and reading fields of the API's JSON.

use serde_json::Value as JsonValue;

/// `value` at JSON pointer `pointer` as an integer (0 when missing).
pub(crate) fn int(value: &JsonValue, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64))).unwrap_or(0)
}

/// `value` at JSON pointer `pointer` as a float (0 when missing).
pub(crate) fn float(value: &JsonValue, pointer: &str) -> f64 {
    value.pointer(pointer).and_then(JsonValue::as_f64).unwrap_or(0.0)
}

/// `value` at JSON pointer `pointer` as text (a string as it is, other JSON as JSON, empty when
/// missing or null).
pub(crate) fn text(value: &JsonValue, pointer: &str) -> String {
    match value.pointer(pointer) {
        None | Some(JsonValue::Null) => String::new(),
        Some(JsonValue::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The array at `pointer` (empty when missing).
pub(crate) fn items<'a>(value: &'a JsonValue, pointer: &str) -> &'a [JsonValue] {
    value.pointer(pointer).and_then(JsonValue::as_array).map_or(&[], Vec::as_slice)
}

/// 1234567 → `1,234,567`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate per second with RabbitMQ's precision: `0.0/s`, `12/s`, `1.5/s`.
pub(crate) fn rate(per_second: f64) -> String {
    if per_second >= 100.0 { format!("{}/s", count(per_second.round() as u64)) } else { format!("{per_second:.1}/s") }
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let name = UNITS.get(unit).copied().unwrap_or("B");
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {name}") }
}

/// An age in seconds: `45s`, `12m 5s`, `3h 2m`, `4d 1h`.
pub(crate) fn age(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds % 86_400 / 3600, seconds % 3600 / 60, seconds % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// A JSON value compactly, for argument and definition tables.
pub(crate) fn json(value: &JsonValue) -> String {
    match value {
        JsonValue::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_read_as_people_read_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(rate(0.0), "0.0/s");
        assert_eq!(rate(1.25), "1.2/s");
        assert_eq!(rate(12_345.4), "12,345/s");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(age(45), "45s");
        assert_eq!(age(725), "12m 5s");
        assert_eq!(age(3 * 3600 + 125), "3h 2m");
        assert_eq!(age(4 * 86_400 + 3700), "4d 1h");
    }

    #[test]
    fn fields_are_read_by_pointer() {
        let v = json!({"a": {"b": 3, "r": 1.5, "s": "x", "n": null}, "l": [1, 2]});
        assert_eq!(int(&v, "/a/b"), 3);
        assert_eq!(int(&v, "/a/missing"), 0);
        assert!((float(&v, "/a/r") - 1.5).abs() < f64::EPSILON);
        assert_eq!(text(&v, "/a/s"), "x");
        assert_eq!(text(&v, "/a/n"), "");
        assert_eq!(text(&v, "/a/b"), "3");
        assert_eq!(items(&v, "/l").len(), 2);
        assert!(items(&v, "/a").is_empty());
    }
}
