use super::*;

fn seed() -> Seed {
    let admin = Account::new("admin".into(), Some(PasswordHash::new("pw")), Tags::parse("administrator"));
    let app = Account::new("app".into(), Some(PasswordHash::new("s3cret")), Tags::default());
    Seed {
        users: vec![(admin, None), (app, Some(vec!["dev".into(), "missing".into()]))],
        vhosts: vec!["/".into(), "dev".into()],
    }
}

#[test]
fn the_seed_grants_full_permissions_on_existing_vhosts_only() {
    let access = Access::in_memory(seed());
    let admin = access.authenticate("admin", "pw").unwrap();
    assert!(admin.tags().is_administrator());
    assert!(access.authenticate("admin", "wrong").is_none());
    assert!(access.authenticate("nobody", "pw").is_none());
    let app = access.authenticate("app", "s3cret").unwrap();
    assert!(access.can_open(&admin, "/") && access.can_open(&admin, "dev"));
    assert!(access.can_open(&app, "dev") && !access.can_open(&app, "/") && !access.can_open(&app, "missing"));
    let entries: Vec<(String, String)> = access.permissions().into_iter().map(|(v, u, _)| (v, u)).collect();
    assert_eq!(entries, [("/".into(), "admin".into()), ("dev".into(), "admin".into()), ("dev".into(), "app".into())]);
}

#[tokio::test]
async fn checks_follow_the_patterns_and_name_the_default_exchange_as_rabbitmq() {
    let access = Access::in_memory(seed());
    let app = access.user("app").unwrap();
    access.set_permission("dev", "app", Permission::new("^app-", "amq.default", "^app-").unwrap()).await.unwrap();
    let before = access.generation();
    assert!(access.authorize(&app, Action::Configure, &Resource::queue("dev", "app-1")).is_ok());
    let refused = access.authorize(&app, Action::Configure, &Resource::queue("dev", "other")).unwrap_err();
    assert_eq!(refused.to_string(), "configure access to queue 'other' in vhost 'dev' refused for user 'app'");
    assert_eq!(refused.kind(), crate::error::ErrorKind::AccessRefused);
    assert!(access.authorize(&app, Action::Write, &Resource::exchange("dev", "")).is_ok(), "'' is amq.default");
    let refused = access.authorize(&app, Action::Write, &Resource::exchange("/", "")).unwrap_err();
    assert_eq!(refused.to_string(), "write access to exchange 'amq.default' in vhost '/' refused for user 'app'");
    access.clear_permission("dev", "app").await.unwrap();
    assert!(access.generation() > before);
    assert!(!access.can_open(&app, "dev"));
    assert!(access.authorize(&app, Action::Read, &Resource::queue("dev", "app-1")).is_err());
}

#[tokio::test]
async fn changes_name_existing_users_and_vhosts_and_deletes_cascade() {
    let access = Access::in_memory(seed());
    let full = Permission::full;
    assert_eq!(access.set_permission("nope", "app", full()).await, Err(AccessError::NoSuchVhost("nope".into())));
    assert_eq!(access.set_permission("/", "ghost", full()).await, Err(AccessError::NoSuchUser("ghost".into())));
    assert_eq!(access.delete_user("ghost").await, Err(AccessError::NoSuchUser("ghost".into())));
    assert!(!access.clear_permission("/", "app").await.unwrap(), "had none");
    access.put_vhost("tmp", VhostInfo::default()).await.unwrap();
    access.set_permission("tmp", "app", full()).await.unwrap();
    access.delete_vhost("tmp").await.unwrap();
    assert!(!access.has_vhost("tmp"));
    assert!(!access.can_open(&access.user("app").unwrap(), "tmp"));
    access.delete_user("app").await.unwrap();
    assert!(access.user("app").is_none() && access.account("app").is_none());
    assert_eq!(access.permissions().len(), 2);
}

#[tokio::test]
async fn the_store_is_seeded_once_and_then_wins() {
    let dir = tempfile::tempdir().unwrap();
    let open_store = || {
        let meta = charon_store::meta::MetaStore::open(&dir.path().join("meta.redb")).unwrap();
        let log = charon_store::segment_log::MessageLog::open(
            &dir.path().join("log"),
            charon_store::segment_log::LogOptions::default(),
        )
        .unwrap()
        .0;
        Persistence::new(log, meta)
    };
    {
        let access = Access::open(open_store(), seed()).unwrap();
        access.delete_user("app").await.unwrap();
        access
            .put_user(Account::new("new".into(), Some(PasswordHash::new("n")), Tags::parse("monitoring")))
            .await
            .unwrap();
        access.set_permission("dev", "new", Permission::new("", "^w", "^r").unwrap()).await.unwrap();
    }
    let other_seed = Seed { users: vec![], vhosts: vec!["ignored".into()] };
    let access = Access::open(open_store(), other_seed).unwrap();
    assert!(access.user("app").is_none(), "deleted, not re-seeded");
    let new = access.authenticate("new", "n").unwrap();
    assert!(new.tags().is_monitor());
    assert!(access.authorize(&new, Action::Write, &Resource::exchange("dev", "w1")).is_ok());
    assert!(access.authorize(&new, Action::Configure, &Resource::queue("dev", "w1")).is_err());
    assert!(!access.has_vhost("ignored"));
    assert!(access.authenticate("admin", "pw").is_some());
}
