//! The authenticated user a connection or an HTTP request acts as.

use super::tags::Tags;

/// An authenticated user: its name and its tags at login. Permissions are looked up at each
/// check (see [`super::Access::authorize`]), so a change applies to open connections at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    tags: Tags,
}

impl User {
    pub(crate) fn new(name: String, tags: Tags) -> Self {
        Self { name, tags }
    }

    /// Its tags.
    #[must_use]
    pub fn tags(&self) -> &Tags {
        &self.tags
    }
}
