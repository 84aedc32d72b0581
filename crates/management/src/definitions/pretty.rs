//! Erlang's `~p` for the terms an import error carries (`{resources_missing,[...]}`,
//! `{no_such_user,<<"u">>}`): RabbitMQ formats them with `io_lib:format("~p", ...)`, which breaks
//! a term that does not fit in 80 columns over several lines (`io_lib_pretty`), and its API
//! returns that text. This is `io_lib_pretty`'s layout for atoms, printable binaries, tuples
//! and lists: the term is printed flat where it fits, a tuple tagged with an atom keeps the
//! tag on the first line, and the tag-indentation choice (`cind`) is made as Erlang makes it.

use charon_model::erlang;

/// Erlang's default line length.
const LINE: i64 = 80;

/// A term.
#[derive(Clone, Debug)]
pub(crate) enum Term {
    /// An atom, written as given.
    Atom(String),
    /// A binary holding text (`<<"text">>`).
    Binary(String),
    /// A tuple.
    Tuple(Vec<Term>),
    /// A proper list.
    List(Vec<Term>),
}

/// A term with its flat text, as `io_lib_pretty:print_length` lays it out.
struct Laid {
    flat: String,
    len: i64,
    shape: Shape,
}

enum Shape {
    /// Printed as one string (atoms, printable binaries): `?ATM`.
    Atomic,
    List(Vec<Laid>),
    Tuple {
        tagged: bool,
        items: Vec<Laid>,
    },
}

/// No layout with this tag indentation (`throw(no_good)`).
struct NoGood;

fn lay(term: &Term) -> Laid {
    let (flat, shape) = match term {
        Term::Atom(atom) => (atom.clone(), Shape::Atomic),
        Term::Binary(text) => (erlang::unicode_binary(text.as_bytes()), Shape::Atomic),
        Term::Tuple(items) => {
            let items: Vec<Laid> = items.iter().map(lay).collect();
            let flat = format!("{{{}}}", items.iter().map(|i| i.flat.as_str()).collect::<Vec<_>>().join(","));
            let tagged = items.len() > 1 && matches!(term, Term::Tuple(t) if matches!(t.first(), Some(Term::Atom(_))));
            (flat, Shape::Tuple { tagged, items })
        }
        Term::List(items) => {
            let items: Vec<Laid> = items.iter().map(lay).collect();
            let flat = format!("[{}]", items.iter().map(|i| i.flat.as_str()).collect::<Vec<_>>().join(","));
            (flat, Shape::List(items))
        }
    };
    let len = i64::try_from(flat.chars().count()).unwrap_or(i64::MAX);
    Laid { flat, len, shape }
}

/// `io_lib:format("~p", [Term])`.
pub(crate) fn print(term: &Term) -> String {
    let laid = lay(term);
    let (col, m) = (1, laid.len);
    if laid.len < LINE - col {
        return laid.flat;
    }
    let tind = [-1, 4].into_iter().find(|&i| cind(&laid, col, m, i, 0, 0).is_ok()).unwrap_or(1);
    let mut out = String::new();
    Printer { m, tind }.pp(&laid, col, col - 1, 0, 0, &mut out);
    out
}

fn last_depth(rest: &[Laid], ld: i64) -> i64 {
    if rest.is_empty() { ld + 1 } else { 0 }
}

fn atomic(e: &Laid) -> bool {
    matches!(e.shape, Shape::Atomic)
}

/// Where the elements after a list's first go (`pp_tail`): the column the list's elements
/// start in, the indentation of a broken line, and how many closing brackets follow the last.
#[derive(Clone, Copy, Debug)]
struct ListAt {
    col0: i64,
    ind: i64,
    ld: i64,
}

/// Whether `e` goes flat after a comma on the current line (`pp_tail`'s and `cind_tail`'s test).
fn fits_tail(e: &Laid, col: i64, m: i64, ld1: i64, w: i64) -> bool {
    let elen = 1 + e.len;
    atomic(e)
        && if ld1 == 0 { elen + 1 < LINE - col && w + elen < m } else { elen < LINE - col - ld1 && w + elen + ld1 <= m }
}

