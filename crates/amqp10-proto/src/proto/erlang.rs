//! Frame bodies as RabbitMQ 4.0.5's reader sees them, for the errors it answers with.
//!
//! RabbitMQ parses a frame body with `amqp10_binary_parser:parse/1` into Erlang terms and
//! turns the described value into a record with `amqp10_framing:decode/1`. A body that fails
//! there crashes the reader, which closes the connection with `amqp:internal-error`
//! `Reader error: <exception>`; a value that decodes to something other than a performative
//! reaches the session, which ends with `Unexpected frame <term>`. Clients see those texts, so
//! Charon reproduces them: [`classify`] says which of the two a body that Charon cannot use
//! leads to, and [`unexpected_frame`] renders a performative the way the session prints it.
//!
//! Only the parser's behaviour is modelled (which bytes it accepts and the exception it raises
//! otherwise), not its code.

// Nesting beyond the model's limit is refused rather than followed (RabbitMQ recurses without
// limit; Charon refuses such frames with `amqp:decode-error` before they get here).
use charon_model::MAX_DEPTH;
use charon_model::erlang::parsed_binary;

/// Column at which `~tp` starts in `Unexpected frame ~tp`.
const UNEXPECTED_COLUMN: usize = 17;
/// io_lib_pretty's line width.
const LINE_WIDTH: usize = 80;
/// What Charon reports for nesting beyond [`MAX_DEPTH`].
const TOO_DEEP: &str = "{too_deeply_nested,charon}";

/// A parsed value, as `amqp10_binary_parser` represents it.
#[derive(Clone, Debug, PartialEq)]
enum Term {
    /// `null`, `true`, `false`, or an already formatted term.
    Raw(String),
    /// `{Tag,Number}`: `{uint,5}`.
    Number(&'static str, String),
    /// `{Tag,<<...>>}`: `{utf8,<<"abc">>}`.
    Bytes(&'static str, Vec<u8>),
    /// `{list,[...]}`.
    List(Vec<Term>),
    /// `{map,[{K,V},...]}`.
    Map(Vec<(Term, Term)>),
    /// `{described,Descriptor,Value}`.
    Described(Box<Term>, Box<Term>),
}

/// What RabbitMQ does with a frame body Charon could not decode into a performative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Undecodable {
    /// The reader crashes: close with `Reader error: <exception>`.
    Reader(String),
    /// Not a performative: the session (if any) ends with this `Unexpected frame ...` text.
    NotPerformative(String),
    /// A performative (by name) whose fields have types the session cannot handle.
    BadFields(&'static str),
}

/// The stack trace RabbitMQ appends to crash descriptions; Charon has none to offer.
pub(super) const NO_TRACE: &str = "\n[]";

/// Classifies a frame body that did not decode into a performative.
pub(super) fn classify(body: &[u8]) -> Undecodable {
    let term = match parse(body) {
        Ok((term, _)) => term,
        Err(exception) => return Undecodable::Reader(exception),
    };
    let Term::Described(descriptor, value) = term else {
        return Undecodable::NotPerformative(format!("Unexpected frame {}", decoded(&term)));
    };
    let Some(name) = record_name(&descriptor) else {
        return Undecodable::Reader(format!("{{unknown,{}}}", descriptor.render()));
    };
    if performative_fields(name).is_none() {
        return Undecodable::NotPerformative(format!("Unexpected frame {{'v1_0.{name}',\u{2026}}}"));
    }
    match *value {
        Term::List(_) | Term::Map(_) => Undecodable::BadFields(name),
        _ => Undecodable::Reader("function_clause".to_owned()),
    }
}

/// `Unexpected frame {'v1_0.<name>',[{field,value},...]}` for a performative body, laid out
/// like Erlang's `~tp`: on one line when it fits, otherwise one field a line.
pub(super) fn unexpected_frame(body: &[u8]) -> String {
    let rendered = match parse(body) {
        Ok((Term::Described(descriptor, value), _)) => record_name(&descriptor)
            .and_then(|name| Some((name, performative_fields(name)?)))
            .map(|(name, fields)| record(name, fields, &value, UNEXPECTED_COLUMN)),
        Ok((other, _)) => Some(decoded(&other)),
        Err(_) => None,
    };
    format!("Unexpected frame {}", rendered.unwrap_or_else(|| "\u{2026}".to_owned()))
}

/// `amqp10_framing:decode/1` of a value that is not described: `null` becomes `undefined`.
fn decoded(term: &Term) -> String {
    match term {
        Term::Raw(s) if s == "null" => "undefined".to_owned(),
        other => other.render(),
    }
}

fn record(name: &str, fields: &[&str], value: &Term, column: usize) -> String {
    let values: Vec<&Term> = match value {
        Term::List(items) => items.iter().collect(),
        _ => Vec::new(),
    };
    let pairs: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(i, field)| {
            format!("{{{field},{}}}", values.get(i).map_or_else(|| "undefined".to_owned(), |v| field_value(v)))
        })
        .collect();
    let head = format!("{{'v1_0.{name}',[");
    let one_line = format!("{head}{}]}}", pairs.join(","));
    if column + one_line.chars().count() <= LINE_WIDTH {
        return one_line;
    }
    let indent = " ".repeat(column + head.chars().count());
    format!("{head}{}]}}", pairs.join(&format!(",\n{indent}")))
}

/// A decoded field: `null` is `undefined`, described outcomes and errors become records.
fn field_value(term: &Term) -> String {
    match term {
        Term::Raw(s) if s == "null" => "undefined".to_owned(),
        Term::Described(descriptor, value) => match record_name(descriptor) {
            Some(name) => {
                let fields = nested_fields(name);
                let values: Vec<&Term> = match value.as_ref() {
                    Term::List(items) => items.iter().collect(),
                    _ => Vec::new(),
                };
                let pairs: Vec<String> = fields
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        format!("{{{f},{}}}", values.get(i).map_or_else(|| "undefined".to_owned(), |v| field_value(v)))
                    })
                    .collect();
                format!("{{'v1_0.{name}',[{}]}}", pairs.join(","))
            }
            None => term.render(),
        },
        other => other.render(),
    }
}

