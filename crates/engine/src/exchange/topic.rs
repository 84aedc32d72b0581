//! Topic exchange bindings: a trie over dot-separated words, matched the way RabbitMQ's
//! `rabbit_db_topic_exchange` does (`*` is exactly one word, `#` zero or more; the empty key
//! has no words, `a..b` has an empty middle word).

use std::collections::HashMap;

use super::binding::{Binding, Destination};

/// Splits a key into words as RabbitMQ's `split_topic_key/1` does.
fn words(key: &str) -> Vec<&str> {
    if key.is_empty() { Vec::new() } else { key.split('.').collect() }
}

#[derive(Debug, Default)]
struct Node {
    children: HashMap<String, Node>,
    bindings: Vec<Binding>,
}

impl Node {
    fn is_empty(&self) -> bool {
        self.children.is_empty() && self.bindings.is_empty()
    }

    fn walk<'a>(&'a self, words: &[&str], out: &mut Vec<&'a Destination>) {
        match words.split_first() {
            None => out.extend(self.bindings.iter().map(|b| &b.destination)),
            Some((word, rest)) => {
                if let Some(child) = self.children.get(*word).filter(|_| *word != "*" && *word != "#") {
                    child.walk(rest, out);
                }
                if let Some(star) = self.children.get("*") {
                    star.walk(rest, out);
                }
            }
        }
        if let Some(hash) = self.children.get("#") {
            for skip in 0..=words.len() {
                hash.walk(words.get(skip..).unwrap_or_default(), out);
            }
        }
    }

    fn collect(&self, pred: &dyn Fn(&Binding) -> bool, out: &mut Vec<Binding>) {
        out.extend(self.bindings.iter().filter(|b| pred(b)).cloned());
        for child in self.children.values() {
            child.collect(pred, out);
        }
    }

    fn any(&self, pred: &dyn Fn(&Binding) -> bool) -> bool {
        self.bindings.iter().any(pred) || self.children.values().any(|c| c.any(pred))
    }

    /// Removes bindings matching `keep == false` below this node and prunes empty children.
    fn retain(&mut self, keep: &dyn Fn(&Binding) -> bool) -> usize {
        let before = self.bindings.len();
        self.bindings.retain(|b| keep(b));
        let mut removed = before - self.bindings.len();
        self.children.retain(|_, child| {
            removed += child.retain(keep);
            !child.is_empty()
        });
        removed
    }
}

#[derive(Debug, Default)]
pub(crate) struct TopicBindings {
    root: Node,
    count: usize,
}

impl TopicBindings {
    fn node_mut(&mut self, key: &str) -> &mut Node {
        let mut node = &mut self.root;
        for word in words(key) {
            node = node.children.entry(word.to_owned()).or_default();
        }
        node
    }

    fn node(&self, key: &str) -> Option<&Node> {
        let mut node = &self.root;
        for word in words(key) {
            node = node.children.get(word)?;
        }
        Some(node)
    }

    pub(crate) fn add(&mut self, binding: Binding) -> bool {
        let node = self.node_mut(&binding.key);
        if node.bindings.iter().any(|b| b.same_as(&binding)) {
            return false;
        }
        node.bindings.push(binding);
        self.count += 1;
        true
    }

    pub(crate) fn remove(&mut self, binding: &Binding) -> bool {
        let removed = self.root.retain(&|b| !b.same_as(binding));
        self.count -= removed;
        removed > 0
    }

    pub(crate) fn remove_destination(&mut self, destination: &Destination) {
        let removed = self.root.retain(&|b| &b.destination != destination);
        self.count -= removed;
    }

    pub(crate) fn contains(&self, binding: &Binding) -> bool {
        self.node(&binding.key).is_some_and(|n| n.bindings.iter().any(|b| b.same_as(binding)))
    }

    pub(crate) fn contains_destination(&self, destination: &Destination) -> bool {
        self.root.any(&|b| &b.destination == destination)
    }

    pub(crate) fn to_destination(&self, destination: &Destination) -> Vec<Binding> {
        let mut out = Vec::new();
        self.root.collect(&|b| &b.destination == destination, &mut out);
        out
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(crate) fn route<'a>(&'a self, key: &str, out: &mut Vec<&'a Destination>) {
        self.root.walk(&words(key), out);
    }
}

#[cfg(test)]
mod tests {
    use charon_model::Table;

    use super::*;

    fn matches(binding_key: &str, routing_key: &str) -> bool {
        let mut t = TopicBindings::default();
        t.add(Binding {
            destination: Destination::Queue("q".into()),
            key: binding_key.into(),
            arguments: Table::new(),
        });
        let mut out = Vec::new();
        t.route(routing_key, &mut out);
        !out.is_empty()
    }

    #[test]
    fn star_is_exactly_one_word() {
        assert!(matches("a.*", "a.b"));
        assert!(!matches("a.*", "a"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(!matches("*", ""));
        assert!(!matches("*", "a.b"));
    }

    #[test]
    fn hash_is_zero_or_more_words() {
        assert!(matches("#", ""));
        assert!(matches("#", "a.b.c"));
        assert!(matches("a.#", "a"));
        assert!(matches("a.#", "a.b.c"));
        assert!(matches("#.a", "a"));
        assert!(matches("a.#.b", "a.b"));
        assert!(matches("a.#.b", "a.x.y.b"));
        assert!(!matches("a.#.b", "a.x.c"));
    }

    #[test]
    fn empty_words_are_words() {
        assert!(matches("a..b", "a..b"));
        assert!(matches("a.*.b", "a..b"));
        assert!(!matches("a.b", "a..b"));
        assert!(matches("", ""));
        assert!(!matches("", "a"));
    }

    #[test]
    fn removal_prunes_the_trie() {
        let mut t = TopicBindings::default();
        let b = Binding { destination: Destination::Queue("q".into()), key: "a.b.c".into(), arguments: Table::new() };
        assert!(t.add(b.clone()));
        assert!(!t.add(b.clone()));
        assert!(t.remove(&b));
        assert!(t.is_empty());
        assert!(t.root.is_empty());
    }
}