fn fits(e: &Laid, col: i64, m: i64, ld: i64, w: i64) -> bool {
    e.len < LINE - col - ld && e.len + w + ld <= m
}

fn cind(e: &Laid, col: i64, m: i64, ind: i64, ld: i64, w: i64) -> Result<i64, NoGood> {
    if fits(e, col, m, ld, w) {
        return Ok(ind);
    }
    match &e.shape {
        Shape::Atomic => Ok(ind),
        Shape::List(items) | Shape::Tuple { tagged: false, items } => cind_list(items, col + 1, m, ind, ld, w + 1),
        Shape::Tuple { tagged: true, items } => {
            let Some((tag, rest)) = items.split_first() else { return Ok(ind) };
            let (tag_ind, w) = (tag.len + 2, w + 1);
            let tcol = col + tag_ind;
            if ind > 0 && tag_ind > ind {
                let col1 = col + ind;
                if m + col1 <= LINE || col1 <= LINE / 2 {
                    cind_tail(rest, col1, tcol, m, ind, ld, w + tag.len)
                } else {
                    Err(NoGood)
                }
            } else if m + tcol < LINE || tcol < LINE / 2 {
                cind_list(rest, tcol, m, ind, ld, w + tag.len + 1)
            } else {
                Err(NoGood)
            }
        }
    }
}

fn cind_list(items: &[Laid], col0: i64, m: i64, ind: i64, ld: i64, w: i64) -> Result<i64, NoGood> {
    let Some((e, rest)) = items.split_first() else { return Ok(ind) };
    let we = cind_element(e, col0, m, ind, last_depth(rest, ld), w)?;
    cind_tail(rest, col0, col0 + we, m, ind, ld, w + we)
}

fn cind_tail(items: &[Laid], col0: i64, col: i64, m: i64, ind: i64, ld: i64, w: i64) -> Result<i64, NoGood> {
    let Some((e, rest)) = items.split_first() else { return Ok(ind) };
    let ld1 = last_depth(rest, ld);
    if fits_tail(e, col, m, ld1, w) {
        cind_tail(rest, col0, col + 1 + e.len, m, ind, ld, w + 1 + e.len)
    } else {
        let we = cind_element(e, col0, m, ind, ld1, 0)?;
        cind_tail(rest, col0, col0 + we, m, ind, ld, we)
    }
}

fn cind_element(e: &Laid, col: i64, m: i64, ind: i64, ld: i64, w: i64) -> Result<i64, NoGood> {
    if atomic(e) && fits(e, col, m, ld, w) {
        return Ok(e.len);
    }
    cind(e, col, m, ind, ld, w)?;
    Ok(LINE)
}

/// `pp` and friends, with the chosen tag indentation.
struct Printer {
    m: i64,
    tind: i64,
}

impl Printer {
    /// `ind`: the spaces after a line break.
    fn pp(&self, e: &Laid, col: i64, ind: i64, ld: i64, w: i64, out: &mut String) {
        if fits(e, col, self.m, ld, w) {
            out.push_str(&e.flat);
            return;
        }
        match &e.shape {
            Shape::Atomic => out.push_str(&e.flat),
            Shape::List(items) => {
                out.push('[');
                self.pp_list(items, col + 1, ind + 1, ld, w + 1, out);
                out.push(']');
            }
            Shape::Tuple { tagged: false, items } => {
                out.push('{');
                self.pp_list(items, col + 1, ind + 1, ld, w + 1, out);
                out.push('}');
            }
            Shape::Tuple { tagged: true, items } => {
                out.push('{');
                self.pp_tag_tuple(items, col, ind, ld, w + 1, out);
                out.push('}');
            }
        }
    }

    fn pp_tag_tuple(&self, items: &[Laid], col: i64, ind: i64, ld: i64, w: i64, out: &mut String) {
        let Some((tag, rest)) = items.split_first() else { return };
        let tag_ind = tag.len + 2;
        let tcol = col + tag_ind;
        out.push_str(&tag.flat);
        if self.tind > 0 && tag_ind > self.tind {
            self.pp_tail(rest, ListAt { col0: col + self.tind, ind: ind + self.tind, ld }, tcol, w + tag.len, out);
        } else {
            out.push(',');
            self.pp_list(rest, tcol, ind + tag_ind, ld, w + tag.len + 1, out);
        }
    }