fn performative_fields(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "open" => &[
            "container_id",
            "hostname",
            "max_frame_size",
            "channel_max",
            "idle_time_out",
            "outgoing_locales",
            "incoming_locales",
            "offered_capabilities",
            "desired_capabilities",
            "properties",
        ],
        "begin" => &[
            "remote_channel",
            "next_outgoing_id",
            "incoming_window",
            "outgoing_window",
            "handle_max",
            "offered_capabilities",
            "desired_capabilities",
            "properties",
        ],
        "attach" => &[
            "name",
            "handle",
            "role",
            "snd_settle_mode",
            "rcv_settle_mode",
            "source",
            "target",
            "unsettled",
            "incomplete_unsettled",
            "initial_delivery_count",
            "max_message_size",
            "offered_capabilities",
            "desired_capabilities",
            "properties",
        ],
        "flow" => &[
            "next_incoming_id",
            "incoming_window",
            "next_outgoing_id",
            "outgoing_window",
            "handle",
            "delivery_count",
            "link_credit",
            "available",
            "drain",
            "echo",
            "properties",
        ],
        "transfer" => &[
            "handle",
            "delivery_id",
            "delivery_tag",
            "message_format",
            "settled",
            "more",
            "rcv_settle_mode",
            "state",
            "resume",
            "aborted",
            "batchable",
        ],
        "disposition" => &["role", "first", "last", "settled", "state", "batchable"],
        "detach" => &["handle", "closed", "error"],
        "end" | "close" => &["error"],
        _ => return None,
    })
}

fn nested_fields(name: &str) -> &'static [&'static str] {
    match name {
        "error" => &["condition", "description", "info"],
        "received" => &["section_number", "section_offset"],
        "rejected" => &["error"],
        "modified" => &["delivery_failed", "undeliverable_here", "message_annotations"],
        _ => &[],
    }
}

