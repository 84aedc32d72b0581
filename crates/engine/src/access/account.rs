//! A user as the broker stores it.

use charon_store::access::StoredUser;

use super::error::AccessError;
use super::password::{HashingAlgorithm, PasswordHash};
use super::tags::Tags;

/// A stored user: name, password hash (none: no password login, as RabbitMQ's users created
/// without a password, who may still log in with a client certificate) and tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    name: String,
    password: Option<PasswordHash>,
    tags: Tags,
}

impl Account {
    /// A user.
    #[must_use]
    pub fn new(name: String, password: Option<PasswordHash>, tags: Tags) -> Self {
        Self { name, password, tags }
    }

    /// Login name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The password hash, if it has one.
    #[must_use]
    pub fn password(&self) -> Option<&PasswordHash> {
        self.password.as_ref()
    }

    /// Tags.
    #[must_use]
    pub fn tags(&self) -> &Tags {
        &self.tags
    }

    /// Whether `password` logs this user in.
    #[must_use]
    pub fn verify(&self, password: &str) -> bool {
        self.password.as_ref().is_some_and(|hash| hash.verify(password))
    }

    pub(crate) fn to_stored(&self) -> StoredUser {
        StoredUser {
            name: self.name.clone(),
            hashing_algorithm: self
                .password
                .as_ref()
                .map_or(HashingAlgorithm::Sha256, PasswordHash::algorithm)
                .as_str()
                .to_owned(),
            password_hash: self.password.as_ref().map(|h| h.salted().to_vec()).unwrap_or_default(),
            tags: self.tags.as_slice().to_vec(),
        }
    }

    pub(crate) fn from_stored(stored: StoredUser) -> Result<Self, AccessError> {
        let password = if stored.password_hash.is_empty() {
            None
        } else {
            let algorithm = HashingAlgorithm::parse(&stored.hashing_algorithm)?;
            Some(PasswordHash::from_parts(algorithm, stored.password_hash)?)
        };
        Ok(Self { name: stored.name, password, tags: Tags::new(stored.tags) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn round_trips_through_its_stored_form() {
        let account = Account::new("a".into(), Some(PasswordHash::new("pw")), Tags::parse("management,x"));
        let back = Account::from_stored(account.to_stored()).unwrap();
        assert_eq!(back, account);
        assert!(back.verify("pw") && !back.verify("pw2"));
        let without = Account::new("b".into(), None, Tags::default());
        let back = Account::from_stored(without.to_stored()).unwrap();
        assert!(!back.verify(""), "no password: no password login");
    }
}
