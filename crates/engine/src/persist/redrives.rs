//! Redrive job records through the metadata writer, ordered with every other change.

use charon_store::redrives::StoredRedrive;

use super::{MetaDone, Persistence};

impl Persistence {
    /// Records (or replaces) a redrive job's record.
    pub(crate) fn save_redrive(&self, vhost: &str, id: &str, record: Vec<u8>) -> MetaDone {
        let job = StoredRedrive { vhost: vhost.to_owned(), id: id.to_owned(), record };
        self.submit(move |meta| meta.put_redrive(&job))
    }

    /// Forgets a redrive job.
    pub(crate) fn forget_redrive(&self, vhost: &str, id: &str) -> MetaDone {
        let (vhost, id) = (vhost.to_owned(), id.to_owned());
        self.submit(move |meta| meta.delete_redrive(&vhost, &id))
    }
}
