//! Just enough of Erlang's term printing to reproduce RabbitMQ's frame-error texts.
//!
//! RabbitMQ builds them with `io_lib:format("type ~tp, ~ts octets = ~tp: ~tp", ...)`, and `~tp`
//! pretty-prints: a term that does not fit in the 80-column line is broken over several lines
//! (`io_lib_pretty`). Clients see those line breaks in the reply text, so we reproduce the two
//! shapes that occur there: binaries and tagged tuples of short atoms and integers.

/// Erlang's default line length for `~p`.
const LINE: usize = 80;

/// Text being formatted, tracking the column the next character lands in.
#[derive(Debug, Default)]
pub struct ErlangText {
    text: String,
}

impl ErlangText {
    /// Empty text.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// 1-based column of the next character.
    fn column(&self) -> usize {
        let line = self.text.rsplit('\n').next().unwrap_or_default();
        line.chars().count() + 1
    }

    /// Appends literal text (`~ts`, `~w` and format text).
    pub fn push(&mut self, s: &str) -> &mut Self {
        self.text.push_str(s);
        self
    }

    /// Appends a binary as `~tp` prints it.
    pub fn binary(&mut self, bytes: &[u8]) -> &mut Self {
        let flat = super::binary(bytes);
        let col = self.column();
        if flat.len() < LINE.saturating_sub(col) || is_printable(bytes) {
            return self.push(&flat);
        }
        // io_lib_pretty:pp_binary: fill lines, continuing two columns right of `<<`.
        let start = col + 2;
        let n0 = (LINE.saturating_sub(start)).min(flat.len().saturating_sub(4)).max(8);
        let indent = " ".repeat(start - 1);
        let tokens: Vec<String> = bytes.iter().map(u8::to_string).collect();
        let mut out = String::from("<<");
        let mut room = n0 as isize;
        let count = tokens.len();
        for (i, token) in tokens.iter().enumerate() {
            if i + 1 == count {
                if token.len() as isize > room {
                    out.push('\n');
                    out.push_str(&indent);
                }
                out.push_str(token);
            } else {
                let len = token.len() as isize + 1;
                if room - len < 0 {
                    out.push('\n');
                    out.push_str(&indent);
                    room = n0 as isize - len;
                } else {
                    room -= len;
                }
                out.push_str(token);
                out.push(',');
            }
        }
        out.push_str(">>");
        self.push(&out)
    }

    /// Appends `{tag,elem,...}` as `~tp` prints it: flat when it fits, otherwise with the
    /// elements that do not fit moved to new lines indented to the brace's column + 1.
    pub fn tagged_tuple(&mut self, tag: &str, elements: &[String]) -> &mut Self {
        let flat = format!("{{{tag},{}}}", elements.join(","));
        let col = self.column();
        if flat.len() < LINE.saturating_sub(col) {
            return self.push(&flat);
        }
        let mut out = format!("{{{tag}");
        let mut running = col + tag.len() + 2;
        for element in elements {
            let width = element.len() + 1;
            let room = LINE.saturating_sub(running);
            // Last or not, io_lib_pretty wants one spare column here.
            let fits = width + 1 < room;
            if fits {
                out.push(',');
                out.push_str(element);
                running += width;
            } else {
                out.push_str(",\n");
                out.push_str(&" ".repeat(col));
                out.push_str(element);
                running = col + 1 + element.len();
            }
        }
        out.push('}');
        self.push(&out)
    }

    /// The finished text.
    #[must_use]
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.text)
    }
}

fn is_printable(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|b| (0x20..0x7f).contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_rabbitmqs_bad_frame_end_text() {
        let text = ErlangText::new()
            .push("type 1, all octets = ")
            .binary(&[0, 60, 0, 10, 0, 0, 0, 0, 0, 10, 0])
            .push(": ")
            .tagged_tuple("invalid_frame_end_marker", &["0".to_owned()])
            .finish();
        let expected = format!(
            "type 1, all octets = <<0,60,0,10,0,0,0,0,0,10,0>>: {{invalid_frame_end_marker,\n{}0}}",
            " ".repeat(52)
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn short_terms_stay_on_one_line() {
        let text = ErlangText::new()
            .push("type 3, all octets = ")
            .binary(&[])
            .push(": ")
            .tagged_tuple("frame_too_large", &["200000".to_owned(), "131064".to_owned()])
            .finish();
        assert_eq!(text, "type 3, all octets = <<>>: {frame_too_large,200000,131064}");
    }
}