    fn pp_list(&self, items: &[Laid], col0: i64, ind: i64, ld: i64, w: i64, out: &mut String) {
        let Some((e, rest)) = items.split_first() else { return };
        let we = self.pp_element(e, col0, ind, last_depth(rest, ld), w, out);
        self.pp_tail(rest, ListAt { col0, ind, ld }, col0 + we, w + we, out);
    }

    fn pp_tail(&self, items: &[Laid], at: ListAt, col: i64, w: i64, out: &mut String) {
        let ListAt { col0, ind, ld } = at;
        let Some((e, rest)) = items.split_first() else { return };
        let ld1 = last_depth(rest, ld);
        out.push(',');
        if fits_tail(e, col, self.m, ld1, w) {
            out.push_str(&e.flat);
            self.pp_tail(rest, at, col + 1 + e.len, w + 1 + e.len, out);
        } else {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', usize::try_from(ind).unwrap_or(0)));
            let we = self.pp_element(e, col0, ind, ld1, 0, out);
            self.pp_tail(rest, at, col0 + we, we, out);
        }
    }

    fn pp_element(&self, e: &Laid, col: i64, ind: i64, ld: i64, w: i64, out: &mut String) -> i64 {
        if atomic(e) && fits(e, col, self.m, ld, w) {
            out.push_str(&e.flat);
            e.len
        } else {
            self.pp(e, col, ind, ld, w, out);
            LINE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(vhost: &str, resources: &[(&str, &str)]) -> String {
        let resource = |(kind, name): &(&str, &str)| {
            Term::Tuple(vec![
                Term::Atom("not_found".into()),
                Term::Tuple(vec![
                    Term::Atom("resource".into()),
                    Term::Binary(vhost.into()),
                    Term::Atom((*kind).into()),
                    Term::Binary((*name).into()),
                ]),
            ])
        };
        print(&Term::Tuple(vec![
            Term::Atom("resources_missing".into()),
            Term::List(resources.iter().map(resource).collect()),
        ]))
    }

    /// RabbitMQ 4.0.5's answers to bindings whose ends are missing (observed, 2026-11-26).
    #[test]
    fn terms_break_over_lines_as_rabbitmq_prints_them() {
        assert_eq!(
            missing("/", &[("queue", "x")]),
            r#"{resources_missing,[{not_found,{resource,<<"/">>,queue,<<"x">>}}]}"#
        );
        assert_eq!(
            missing("/", &[("exchange", "nosrc"), ("queue", "q1")]),
            "{resources_missing,[{not_found,{resource,<<\"/\">>,exchange,<<\"nosrc\">>}},\n                    {not_found,{resource,<<\"/\">>,queue,<<\"q1\">>}}]}"
        );
        assert_eq!(
            missing("/", &[("queue", "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq")]),
            "{resources_missing,\n    [{not_found,\n         {resource,<<\"/\">>,queue,\n             <<\"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq\">>}}]}"
        );
        assert_eq!(
            missing(
                "/",
                &[
                    ("exchange", "nosuchsourceexchangewithalongname"),
                    ("queue", "nosuchqueuewithaverylongname_abcdefghijklmnopqrstuvwxyz")
                ]
            ),
            "{resources_missing,\n    [{not_found,\n         {resource,<<\"/\">>,exchange,<<\"nosuchsourceexchangewithalongname\">>}},\n     {not_found,\n         {resource,<<\"/\">>,queue,\n             <<\"nosuchqueuewithaverylongname_abcdefghijklmnopqrstuvwxyz\">>}}]}"
        );
        assert_eq!(
            missing("/", &[("queue", "cf-4af560-bad_input_and_ad1068-nope0")]),
            "{resources_missing,\n    [{not_found,\n         {resource,<<\"/\">>,queue,\n             <<\"cf-4af560-bad_input_and_ad1068-nope0\">>}}]}"
        );
    }
}
