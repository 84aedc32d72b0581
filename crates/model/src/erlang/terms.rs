//! The flat printers: each renders one value on one line, as `io_lib` does for short terms.

use crate::Value;

/// Whether `io_lib` prints these bytes as `<<"text">>` in the byte-oriented paths: printable
/// ASCII only.
fn printable_ascii(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| (0x20..0x7f).contains(b))
}

/// Printable ASCII between quotes, with `"` and `\` escaped.
fn quoted_ascii(bytes: &[u8]) -> String {
    let mut out = String::from("<<\"");
    for &b in bytes {
        if b == b'"' || b == b'\\' {
            out.push('\\');
        }
        out.push(char::from(b));
    }
    out.push_str("\">>");
    out
}

/// `<<1,2,3>>`.
fn numbered(bytes: &[u8]) -> String {
    format!("<<{}>>", list_items(bytes.iter().map(u8::to_string)))
}

fn list_items(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(",")
}

/// A binary as the AMQP 0.9.1 reader's frame errors print it: `<<"text">>` when it is
/// non-empty printable ASCII, otherwise its bytes (`<<1,2,3>>`, and `<<>>` when empty).
#[must_use]
pub fn binary(bytes: &[u8]) -> String {
    if !bytes.is_empty() && printable_ascii(bytes) { quoted_ascii(bytes) } else { numbered(bytes) }
}

/// A binary as the AMQP 1.0 reader prints the terms its parser produced: like [`binary`],
/// except that an empty binary is `<<"">>`.
#[must_use]
pub fn parsed_binary(bytes: &[u8]) -> String {
    if printable_ascii(bytes) { quoted_ascii(bytes) } else { numbered(bytes) }
}

/// A binary as `~tp` prints it with Unicode awareness: `<<"text">>`, `<<"é"/utf8>>` (control
/// characters escaped: `\n`, `\e`, ...) or `<<1,2>>` when it is empty, not UTF-8 or holds a
/// character `io_lib` does not print.
#[must_use]
pub fn unicode_binary(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.is_empty() && s.chars().all(printable) => {
            let body: String = s.chars().map(escape).collect();
            if s.is_ascii() { format!("<<\"{body}\">>") } else { format!("<<\"{body}\"/utf8>>") }
        }
        _ => numbered(bytes),
    }
}

/// A one-character string as `~tp` prints it: `"é"`, or `[127]` when not printable.
#[must_use]
pub fn char_string(c: char) -> String {
    if printable(c) { format!("\"{}\"", escape(c)) } else { format!("[{}]", u32::from(c)) }
}

/// Text printed verbatim as a binary: `<<"text">>`. Nothing is escaped; the callers print
/// names and JSON strings the way they did before this module existed.
#[must_use]
pub fn text(s: &str) -> String {
    format!("<<\"{s}\">>")
}

/// A float as Erlang prints it: `1.5`, `1.0e100` (Erlang always has a fraction digit).
#[must_use]
pub fn float(f: f64) -> String {
    let s = format!("{f:?}");
    if s.contains('e') && !s.contains('.') { s.replacen('e', ".0e", 1) } else { s }
}

/// `{a,b,...}` of already printed elements.
#[must_use]
pub fn tuple<S: AsRef<str>>(elements: &[S]) -> String {
    format!("{{{}}}", list_items(elements.iter().map(|e| e.as_ref().to_owned())))
}

/// `[a,b,...]` of already printed elements.
#[must_use]
pub fn list<I: IntoIterator<Item = String>>(elements: I) -> String {
    format!("[{}]", list_items(elements.into_iter()))
}

/// A JSON-born value as `~tp` prints the term RabbitMQ decoded it to: strings are binaries
/// ([`text`]), integers and floats numbers, `null` the atom, lists lists and objects maps
/// (`#{<<"k">> => 1}`). Values JSON cannot produce print as their Rust debug form.
#[must_use]
pub fn term(value: &Value) -> String {
    match value {
        Value::LongStr(_) | Value::String(_) => text(value.as_str().unwrap_or_default()),
        Value::F64(f) => format!("{f:?}"),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_owned(),
        Value::List(items) => list(items.iter().map(term)),
        Value::Table(table) => {
            format!("#{{{}}}", list_items(table.iter().map(|(k, v)| format!("{} => {}", text(k), term(v)))))
        }
        other => other.as_i64().map_or_else(|| format!("{other:?}"), |n| n.to_string()),
    }
}

/// Whether Erlang's `io_lib` prints `c` as part of a string.
fn printable(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\t' | '\u{b}' | '\u{8}' | '\u{c}' | '\u{1b}')
        || (c >= ' ' && !('\u{7f}'..'\u{a0}').contains(&c))
}

fn escape(c: char) -> String {
    match c {
        '"' => "\\\"".to_owned(),
        '\\' => "\\\\".to_owned(),
        '\n' => "\\n".to_owned(),
        '\r' => "\\r".to_owned(),
        '\t' => "\\t".to_owned(),
        '\u{b}' => "\\v".to_owned(),
        '\u{8}' => "\\b".to_owned(),
        '\u{c}' => "\\f".to_owned(),
        '\u{1b}' => "\\e".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Table;

    #[test]
    fn frame_error_binaries() {
        assert_eq!(binary(b""), "<<>>");
        assert_eq!(binary(b"abc"), "<<\"abc\">>");
        assert_eq!(binary(b"a\"b\\"), "<<\"a\\\"b\\\\\">>");
        assert_eq!(binary(&[0, 60, 255]), "<<0,60,255>>");
    }

    #[test]
    fn parsed_binaries_print_empty_as_an_empty_string() {
        assert_eq!(parsed_binary(b""), "<<\"\">>");
        assert_eq!(parsed_binary(b"abc"), "<<\"abc\">>");
        assert_eq!(parsed_binary(&[1, 2]), "<<1,2>>");
    }

    #[test]
    fn unicode_binaries_mark_utf8_and_escape_controls() {
        assert_eq!(unicode_binary(b""), "<<>>");
        assert_eq!(unicode_binary("é".as_bytes()), "<<\"é\"/utf8>>");
        assert_eq!(unicode_binary(b"a\nb"), "<<\"a\\nb\">>");
        assert_eq!(unicode_binary(&[0x7f]), "<<127>>");
        assert_eq!(unicode_binary(&[0xff, 0xfe]), "<<255,254>>");
    }

    #[test]
    fn chars_floats_and_containers() {
        assert_eq!(char_string('é'), "\"é\"");
        assert_eq!(char_string('\u{7f}'), "[127]");
        assert_eq!(float(1.5), "1.5");
        assert_eq!(float(1e100), "1.0e100");
        assert_eq!(tuple(&["value_negative", "-1"]), "{value_negative,-1}");
        assert_eq!(list(vec!["1".to_owned(), "2".to_owned()]), "[1,2]");
        assert_eq!(text("x"), "<<\"x\">>");
    }

    #[test]
    fn json_born_values() {
        let mut table = Table::new();
        table.insert("k", Value::I64(1));
        let value = Value::List(vec![Value::long_str("a"), Value::F64(0.5), Value::Null, Value::Table(table)]);
        assert_eq!(term(&value), "[<<\"a\">>,0.5,null,#{<<\"k\">> => 1}]");
        assert_eq!(term(&Value::Bool(true)), "true");
        assert_eq!(term(&Value::I8(-3)), "-3");
    }
}
