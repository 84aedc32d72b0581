//! Fanout exchange bindings: every binding matches, whatever the key.

use super::binding::{Binding, Destination};

#[derive(Debug, Default)]
pub(crate) struct FanoutBindings {
    bindings: Vec<Binding>,
}

impl FanoutBindings {
    pub(crate) fn add(&mut self, binding: Binding) -> bool {
        if self.contains(&binding) {
            return false;
        }
        self.bindings.push(binding);
        true
    }

    pub(crate) fn remove(&mut self, binding: &Binding) -> bool {
        let before = self.bindings.len();
        self.bindings.retain(|b| !b.same_as(binding));
        before != self.bindings.len()
    }

    pub(crate) fn remove_destination(&mut self, destination: &Destination) {
        self.bindings.retain(|b| &b.destination != destination);
    }

    pub(crate) fn contains(&self, binding: &Binding) -> bool {
        self.bindings.iter().any(|b| b.same_as(binding))
    }

    pub(crate) fn contains_destination(&self, destination: &Destination) -> bool {
        self.bindings.iter().any(|b| &b.destination == destination)
    }

    pub(crate) fn to_destination(&self, destination: &Destination) -> Vec<Binding> {
        self.bindings.iter().filter(|b| &b.destination == destination).cloned().collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    pub(crate) fn route<'a>(&'a self, out: &mut Vec<&'a Destination>) {
        out.extend(self.bindings.iter().map(|b| &b.destination));
    }
}