/// The record a descriptor names (`amqp10_framing0:record_for/1`), by numeric code or symbol.
fn record_name(descriptor: &Term) -> Option<&'static str> {
    const NAMES: &[(u64, &str, &str)] = &[
        (0x10, "open", "amqp:open:list"),
        (0x11, "begin", "amqp:begin:list"),
        (0x12, "attach", "amqp:attach:list"),
        (0x13, "flow", "amqp:flow:list"),
        (0x14, "transfer", "amqp:transfer:list"),
        (0x15, "disposition", "amqp:disposition:list"),
        (0x16, "detach", "amqp:detach:list"),
        (0x17, "end", "amqp:end:list"),
        (0x18, "close", "amqp:close:list"),
        (0x1d, "error", "amqp:error:list"),
        (0x23, "received", "amqp:received:list"),
        (0x24, "accepted", "amqp:accepted:list"),
        (0x25, "rejected", "amqp:rejected:list"),
        (0x26, "released", "amqp:released:list"),
        (0x27, "modified", "amqp:modified:list"),
        (0x28, "source", "amqp:source:list"),
        (0x29, "target", "amqp:target:list"),
        (0x40, "sasl_mechanisms", "amqp:sasl-mechanisms:list"),
        (0x41, "sasl_init", "amqp:sasl-init:list"),
        (0x42, "sasl_challenge", "amqp:sasl-challenge:list"),
        (0x43, "sasl_response", "amqp:sasl-response:list"),
        (0x44, "sasl_outcome", "amqp:sasl-outcome:list"),
        (0x70, "header", "amqp:header:list"),
        (0x71, "delivery_annotations", "amqp:delivery-annotations:map"),
        (0x72, "message_annotations", "amqp:message-annotations:map"),
        (0x73, "properties", "amqp:properties:list"),
        (0x74, "application_properties", "amqp:application-properties:map"),
        (0x75, "data", "amqp:data:binary"),
        (0x76, "amqp_sequence", "amqp:amqp-sequence:list"),
        (0x77, "amqp_value", "amqp:amqp-value:*"),
        (0x78, "footer", "amqp:footer:map"),
    ];
    match descriptor {
        Term::Number("ulong", n) => NAMES.iter().find(|(code, ..)| code.to_string() == *n).map(|(_, name, _)| *name),
        Term::Bytes("symbol", s) => {
            NAMES.iter().find(|(_, _, sym)| sym.as_bytes() == s.as_slice()).map(|(_, name, _)| *name)
        }
        _ => None,
    }
}

impl Term {
    /// The term as `~tp` prints it on one line.
    fn render(&self) -> String {
        match self {
            Self::Raw(s) => s.clone(),
            Self::Number(tag, n) => format!("{{{tag},{n}}}"),
            Self::Bytes(tag, b) => format!("{{{tag},{}}}", parsed_binary(b)),
            Self::List(items) => {
                format!("{{list,[{}]}}", items.iter().map(Self::render).collect::<Vec<_>>().join(","))
            }
            Self::Map(pairs) => format!(
                "{{map,[{}]}}",
                pairs.iter().map(|(k, v)| format!("{{{},{}}}", k.render(), v.render())).collect::<Vec<_>>().join(",")
            ),
            Self::Described(d, v) => format!("{{described,{},{}}}", d.render(), v.render()),
        }
    }
}

/// `{primitive_type_unsupported,Code,{position,Pos}}`, the parser's exception for bytes it
/// has no clause for (including values cut short).
fn unsupported(code: u8, position: usize) -> String {
    format!("{{primitive_type_unsupported,{code},{{position,{position}}}}}")
}

/// Bytes `at..at + n` of `b`, if there are that many.
fn take(b: &[u8], at: usize, n: usize) -> Option<&[u8]> {
    b.get(at..at.checked_add(n)?)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
}

fn signed(bytes: &[u8]) -> i64 {
    let bits = u32::try_from(bytes.len() * 8).unwrap_or(64);
    let raw = be(bytes);
    if bits == 0 || bits >= 64 {
        return i64::from_ne_bytes(raw.to_ne_bytes());
    }
    let shift = 64 - bits;
    i64::from_ne_bytes((raw << shift).to_ne_bytes()) >> shift
}

