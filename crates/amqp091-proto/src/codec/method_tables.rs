//! The field tables inside method frames, checked with Charon's bounded table decoder before
//! amq-protocol's parser sees the frame.
//!
//! amq-protocol decodes nested tables by recursion without a bound: a `queue.declare` whose
//! arguments nest 1,300 tables deep (a 14 KB frame) overflowed a worker's stack and took the
//! whole broker down. The methods that carry a table are few and their layouts fixed, so the
//! tables are found by skipping the fields before them and decoded with [`decode_table`],
//! which refuses nesting beyond the model's limit before recursing into it.

use bytes::{Buf, Bytes};

use super::CodecError;
use super::table::{decode_table, short_str};

/// One field before or at a method's table.
#[derive(Clone, Copy)]
enum Field {
    Octet,
    Short,
    ShortStr,
    Table,
}

use Field::{Octet, Short, ShortStr, Table};

/// Every method with a field table, and its fields up to its last table.
const LAYOUTS: &[((u16, u16), &[Field])] = &[
    ((10, 10), &[Octet, Octet, Table]),
    ((10, 11), &[Table]),
    ((40, 10), &[Short, ShortStr, ShortStr, Octet, Table]),
    ((40, 30), &[Short, ShortStr, ShortStr, ShortStr, Octet, Table]),
    ((40, 40), &[Short, ShortStr, ShortStr, ShortStr, Octet, Table]),
    ((50, 10), &[Short, ShortStr, Octet, Table]),
    ((50, 20), &[Short, ShortStr, ShortStr, ShortStr, Octet, Table]),
    ((50, 50), &[Short, ShortStr, ShortStr, ShortStr, Table]),
    ((60, 20), &[Short, ShortStr, ShortStr, Octet, Table]),
];

/// Whether the tables of method `class.method`, whose arguments are `args`, nest within the
/// limit.
///
/// # Errors
/// [`CodecError::TooDeep`] only. Other faults (a truncated field, an unknown type letter) are
/// left to the method parser, which answers them as RabbitMQ does.
pub(super) fn check_tables(class: u16, method: u16, args: &Bytes) -> Result<(), CodecError> {
    let Some((_, fields)) = LAYOUTS.iter().find(|(ids, _)| *ids == (class, method)) else {
        return Ok(());
    };
    let mut input = args.clone();
    for field in *fields {
        let step = match field {
            Octet => skip(&mut input, 1),
            Short => skip(&mut input, 2),
            ShortStr => short_str(&mut input).map(drop),
            Table => decode_table(&mut input).map(drop),
        };
        match step {
            Err(CodecError::TooDeep) => return Err(CodecError::TooDeep),
            Err(_) => return Ok(()),
            Ok(()) => {}
        }
    }
    Ok(())
}

fn skip(input: &mut Bytes, n: usize) -> Result<(), CodecError> {
    if input.remaining() < n {
        return Err(CodecError::Truncated);
    }
    input.advance(n);
    Ok(())
}
