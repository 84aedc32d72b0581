//! Durable users, virtual hosts and permissions, in the metadata store's redb file.
//!
//! They live beside the topology so that one file holds everything a broker must remember
//! about itself. Each change is one committed transaction; deleting a user or a vhost takes
//! its permissions with it in the same transaction, so a crash never leaves a permission that
//! names nothing. The `seeded` flag records that the configuration file's users and vhosts
//! were written once: later starts take the store's word, as RabbitMQ seeds its default user
//! only into an empty database.

use bytes::{BufMut, BytesMut};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::meta::{MetaError, MetaStore, Reader, Row, db_error, key, put_str};

const USERS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("users");
const VHOSTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("vhosts");
const PERMISSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("permissions");
const TOPIC_PERMISSIONS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("topic_permissions");
const FLAGS: TableDefinition<&str, u8> = TableDefinition::new("flags");

/// The flag set once the configuration's users and vhosts were written.
const SEEDED: &str = "seeded";

/// A durable user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredUser {
    /// Login name.
    pub name: String,
    /// The password hashing algorithm, by RabbitMQ's module name
    /// (`rabbit_password_hashing_sha256`, ...).
    pub hashing_algorithm: String,
    /// Salt followed by the digest; empty for a user without a password.
    pub password_hash: Vec<u8>,
    /// Tags (`administrator`, `monitoring`, ...), in the order given.
    pub tags: Vec<String>,
}

/// A durable virtual host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredVhost {
    /// Name.
    pub name: String,
    /// Free text shown by the management API.
    pub description: String,
    /// Tags shown by the management API.
    pub tags: Vec<String>,
}

/// A user's permissions in one vhost: three regular expressions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredPermission {
    /// The vhost.
    pub vhost: String,
    /// The user.
    pub user: String,
    /// Which resources the user may declare and delete.
    pub configure: String,
    /// Which resources the user may publish to (and bind to).
    pub write: String,
    /// Which resources the user may consume from (and bind from).
    pub read: String,
}

/// A user's topic permissions on one topic exchange of a vhost: routing-key patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTopicPermission {
    /// The vhost.
    pub vhost: String,
    /// The user.
    pub user: String,
    /// The topic exchange.
    pub exchange: String,
    /// Routing keys the user may publish with.
    pub write: String,
    /// Binding keys the user may bind (consume) with.
    pub read: String,
}

/// Everything stored about access, as read at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessSnapshot {
    /// Whether the configuration's users and vhosts were written before.
    pub seeded: bool,
    /// Users.
    pub users: Vec<StoredUser>,
    /// Virtual hosts.
    pub vhosts: Vec<StoredVhost>,
    /// Permissions.
    pub permissions: Vec<StoredPermission>,
    /// Topic permissions.
    pub topic_permissions: Vec<StoredTopicPermission>,
}

/// The access tables of a [`MetaStore`].
#[derive(Debug)]
pub struct AccessStore<'a> {
    meta: &'a MetaStore,
}

type Tables<'t> = [redb::Table<'t, &'static [u8], &'static [u8]>; 4];

impl MetaStore {
    /// The users, vhosts and permissions tables.
    #[must_use]
    pub fn access(&self) -> AccessStore<'_> {
        AccessStore { meta: self }
    }
}

