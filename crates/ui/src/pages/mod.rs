//! The pages, one module per tab (the dead-letter browser and redrive jobs have their own).

pub(crate) mod admin;
pub(crate) mod admin_access;
pub(crate) mod browser;
pub(crate) mod connections;
pub(crate) mod dead_letters;
pub(crate) mod exchanges;
pub(crate) mod listing;
pub(crate) mod login;
pub(crate) mod overview;
pub(crate) mod queues;
pub(crate) mod redrives;
