//! What the `dlx.policy.*` cases share: the policy pattern that matches exactly one queue.

/// `^name$` for a generated name (letters, digits and dashes only).
pub(super) fn exact(name: &str) -> String {
    format!("^{name}$")
}
