//! User tags: RabbitMQ's management roles, and any other tag an operator stores.

/// A user's tags, in the order given.
///
/// The four RabbitMQ knows decide what the management API lets a user do: `administrator`
/// everything; `monitoring` read everything; `policymaker` manage policies in its vhosts;
/// `management` use the API for its own vhosts. Other tags are kept and shown, and grant
/// nothing, as in RabbitMQ.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags(Vec<String>);

impl Tags {
    /// Tags from a list.
    #[must_use]
    pub fn new(tags: impl IntoIterator<Item = String>) -> Self {
        let mut list: Vec<String> = Vec::new();
        for tag in tags {
            let tag = tag.trim().to_owned();
            if !tag.is_empty() && !list.contains(&tag) {
                list.push(tag);
            }
        }
        Self(list)
    }

    /// Tags from RabbitMQ's comma-separated form (`"administrator,monitoring"`).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        Self::new(text.split(',').map(str::to_owned))
    }

    /// The tags.
    #[must_use]
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    fn has(&self, tag: &str) -> bool {
        self.0.iter().any(|t| t == tag)
    }

    /// `administrator`.
    #[must_use]
    pub fn is_administrator(&self) -> bool {
        self.has("administrator")
    }

    /// `administrator` or `monitoring`: may read everything.
    #[must_use]
    pub fn is_monitor(&self) -> bool {
        self.is_administrator() || self.has("monitoring")
    }

    /// `administrator` or `policymaker`: may change policies.
    #[must_use]
    pub fn is_policymaker(&self) -> bool {
        self.is_administrator() || self.has("policymaker")
    }

    /// Any of the four management tags: may use the management API at all.
    #[must_use]
    pub fn is_management(&self) -> bool {
        self.is_monitor() || self.is_policymaker() || self.has("management")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_nest_as_rabbitmq_s() {
        let admin = Tags::parse("administrator");
        assert!(admin.is_administrator() && admin.is_monitor() && admin.is_policymaker() && admin.is_management());
        let monitoring = Tags::parse("monitoring");
        assert!(!monitoring.is_administrator() && monitoring.is_monitor() && !monitoring.is_policymaker());
        assert!(monitoring.is_management());
        let policymaker = Tags::parse("policymaker");
        assert!(policymaker.is_policymaker() && !policymaker.is_monitor() && policymaker.is_management());
        let management = Tags::parse("management");
        assert!(management.is_management() && !management.is_policymaker());
        let other = Tags::parse("impersonator, custom");
        assert!(!other.is_management());
        assert_eq!(other.as_slice(), ["impersonator".to_owned(), "custom".to_owned()]);
        assert_eq!(Tags::parse("").as_slice(), [] as [String; 0]);
        assert_eq!(Tags::parse("a,a, b").as_slice(), ["a".to_owned(), "b".to_owned()]);
    }
}