/// A fixed-width value: `Some(None)` when it is cut short, `None` for another constructor.
fn fixed(code: u8, b: &[u8]) -> Option<Option<(Term, usize)>> {
    let (width, tag, is_signed) = match code {
        0x50 => (1, "ubyte", false),
        0x51 => (1, "byte", true),
        0x52 => (1, "uint", false),
        0x53 => (1, "ulong", false),
        0x54 => (1, "int", true),
        0x55 => (1, "long", true),
        0x60 => (2, "ushort", false),
        0x61 => (2, "short", true),
        0x70 => (4, "uint", false),
        0x71 => (4, "int", true),
        0x72 => (4, "float", false),
        0x73 => (4, "char", false),
        0x74 => (4, "as_is", false),
        0x80 => (8, "ulong", false),
        0x81 => (8, "long", true),
        0x82 => (8, "double", false),
        0x83 => (8, "timestamp", true),
        0x84 => (8, "as_is", false),
        0x94 => (16, "as_is", false),
        0x98 => (16, "uuid", false),
        _ => return None,
    };
    let Some(v) = take(b, 1, width) else {
        return Some(None);
    };
    let term = match tag {
        "uuid" | "as_is" | "float" | "double" | "char" => Term::Bytes(tag, v.to_vec()),
        _ if is_signed => Term::Number(tag, signed(v).to_string()),
        _ => Term::Number(tag, be(v).to_string()),
    };
    Some(Some((term, 1 + width)))
}

/// One value as `parse/1` reads it: the term and its encoded length, or the exception.
fn parse(b: &[u8]) -> Result<(Term, usize), String> {
    parse_at(b, 0)
}

fn parse_at(b: &[u8], depth: usize) -> Result<(Term, usize), String> {
    let Some(&code) = b.first() else {
        return Err("function_clause".to_owned());
    };
    if depth > MAX_DEPTH {
        return Err(TOO_DEEP.to_owned());
    }
    if code == 0x00 {
        let rest = b.get(1..).unwrap_or_default();
        let (descriptor, n1) = parse_at(rest, depth + 1)?;
        let (value, n2) = parse_at(rest.get(n1..).unwrap_or_default(), depth + 1)?;
        return Ok((Term::Described(Box::new(descriptor), Box::new(value)), 1 + n1 + n2));
    }
    if let Some(found) = constant(code, b) {
        return found.ok_or_else(|| unsupported(code, 0));
    }
    if let Some(found) = fixed(code, b) {
        return found.ok_or_else(|| unsupported(code, 0));
    }
    if let Some(found) = variable(code, b) {
        return found.ok_or_else(|| unsupported(code, 0));
    }
    compound(code, b, depth)
}

/// Constants and booleans.
fn constant(code: u8, b: &[u8]) -> Option<Option<(Term, usize)>> {
    let raw = |s: &str| Some(Some((Term::Raw(s.to_owned()), 1)));
    match code {
        0x40 => raw("null"),
        0x41 => raw("true"),
        0x42 => raw("false"),
        0x43 => Some(Some((Term::Number("uint", "0".to_owned()), 1))),
        0x44 => Some(Some((Term::Number("ulong", "0".to_owned()), 1))),
        0x45 => Some(Some((Term::List(Vec::new()), 1))),
        0x56 => Some(match b.get(1) {
            Some(0) => Some((Term::Raw("false".to_owned()), 2)),
            Some(1) => Some((Term::Raw("true".to_owned()), 2)),
            _ => None,
        }),
        _ => None,
    }
}

/// Binaries, strings and symbols.
fn variable(code: u8, b: &[u8]) -> Option<Option<(Term, usize)>> {
    let (width, tag) = match code {
        0xa0 => (1, "binary"),
        0xa1 => (1, "utf8"),
        0xa3 => (1, "symbol"),
        0xb0 => (4, "binary"),
        0xb1 => (4, "utf8"),
        0xb3 => (4, "symbol"),
        _ => return None,
    };
    let found = take(b, 1, width).and_then(|s| usize::try_from(be(s)).ok()).and_then(|size| {
        let v = take(b, 1 + width, size)?;
        Some((Term::Bytes(tag, v.to_vec()), 1 + width + size))
    });
    Some(found)
}

