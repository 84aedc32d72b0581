//! Direct exchange bindings: a hash map from binding key to destinations, so routing is one
//! lookup whatever the number of bindings.

use std::collections::HashMap;

use super::binding::{Binding, Destination};

#[derive(Debug, Default)]
pub(crate) struct DirectBindings {
    by_key: HashMap<String, Vec<Binding>>,
    count: usize,
}

impl DirectBindings {
    pub(crate) fn add(&mut self, binding: Binding) -> bool {
        let list = self.by_key.entry(binding.key.clone()).or_default();
        if list.iter().any(|b| b.same_as(&binding)) {
            return false;
        }
        list.push(binding);
        self.count += 1;
        true
    }

    pub(crate) fn remove(&mut self, binding: &Binding) -> bool {
        let Some(list) = self.by_key.get_mut(&binding.key) else {
            return false;
        };
        let before = list.len();
        list.retain(|b| !b.same_as(binding));
        let removed = before - list.len();
        if list.is_empty() {
            self.by_key.remove(&binding.key);
        }
        self.count -= removed;
        removed > 0
    }

    pub(crate) fn remove_destination(&mut self, destination: &Destination) {
        let mut removed = 0;
        self.by_key.retain(|_, list| {
            let before = list.len();
            list.retain(|b| &b.destination != destination);
            removed += before - list.len();
            !list.is_empty()
        });
        self.count -= removed;
    }

    pub(crate) fn contains(&self, binding: &Binding) -> bool {
        self.by_key.get(&binding.key).is_some_and(|list| list.iter().any(|b| b.same_as(binding)))
    }

    pub(crate) fn contains_destination(&self, destination: &Destination) -> bool {
        self.by_key.values().flatten().any(|b| &b.destination == destination)
    }

    pub(crate) fn to_destination(&self, destination: &Destination) -> Vec<Binding> {
        self.by_key.values().flatten().filter(|b| &b.destination == destination).cloned().collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(crate) fn route<'a>(&'a self, key: &str, out: &mut Vec<&'a Destination>) {
        if let Some(list) = self.by_key.get(key) {
            out.extend(list.iter().map(|b| &b.destination));
        }
    }
}