impl AccessStore<'_> {
    /// Creates the tables (at open).
    pub(crate) fn create_tables(&self) -> Result<(), MetaError> {
        self.write("create access tables", |_| Ok(()))
    }

    /// One committed write transaction with users, vhosts, permissions and topic permissions
    /// open.
    fn write(
        &self,
        what: &'static str,
        change: impl FnOnce(&mut Tables<'_>) -> Result<(), redb::Error>,
    ) -> Result<(), MetaError> {
        let txn = self.meta.db.begin_write().map_err(|e| db_error(what)(e.into()))?;
        {
            let open = |def| txn.open_table(def).map_err(|e| db_error(what)(e.into()));
            let mut tables = [open(USERS)?, open(VHOSTS)?, open(PERMISSIONS)?, open(TOPIC_PERMISSIONS)?];
            txn.open_table(FLAGS).map_err(|e| db_error(what)(e.into()))?;
            change(&mut tables).map_err(db_error(what))?;
        }
        txn.commit().map_err(|e| db_error(what)(e.into()))
    }

    /// Writes the configuration's users, vhosts and permissions and sets the `seeded` flag, in
    /// one transaction: a crash leaves either nothing or all of it.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn seed(
        &self,
        users: &[StoredUser],
        vhosts: &[StoredVhost],
        permissions: &[StoredPermission],
    ) -> Result<(), MetaError> {
        let what = "seed users and vhosts";
        let txn = self.meta.db.begin_write().map_err(|e| db_error(what)(e.into()))?;
        {
            let open = |def| txn.open_table(def).map_err(|e| db_error(what)(e.into()));
            let [mut user_table, mut vhost_table, mut permission_table] =
                [open(USERS)?, open(VHOSTS)?, open(PERMISSIONS)?];
            let mut flags = txn.open_table(FLAGS).map_err(|e| db_error(what)(e.into()))?;
            let mut insert = || -> Result<(), redb::Error> {
                for user in users {
                    user_table.insert(key(&[&user.name]).as_slice(), encode_user(user).as_ref())?;
                }
                for vhost in vhosts {
                    vhost_table.insert(key(&[&vhost.name]).as_slice(), encode_vhost(vhost).as_ref())?;
                }
                for permission in permissions {
                    let k = key(&[&permission.vhost, &permission.user]);
                    permission_table.insert(k.as_slice(), encode_permission(permission).as_ref())?;
                }
                flags.insert(SEEDED, 1)?;
                Ok(())
            };
            insert().map_err(db_error(what))?;
        }
        txn.commit().map_err(|e| db_error(what)(e.into()))
    }

    /// Records (or replaces) a user.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_user(&self, user: &StoredUser) -> Result<(), MetaError> {
        let (k, value) = (key(&[&user.name]), encode_user(user));
        self.write("put user", |[users, ..]| users.insert(k.as_slice(), value.as_ref()).map(drop).map_err(Into::into))
    }

    /// Forgets a user and its permissions in every vhost.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_user(&self, name: &str) -> Result<(), MetaError> {
        let k = key(&[name]);
        self.write("delete user", |[users, _, permissions, topics]| {
            users.remove(k.as_slice())?;
            remove_permissions(permissions, |p| p.user == name)?;
            remove_topic_permissions(topics, |p| p.user == name)
        })
    }

    /// Records (or replaces) a vhost.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_vhost(&self, vhost: &StoredVhost) -> Result<(), MetaError> {
        let (k, value) = (key(&[&vhost.name]), encode_vhost(vhost));
        self.write("put vhost", |[_, vhosts, ..]| {
            vhosts.insert(k.as_slice(), value.as_ref()).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a vhost and every user's permissions in it (its topology is deleted through the
    /// topology's own records).
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_vhost(&self, name: &str) -> Result<(), MetaError> {
        let k = key(&[name]);
        self.write("delete vhost", |[_, vhosts, permissions, topics]| {
            vhosts.remove(k.as_slice())?;
            remove_permissions(permissions, |p| p.vhost == name)?;
            remove_topic_permissions(topics, |p| p.vhost == name)
        })
    }

    /// Records (or replaces) a user's permissions in a vhost.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_permission(&self, permission: &StoredPermission) -> Result<(), MetaError> {
        let (k, value) = (key(&[&permission.vhost, &permission.user]), encode_permission(permission));
        self.write("put permission", |[_, _, permissions, _]| {
            permissions.insert(k.as_slice(), value.as_ref()).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a user's permissions in a vhost.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_permission(&self, vhost: &str, user: &str) -> Result<(), MetaError> {
        let k = key(&[vhost, user]);
        self.write("delete permission", |[_, _, permissions, _]| {
            permissions.remove(k.as_slice()).map(drop).map_err(Into::into)
        })
    }

    /// Records (or replaces) a user's topic permissions on an exchange of a vhost.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn put_topic_permission(&self, permission: &StoredTopicPermission) -> Result<(), MetaError> {
        let k = key(&[&permission.vhost, &permission.user, &permission.exchange]);
        let value = encode_topic_permission(permission);
        self.write("put topic permission", |[.., topics]| {
            topics.insert(k.as_slice(), value.as_ref()).map(drop).map_err(Into::into)
        })
    }

    /// Forgets a user's topic permissions in a vhost: on one exchange, or all.
    ///
    /// # Errors
    /// When the commit fails.
    pub fn delete_topic_permissions(&self, vhost: &str, user: &str, exchange: Option<&str>) -> Result<(), MetaError> {
        self.write("delete topic permissions", |[.., topics]| {
            remove_topic_permissions(topics, |p| {
                p.vhost == vhost && p.user == user && exchange.is_none_or(|x| x == p.exchange)
            })
        })
    }

    /// Reads everything.
    ///
    /// # Errors
    /// When redb fails or a record does not decode.
    pub fn load(&self) -> Result<AccessSnapshot, MetaError> {
        let read_error = |e: redb::Error| db_error("read access")(e);
        let txn = self.meta.db.begin_read().map_err(|e| read_error(e.into()))?;
        let rows = |def: TableDefinition<&[u8], &[u8]>| -> Result<Vec<Row>, MetaError> {
            let table = txn.open_table(def).map_err(|e| read_error(e.into()))?;
            let mut out = Vec::new();
            for row in table.iter().map_err(|e| read_error(e.into()))? {
                let (k, v) = row.map_err(|e| read_error(e.into()))?;
                out.push((k.value().to_vec(), v.value().to_vec()));
            }
            Ok(out)
        };
        let flags = txn.open_table(FLAGS).map_err(|e| read_error(e.into()))?;
        let seeded = flags.get(SEEDED).map_err(|e| read_error(e.into()))?.is_some();
        let mut snapshot = AccessSnapshot { seeded, ..AccessSnapshot::default() };
        for (_, v) in rows(USERS)? {
            snapshot.users.push(decode_user(&v)?);
        }
        for (_, v) in rows(VHOSTS)? {
            snapshot.vhosts.push(decode_vhost(&v)?);
        }
        for (_, v) in rows(PERMISSIONS)? {
            snapshot.permissions.push(decode_permission(&v)?);
        }
        for (_, v) in rows(TOPIC_PERMISSIONS)? {
            snapshot.topic_permissions.push(decode_topic_permission(&v)?);
        }
        Ok(snapshot)
    }
}

fn put_list(out: &mut BytesMut, items: &[String]) {
    out.put_u32_le(u32::try_from(items.len()).unwrap_or(u32::MAX));
    for item in items {
        put_str(out, item);
    }
}

fn list(reader: &mut Reader) -> Result<Vec<String>, MetaError> {
    let count = u32::from_le_bytes([reader.u8()?, reader.u8()?, reader.u8()?, reader.u8()?]);
    (0..count).map(|_| reader.string()).collect()
}

fn encode_user(user: &StoredUser) -> BytesMut {
    let mut out = BytesMut::new();
    put_str(&mut out, &user.name);
    put_str(&mut out, &user.hashing_algorithm);
    out.put_u32_le(u32::try_from(user.password_hash.len()).unwrap_or(u32::MAX));
    out.put_slice(&user.password_hash);
    put_list(&mut out, &user.tags);
    out
}

fn decode_user(raw: &[u8]) -> Result<StoredUser, MetaError> {
    let mut reader = Reader::new(raw, "users");
    let (name, hashing_algorithm) = (reader.string()?, reader.string()?);
    let len = u32::from_le_bytes([reader.u8()?, reader.u8()?, reader.u8()?, reader.u8()?]);
    let password_hash = (0..len).map(|_| reader.u8()).collect::<Result<Vec<u8>, _>>()?;
    let tags = list(&mut reader)?;
    Ok(StoredUser { name, hashing_algorithm, password_hash, tags })
}

fn encode_vhost(vhost: &StoredVhost) -> BytesMut {
    let mut out = BytesMut::new();
    put_str(&mut out, &vhost.name);
    put_str(&mut out, &vhost.description);
    put_list(&mut out, &vhost.tags);
    out
}

fn decode_vhost(raw: &[u8]) -> Result<StoredVhost, MetaError> {
    let mut reader = Reader::new(raw, "vhosts");
    Ok(StoredVhost { name: reader.string()?, description: reader.string()?, tags: list(&mut reader)? })
}

fn encode_permission(permission: &StoredPermission) -> BytesMut {
    let mut out = BytesMut::new();
    for part in [&permission.vhost, &permission.user, &permission.configure, &permission.write, &permission.read] {
        put_str(&mut out, part);
    }
    out
}

fn decode_permission(raw: &[u8]) -> Result<StoredPermission, MetaError> {
    let mut reader = Reader::new(raw, "permissions");
    Ok(StoredPermission {
        vhost: reader.string()?,
        user: reader.string()?,
        configure: reader.string()?,
        write: reader.string()?,
        read: reader.string()?,
    })
}

fn encode_topic_permission(permission: &StoredTopicPermission) -> BytesMut {
    let mut out = BytesMut::new();
    for part in [&permission.vhost, &permission.user, &permission.exchange, &permission.write, &permission.read] {
        put_str(&mut out, part);
    }
    out
}

fn decode_topic_permission(raw: &[u8]) -> Result<StoredTopicPermission, MetaError> {
    let mut reader = Reader::new(raw, "topic_permissions");
    Ok(StoredTopicPermission {
        vhost: reader.string()?,
        user: reader.string()?,
        exchange: reader.string()?,
        write: reader.string()?,
        read: reader.string()?,
    })
}

/// Removes the topic permissions `doomed` selects.
fn remove_topic_permissions(
    topics: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    doomed: impl Fn(&StoredTopicPermission) -> bool,
) -> Result<(), redb::Error> {
    let mut keys = Vec::new();
    for row in topics.iter()? {
        let (k, v) = row?;
        if decode_topic_permission(v.value()).is_ok_and(|p| doomed(&p)) {
            keys.push(k.value().to_vec());
        }
    }
    for k in keys {
        topics.remove(k.as_slice())?;
    }
    Ok(())
}

/// Removes the permissions `doomed` selects.
fn remove_permissions(
    permissions: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    doomed: impl Fn(&StoredPermission) -> bool,
) -> Result<(), redb::Error> {
    let mut keys = Vec::new();
    for row in permissions.iter()? {
        let (k, v) = row?;
        if decode_permission(v.value()).is_ok_and(|p| doomed(&p)) {
            keys.push(k.value().to_vec());
        }
    }
    for k in keys {
        permissions.remove(k.as_slice())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn user(name: &str, tags: &[&str]) -> StoredUser {
        StoredUser {
            name: name.into(),
            hashing_algorithm: "rabbit_password_hashing_sha256".into(),
            password_hash: vec![1, 2, 3, 4, 0xff],
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    fn permission(vhost: &str, user: &str) -> StoredPermission {
        StoredPermission {
            vhost: vhost.into(),
            user: user.into(),
            configure: "^$".into(),
            write: ".*".into(),
            read: "^q-".into(),
        }
    }

    fn vhost(name: &str) -> StoredVhost {
        StoredVhost { name: name.into(), description: "test \u{e9}".into(), tags: vec!["a".into(), "b".into()] }
    }

    #[test]
    fn seeding_writes_everything_once_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        {
            let store = MetaStore::open(&path).unwrap();
            assert_eq!(store.access().load().unwrap(), AccessSnapshot::default());
            store
                .access()
                .seed(&[user("guest", &["administrator"])], &[vhost("/")], &[permission("/", "guest")])
                .unwrap();
        }
        let store = MetaStore::open(&path).unwrap();
        let snapshot = store.access().load().unwrap();
        assert!(snapshot.seeded);
        assert_eq!(snapshot.users, vec![user("guest", &["administrator"])]);
        assert_eq!(snapshot.vhosts, vec![vhost("/")]);
        assert_eq!(snapshot.permissions, vec![permission("/", "guest")]);
    }

    #[test]
    fn deleting_a_user_or_a_vhost_takes_its_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let store = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let access = store.access();
        for name in ["a", "b"] {
            access.put_user(&user(name, &[])).unwrap();
        }
        for name in ["v1", "v2"] {
            access.put_vhost(&vhost(name)).unwrap();
        }
        for (v, u) in [("v1", "a"), ("v1", "b"), ("v2", "a"), ("v2", "b")] {
            access.put_permission(&permission(v, u)).unwrap();
        }
        let topic = |v: &str, u: &str, x: &str| StoredTopicPermission {
            vhost: v.into(),
            user: u.into(),
            exchange: x.into(),
            write: "^w".into(),
            read: "^r".into(),
        };
        for (v, u, x) in [("v1", "a", "t"), ("v2", "b", "t"), ("v2", "b", "u")] {
            access.put_topic_permission(&topic(v, u, x)).unwrap();
        }
        access.delete_topic_permissions("v2", "b", Some("u")).unwrap();
        access.delete_user("a").unwrap();
        assert_eq!(access.load().unwrap().topic_permissions, vec![topic("v2", "b", "t")]);
        let left: Vec<(String, String)> =
            access.load().unwrap().permissions.into_iter().map(|p| (p.vhost, p.user)).collect();
        assert_eq!(left, [("v1".to_owned(), "b".to_owned()), ("v2".to_owned(), "b".to_owned())]);
        access.delete_vhost("v1").unwrap();
        let snapshot = access.load().unwrap();
        assert_eq!(snapshot.permissions, vec![permission("v2", "b")]);
        assert_eq!(snapshot.vhosts, vec![vhost("v2")]);
        assert_eq!(snapshot.users, vec![user("b", &[])]);
        assert!(!snapshot.seeded, "only seed() sets the flag");
        access.delete_permission("v2", "b").unwrap();
        assert!(access.load().unwrap().permissions.is_empty());
        access.delete_vhost("v2").unwrap();
        assert!(access.load().unwrap().topic_permissions.is_empty(), "went with vhost v2");
    }
}