/// Lists, maps and arrays.
fn compound(code: u8, b: &[u8], depth: usize) -> Result<(Term, usize), String> {
    let width = match code {
        0xc0 | 0xc1 | 0xe0 => 1,
        0xd0 | 0xd1 | 0xf0 => 4,
        _ => return Err(unsupported(code, 0)),
    };
    let size = take(b, 1, width).and_then(|s| usize::try_from(be(s)).ok()).ok_or_else(|| unsupported(code, 0))?;
    if code == 0xe0 || code == 0xf0 {
        take(b, 1 + width, size).ok_or_else(|| unsupported(code, 0))?;
        return Ok((Term::Raw("{array,\u{2026}}".to_owned()), 1 + width + size));
    }
    // The count field is inside the size; the elements follow it.
    let elements =
        size.checked_sub(width).and_then(|n| take(b, 1 + 2 * width, n)).ok_or_else(|| unsupported(code, 0))?;
    let items = parse_many(elements, 0, depth + 1)?;
    let term = if code == 0xc0 || code == 0xd0 { Term::List(items) } else { Term::Map(mapify(items)?) };
    Ok((term, 1 + width + size))
}

fn mapify(items: Vec<Term>) -> Result<Vec<(Term, Term)>, String> {
    if !items.len().is_multiple_of(2) {
        return Err("function_clause".to_owned());
    }
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        pairs.push((k, v));
    }
    Ok(pairs)
}

/// A token of `parse_many`: a value, or the marker of a described value whose descriptor and
/// value are the next two values.
enum Token {
    Value(Term),
    Described,
}

/// The elements of a list or map (`parse_many/2`), positions counted from `base`.
///
/// Values are read left to right; described markers are resolved from the right with a
/// stack, as the parser's recursion does, so deep nesting costs no stack depth.
fn parse_many(b: &[u8], base: usize, depth: usize) -> Result<Vec<Term>, String> {
    if depth > MAX_DEPTH {
        return Err(TOO_DEEP.to_owned());
    }
    let mut tokens = Vec::new();
    let mut at = 0;
    while let Some(&code) = b.get(at) {
        let here = b.get(at..).unwrap_or_default();
        if code == 0x00 {
            tokens.push(Token::Described);
            at += 1;
            continue;
        }
        let (term, n) = element(code, here, base + at, depth)?;
        tokens.push(Token::Value(term));
        at += n;
    }
    let mut stack: Vec<Term> = Vec::new();
    for token in tokens.into_iter().rev() {
        match token {
            Token::Value(t) => stack.push(t),
            Token::Described => {
                let (Some(descriptor), Some(value)) = (stack.pop(), stack.pop()) else {
                    let rest: Vec<String> = stack.iter().rev().map(Term::render).collect();
                    return Err(format!("{{badmatch,[{}]}}", rest.join(",")));
                };
                stack.push(Term::Described(Box::new(descriptor), Box::new(value)));
            }
        }
    }
    stack.reverse();
    Ok(stack)
}

/// One element inside a compound (`pm/3`): like [`parse`], but a nested compound's elements
/// count their positions on from the enclosing ones.
fn element(code: u8, b: &[u8], position: usize, depth: usize) -> Result<(Term, usize), String> {
    if let Some(found) = constant(code, b).or_else(|| fixed(code, b)) {
        return found.ok_or_else(|| unsupported(code, position));
    }
    if let Some(found) = variable(code, b) {
        return found.ok_or_else(|| unsupported(code, position));
    }
    let width = match code {
        0xc0 | 0xc1 => 1,
        0xd0 | 0xd1 => 4,
        0xe0 | 0xf0 => return compound(code, b, depth).map_err(|_| unsupported(code, position)),
        _ => return Err(unsupported(code, position)),
    };
    let size =
        take(b, 1, width).and_then(|s| usize::try_from(be(s)).ok()).ok_or_else(|| unsupported(code, position))?;
    let inner = take(b, 1 + width, size).ok_or_else(|| unsupported(code, position))?;
    let elements = inner.get(width..).ok_or_else(|| "{badmatch,<<>>}".to_owned())?;
    let items = parse_many(elements, position + 1 + 2 * width, depth + 1)?;
    let term = if code == 0xc0 || code == 0xd0 { Term::List(items) } else { Term::Map(mapify(items)?) };
    Ok((term, 1 + width + size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_exceptions_match_rabbitmq() {
        // flow descriptor and a string instead of the field list
        let not_a_list = [0x00, 0x53, 0x13, 0xa1, 0x03, b'a', b'b', b'c'];
        assert_eq!(classify(&not_a_list), Undecodable::Reader("function_clause".into()));
        // a list announcing more bytes than there are
        let truncated = [0x00, 0x53, 0x13, 0xc0, 0x20, 0x05, 0x43, 0x70];
        assert_eq!(classify(&truncated), Undecodable::Reader("{primitive_type_unsupported,192,{position,0}}".into()));
        let unknown = [0x00, 0x53, 0x99, 0x45];
        assert_eq!(classify(&unknown), Undecodable::Reader("{unknown,{ulong,153}}".into()));
        let bad_element = [0x00, 0x53, 0x13, 0xc0, 0x04, 0x02, 0x43, 0xff, 0x00];
        assert_eq!(classify(&bad_element), Undecodable::Reader("{primitive_type_unsupported,255,{position,1}}".into()));
        assert_eq!(classify(&[]), Undecodable::Reader("function_clause".into()));
    }

    #[test]
    fn values_that_are_no_performative_go_to_the_session() {
        let text = [0xa1, 0x03, b'a', b'b', b'c'];
        assert_eq!(classify(&text), Undecodable::NotPerformative("Unexpected frame {utf8,<<\"abc\">>}".into()));
        let flow_with_string_handle = [0x00, 0x53, 0x13, 0xc0, 0x06, 0x05, 0x43, 0x43, 0xa1, 0x01, b'x'];
        assert_eq!(classify(&flow_with_string_handle), Undecodable::BadFields("flow"));
        assert_eq!(classify(&[0x40]), Undecodable::NotPerformative("Unexpected frame undefined".into()));
    }

    #[test]
    fn unexpected_frames_print_one_field_a_line_when_long() {
        // disposition [role sender, first 0, last 0, settled true, state accepted]
        let body = [0x00, 0x53, 0x15, 0xc0, 0x09, 0x05, 0x42, 0x43, 0x43, 0x41, 0x00, 0x53, 0x24, 0x45];
        let indent = " ".repeat(38);
        let expected = [
            "Unexpected frame {'v1_0.disposition',[{role,false}",
            "{first,{uint,0}}",
            "{last,{uint,0}}",
            "{settled,true}",
            "{state,{'v1_0.accepted',[]}}",
            "{batchable,undefined}]}",
        ]
        .join(&format!(",\n{indent}"));
        assert_eq!(unexpected_frame(&body), expected);
        // end with no error fits on one line
        assert_eq!(unexpected_frame(&[0x00, 0x53, 0x17, 0x45]), "Unexpected frame {'v1_0.end',[{error,undefined}]}");
    }

    #[test]
    fn deep_nesting_costs_no_stack() {
        let described = vec![0x00; 100_000];
        assert_eq!(classify(&described), Undecodable::Reader(TOO_DEEP.into()));
        let mut body = vec![0xd0];
        let inner = vec![0x00; 100_000];
        let size = u32::try_from(inner.len() + 4).unwrap_or(0);
        body.extend_from_slice(&size.to_be_bytes());
        body.extend_from_slice(&1u32.to_be_bytes());
        body.extend_from_slice(&inner);
        assert!(matches!(classify(&body), Undecodable::Reader(e) if e.starts_with("{badmatch,")));
    }
}
