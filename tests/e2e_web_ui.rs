//! The web UI (issue 20) in a real browser: headless Chromium driven through chromedriver
//! (WebDriver), against the real `charon` binary: log-in (and a refused password), the queues
//! page with live numbers, a dead-letter queue holding messages that died for three reasons
//! (rejected, expired, maxlen, produced with lapin), its browser, a redrive dry run, a
//! rate-limited redrive with visible progress, pause and resume, and the messages back in the
//! queues they died in; and the Admin tab: an administrator adds a user and a virtual host and
//! grants permissions, then that user logs in.
//!
//! Needs `chromedriver` and `chromium` (Debian's `chromium-driver`, `chromium`; scripts/test.sh
//! installs them). Without chromedriver the tests say so and pass, unless
//! `CHARON_REQUIRE_BROWSER` is set (scripts/test.sh sets it), when they fail.
//!
//! `CHARON_SCREENSHOTS=<dir>` also writes screenshots of the main pages there
//! (scripts/screenshots.sh: docs/screenshots/).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]

mod support;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, BasicRejectOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};

/// Messages that die for each reason.
const PER_REASON: usize = 10;

/// chromedriver with one headless Chromium session; both end when dropped.
struct Browser {
    client: Client,
    driver: Child,
    base: String,
    screenshots: Option<PathBuf>,
}

impl Browser {
    /// Starts chromedriver and a session, or `None` (after saying why) when there is no
    /// chromedriver and no one requires it.
    async fn start(charon: &support::Charon) -> Option<Self> {
        let Some(chromedriver) = find("chromedriver") else {
            if std::env::var_os("CHARON_REQUIRE_BROWSER").is_some() {
                panic!("chromedriver is not installed and CHARON_REQUIRE_BROWSER is set");
            }
            eprintln!("SKIPPED: chromedriver is not installed (apt-get install chromium chromium-driver)");
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // Its own process group: dropping the test kills chromedriver and the Chromium it started
        // (killing chromedriver alone leaves the browser running).
        let driver = Command::new(chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut options = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1360,1000", "--hide-scrollbars", "--force-device-scale-factor=1"]
        });
        if let Some(chromium) = find("chromium") {
            options["binary"] = json!(chromium);
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session");
        let screenshots = std::env::var_os("CHARON_SCREENSHOTS").map(PathBuf::from);
        Some(Self { client, driver, base: format!("http://127.0.0.1:{}", charon.http_port), screenshots })
    }

    async fn goto(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.base)).await.expect("navigate");
    }

    async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// Waits until the page's path (with its query) satisfies `ok`: a click that submits a form
    /// or follows a link returns before the browser has navigated.
    async fn wait_path(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let path = self.path().await;
            if ok(&path) {
                return path;
            }
            assert!(Instant::now() < deadline, "never reached {what} (at {path})");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The text of `css` (read again when the page's script reloaded the page meanwhile).
    async fn text(&self, css: &str) -> String {
        for _ in 0..20 {
            if let Ok(element) = self.client.find(Locator::Css(css)).await
                && let Ok(text) = element.text().await
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{css} not found on {}", self.path().await);
    }

    async fn texts(&self, css: &str) -> Vec<String> {
        'again: for _ in 0..20 {
            let mut texts = Vec::new();
            for element in self.client.find_all(Locator::Css(css)).await.unwrap() {
                let Ok(text) = element.text().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'again;
                };
                texts.push(text);
            }
            return texts;
        }
        panic!("{css} kept changing");
    }

    async fn fill(&self, css: &str, value: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        element.clear().await.unwrap();
        element.send_keys(value).await.unwrap();
    }

    async fn click(&self, css: &str) {
        self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).click().await.unwrap();
    }

    /// The flash message of the page shown now, if it has one (see [`Self::next_flash`]).
    async fn flash(&self) -> Option<fantoccini::elements::Element> {
        self.client.find(Locator::Css(".flash")).await.ok()
    }

    /// The flash message of the page a submit leads to. `old` is the flash of the page the
    /// submit started from: it must go stale first, so that it is never read as the answer.
    async fn next_flash(&self, old: Option<fantoccini::elements::Element>) -> String {
        if let Some(old) = old {
            let deadline = Instant::now() + Duration::from_secs(30);
            while old.text().await.is_ok() {
                assert!(Instant::now() < deadline, "the page with the old flash never went away");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.wait_text(".flash", false, |t| !t.is_empty()).await
    }

    /// Clicks `button`, which submits a form, and returns the flash message of the answer.
    async fn submit(&self, button: &str) -> String {
        let old = self.flash().await;
        self.click(button).await;
        self.next_flash(old).await
    }

    /// Waits until the text of `css` satisfies `ok` (the page's script updates it, or `reload`).
    async fn wait_text(&self, css: &str, reload: bool, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(element) = self.client.find(Locator::Css(css)).await
                && let Ok(text) = element.text().await
                && ok(&text)
            {
                return text;
            }
            assert!(Instant::now() < deadline, "{css} never got the expected text");
            if reload {
                self.client.refresh().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn log_in(&self, user: &str, password: &str) {
        self.goto("/").await;
        assert!(self.path().await.starts_with("/login"), "a page without a session goes to the login");
        self.fill("input[name=username]", user).await;
        self.fill("input[name=password]", password).await;
        self.click("button[type=submit]").await;
    }

    /// Writes a screenshot of the current page when screenshots were asked for.
    async fn shot(&self, name: &str) {
        if let Some(dir) = &self.screenshots {
            std::fs::create_dir_all(dir).unwrap();
            let png = self.client.screenshot().await.unwrap();
            std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `name` on the PATH.
fn find(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| PathBuf::from(dir).join(name)).find(|p| p.is_file())
}

/// One request to the API as guest: status and JSON body.
async fn api(charon: &support::Charon, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let call = support::http::Call::api(charon.http_port, method, path);
    let reply = call.body(body.map(|b| b.to_string()).unwrap_or_default()).send().await;
    assert_ne!(reply.status, 0, "{method} {path} got no answer");
    (reply.status, reply.json())
}

async fn messages(charon: &support::Charon, queue: &str) -> u64 {
    api(charon, "GET", &format!("/api/queues/%2F/{queue}"), None).await.1["messages"].as_u64().unwrap_or(0)
}

async fn wait_messages(charon: &support::Charon, queue: &str, expected: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages(charon, queue).await != expected {
        assert!(Instant::now() < deadline, "{queue} never held {expected} (holds {})", messages(charon, queue).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn channel(charon: &support::Charon) -> (Connection, Channel) {
    let properties = ConnectionProperties::default().with_connection_name("web-ui-test".into());
    let conn = Connection::connect(&charon.url(), properties).await.expect("connect");
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm.select");
    (conn, channel)
}

async fn publish(channel: &Channel, queue: &str, body: &str, id: &str) {
    let properties = BasicProperties::default().with_message_id(id.into());
    let confirm = channel
        .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body.as_bytes(), properties)
        .await
        .unwrap();
    assert!(confirm.await.unwrap().is_ack(), "the broker confirmed {id}");
}

async fn declare(channel: &Channel, queue: &str) {
    let options = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(queue.into(), options, FieldTable::default()).await.unwrap();
}

/// `dlq` holding [`PER_REASON`] messages dead-lettered from each of `work-rejected`
/// (rejected), `work-expired` (expired) and `work-maxlen` (maxlen, one message stays there).
/// The TTL and length limit come from policies that are removed afterwards, so messages sent
/// back stay in their queues.
async fn dead_letters_for_three_reasons(charon: &support::Charon, channel: &Channel) {
    let dlx = |extra: Value| {
        let mut definition = json!({"dead-letter-exchange": "", "dead-letter-routing-key": "dlq"});
        definition.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"pattern": "", "definition": definition, "apply-to": "queues"})
    };
    for (name, queue, extra) in [
        ("dl-rejected", "work-rejected", json!({})),
        ("dl-expired", "work-expired", json!({"message-ttl": 50})),
        ("dl-maxlen", "work-maxlen", json!({"max-length": 1})),
    ] {
        let mut policy = dlx(extra);
        policy["pattern"] = json!(format!("^{queue}$"));
        assert_eq!(api(charon, "PUT", &format!("/api/policies/%2F/{name}"), Some(policy)).await.0, 201);
    }
    for queue in ["dlq", "work-rejected", "work-expired", "work-maxlen"] {
        declare(channel, queue).await;
    }
    for i in 0..PER_REASON {
        publish(channel, "work-rejected", &format!("order {i} was refused"), &format!("rejected-{i}")).await;
        publish(channel, "work-expired", &format!("order {i} timed out"), &format!("expired-{i}")).await;
    }
    for i in 0..=PER_REASON {
        publish(channel, "work-maxlen", &format!("order {i} overflowed"), &format!("maxlen-{i}")).await;
    }
    for _ in 0..PER_REASON {
        let got =
            channel.basic_get("work-rejected".into(), BasicGetOptions::default()).await.unwrap().expect("message");
        got.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    wait_messages(charon, "dlq", 3 * PER_REASON as u64).await;
    for name in ["dl-expired", "dl-maxlen"] {
        assert_eq!(api(charon, "DELETE", &format!("/api/policies/%2F/{name}"), None).await.0, 204);
    }
}

#[tokio::test]
async fn log_in_then_the_queues_page_shows_live_numbers() {
    let charon = support::Charon::start();
    let Some(browser) = Browser::start(&charon).await else { return };
    let (conn, channel) = channel(&charon).await;
    declare(&channel, "orders").await;
    for i in 0..3 {
        publish(&channel, "orders", &format!("{{\"order\":{i}}}"), &format!("o-{i}")).await;
    }

    // A wrong password is refused on the form, and no page opens.
    browser.log_in("guest", "wrong").await;
    assert_eq!(browser.text(".flash.error").await, "Login failed");
    browser.shot("login").await;
    browser.goto("/queues").await;
    browser.wait_path("/login?next=", |p| p.starts_with("/login?next=")).await;

    // The right one opens the page asked for first.
    browser.fill("input[name=username]", "guest").await;
    browser.fill("input[name=password]", "guest").await;
    browser.click("button[type=submit]").await;
    browser.wait_path("/queues", |p| p == "/queues").await;
    assert_eq!(browser.text("nav.tabs a.active").await, "Queues and Streams");
    let row = "#queues tr[data-key='/\u{1f}orders']";
    assert_eq!(browser.text(&format!("{row} td:nth-child(2)")).await, "orders");
    assert_eq!(browser.text(&format!("{row} td[data-ptr='/messages']")).await, "3");

    // Two more messages: the script's polling shows them without a reload.
    publish(&channel, "orders", "{\"order\":3}", "o-3").await;
    publish(&channel, "orders", "{\"order\":4}", "o-4").await;
    browser.wait_text(&format!("{row} td[data-ptr='/messages']"), false, |t| t == "5").await;
    browser.shot("queues").await;

    // One queue: its numbers and the arguments; purge asks, then empties it.
    browser.click(&format!("{row} td:nth-child(2) a")).await;
    browser.wait_path("/queues/%2F/orders", |p| p == "/queues/%2F/orders").await;
    assert_eq!(browser.text("section[data-src] .card span[data-ptr='/messages']").await, "5");
    browser.shot("queue").await;
    browser.click("form[action$='/purge'] button").await;
    browser.client.accept_alert().await.unwrap();
    assert_eq!(browser.wait_text(".flash.ok", false, |t| !t.is_empty()).await, "Queue orders purged");
    assert_eq!(messages(&charon, "orders").await, 0);

    browser.goto("/").await;
    assert_eq!(browser.text("#alarms").await, "No alarms in effect");
    browser.shot("overview").await;
    for (path, name) in [("/connections", "connections"), ("/channels", "channels"), ("/exchanges", "exchanges")] {
        browser.goto(path).await;
        browser.shot(name).await;
    }
    // Closing the test's own connection from the Connections tab.
    browser.goto("/connections").await;
    assert!(browser.text("#connections tbody").await.contains("web-ui-test"));
    browser.click("#connections form[action='/connections/close'] button").await;
    browser.client.accept_alert().await.unwrap();
    assert!(browser.wait_text(".flash.ok", false, |t| !t.is_empty()).await.ends_with("closed"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while conn.status().connected() {
        assert!(Instant::now() < deadline, "the connection was not closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    browser.goto("/connections").await;
    assert_eq!(browser.text("#connections tbody").await, "No connections");
    let _ = browser.client.clone().close().await;
}

/// The dead-letter pages, the dry run, a rate-limited redrive paused and resumed: the redrive
/// API (`/api/charon/...`) must be in this build.
#[tokio::test]
async fn a_dead_letter_queue_is_browsed_and_redriven_from_the_browser() {
    let charon = support::Charon::start();
    let Some(browser) = Browser::start(&charon).await else { return };
    if api(&charon, "GET", "/api/charon/redrives/%2F", None).await.0 == 404 {
        if std::env::var_os("CHARON_REQUIRE_BROWSER").is_some() {
            panic!("the redrive API (/api/charon/redrives) is not in this build");
        }
        eprintln!("SKIPPED: the redrive API (/api/charon/redrives) is not in this build");
        return;
    }
    let (_conn, channel) = channel(&charon).await;
    dead_letters_for_three_reasons(&charon, &channel).await;
    browser.log_in("guest", "guest").await;

    // A message that never died, put straight into the DLQ: deleted from the browser below.
    publish(&channel, "dlq", "not a dead letter", "junk").await;
    wait_messages(&charon, "dlq", 3 * PER_REASON as u64 + 1).await;

    // The overview and the Dead letters tab count the deaths by reason, per queue they died in.
    assert_eq!(browser.text("#dead-by-reason tr[data-reason=rejected] td:nth-child(2)").await, "10");
    assert_eq!(browser.text("#dead-by-reason tr[data-reason=maxlen] td:nth-child(2)").await, "10");
    browser.shot("overview-dead-letters").await;
    browser.goto("/dead-letters").await;
    for reason in ["rejected", "expired", "maxlen"] {
        let cell = format!("table.dead-letters tr[data-key=work-{reason}] td[data-ptr='/dead_lettered/{reason}']");
        assert_eq!(browser.text(&cell).await, PER_REASON.to_string(), "{reason}");
    }
    let dlq = "table.dead-letters tr[data-key=dlq]";
    assert_eq!(browser.text(&format!("{dlq} td[data-ptr='/messages']")).await, "31");
    browser.shot("dead-letters").await;

    // The browser: a page of messages, each with its death history; the reason filter.
    browser.click(&format!("{dlq} td:first-child a")).await;
    browser.wait_path("/dead-letters/%2F/dlq", |p| p == "/dead-letters/%2F/dlq").await;
    assert_eq!(browser.client.find_all(Locator::Css("article.message")).await.unwrap().len(), 20, "one page");
    browser.shot("dead-letter-browser").await;
    let filter = |reason: &'static str, message_id: &'static str, expected: usize| {
        let browser = &browser;
        async move {
            let select = browser.client.find(Locator::Css("select[name=reason]")).await.unwrap();
            select.select_by_value(reason).await.unwrap();
            browser.fill("input[name=message_id]", message_id).await;
            browser.click("form.filter button[type=submit]").await;
            let deadline = Instant::now() + Duration::from_secs(20);
            while !browser.path().await.contains(&format!("reason={reason}&"))
                || browser.client.find_all(Locator::Css("article.message")).await.unwrap().len() != expected
            {
                assert!(Instant::now() < deadline, "{reason}/{message_id}: not {expected} messages");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    for reason in ["rejected", "expired", "maxlen"] {
        filter(reason, "", PER_REASON).await;
        let reasons = browser.texts("table.deaths tbody td:first-child").await;
        assert!(reasons.iter().all(|r| r == reason), "{reason}: {reasons:?}");
        let queues = browser.texts("table.deaths tbody td:nth-child(2)").await;
        assert!(queues.iter().all(|q| *q == format!("work-{reason}")), "{queues:?}");
    }

    // Delete selected: the message that never died.
    filter("", "junk", 1).await;
    assert_eq!(browser.text("article.message .payload pre").await, "not a dead letter");
    browser.click("article.message input[name=ids]").await;
    let old = browser.flash().await;
    browser.click("button[formaction$='/delete']").await;
    browser.client.accept_alert().await.unwrap();
    assert_eq!(browser.next_flash(old).await, "Deleted 1 message(s)");
    assert_eq!(messages(&charon, "dlq").await, 3 * PER_REASON as u64);

    // Move selected: one maxlen death back to the queue it died in (the form's default).
    filter("maxlen", "", PER_REASON).await;
    browser.click("article.message input[name=ids]").await;
    assert_eq!(browser.submit("button[formaction$='/move']").await, "Moved 1 message(s), 0 failed");
    assert_eq!(messages(&charon, "dlq").await, 3 * PER_REASON as u64 - 1);
    assert_eq!(messages(&charon, "work-maxlen").await, 2);

    // A dry run counts by reason and source and moves nothing.
    browser.goto("/redrives?vhost=%2F&source=dlq").await;
    assert_eq!(
        browser
            .client
            .find(Locator::Css("input[name=dry_run]"))
            .await
            .unwrap()
            .prop("checked")
            .await
            .unwrap()
            .as_deref(),
        Some("true")
    );
    browser.shot("redrive-form").await;
    browser.click("form.redrive button[type=submit]").await;
    browser.wait_path("/redrives/%2F/", |p| p.starts_with("/redrives/%2F/")).await;
    browser.wait_text("#job-state", true, |s| s == "completed").await;
    assert_eq!(browser.text("#dry-run-total strong").await, "29");
    for (reason, count) in [("rejected", "10"), ("expired", "10"), ("maxlen", "9")] {
        assert_eq!(browser.text(&format!("#dry-run-by-reason tr[data-key={reason}] td.num")).await, count);
        assert_eq!(browser.text(&format!("#dry-run-by-source tr[data-key=work-{reason}] td.num")).await, count);
    }
    browser.shot("redrive-dry-run").await;
    assert_eq!(messages(&charon, "dlq").await, 29, "a dry run moves nothing");

    // A redrive at 5 messages/s to the queues they died in: progress shows while it runs.
    browser.goto("/redrives?vhost=%2F&source=dlq").await;
    browser.click("input[name=dry_run]").await;
    browser.fill("input[name=rate]", "5").await;
    browser.click("form.redrive button[type=submit]").await;
    assert_eq!(browser.text("#job-state").await, "running");
    let moved =
        browser.wait_text("#progress-moved", false, |t| t.parse::<u64>().is_ok_and(|n| (1..30).contains(&n))).await;
    let bar = browser.client.find(Locator::Css(".job .progress")).await.unwrap();
    let percent: u64 = bar.attr("aria-valuenow").await.unwrap().unwrap().parse().unwrap();
    assert!((1..100).contains(&percent), "the bar shows {percent}% after {moved} moved");
    browser.shot("redrive-running").await;

    // Pause: nothing moves while paused; resume: it finishes.
    browser.click("#job-pause").await;
    browser.wait_text("#job-state", false, |s| s == "paused").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let paused_at = messages(&charon, "dlq").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(messages(&charon, "dlq").await, paused_at, "a paused job moves nothing");
    assert!(paused_at > 0, "paused before the end");
    browser.client.refresh().await.unwrap();
    assert_eq!(browser.text("#job-state").await, "paused");
    browser.shot("redrive-paused").await;
    browser.click("#job-resume").await;
    browser.wait_text(".flash.ok", false, |t| t.ends_with("resume done")).await;
    browser.wait_text("#job-state", false, |s| s == "completed").await;
    assert_eq!(browser.text("#progress-moved").await, "29");
    assert_eq!(browser.text(".job .progress .label").await, "100%");
    browser.shot("redrive-completed").await;

    // Every message is back in the queue it died in.
    assert_eq!(messages(&charon, "dlq").await, 0);
    assert_eq!(messages(&charon, "work-rejected").await, PER_REASON as u64);
    assert_eq!(messages(&charon, "work-expired").await, PER_REASON as u64);
    assert_eq!(messages(&charon, "work-maxlen").await, PER_REASON as u64 + 1);
    let got = channel.basic_get("work-expired".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
    assert!(String::from_utf8_lossy(&got.data).ends_with("timed out"));
    let _ = browser.client.clone().close().await;
}

/// The Admin tab's forms: a user with tags and a password, a virtual host, permissions in it;
/// then the new user logs in, sees its vhost's queue, and gets none of the administrator's forms.
#[tokio::test]
async fn an_administrator_adds_a_user_and_a_vhost_grants_permissions_and_the_user_logs_in() {
    let charon = support::Charon::start();
    let Some(browser) = Browser::start(&charon).await else { return };
    browser.log_in("guest", "guest").await;
    browser.wait_path("/", |p| p == "/").await;
    browser.goto("/admin").await;

    browser.fill("#add-user input[name=name]", "ops").await;
    browser.fill("#add-user input[name=password]", "s3cret-pw").await;
    browser.fill("#add-user input[name=password_confirm]", "s3cret-pw").await;
    browser.fill("#add-user input[name=tags]", "management").await;
    assert_eq!(browser.submit("#add-user button[type=submit]").await, "User ops saved");
    let (status, user) = api(&charon, "GET", "/api/users/ops", None).await;
    assert_eq!((status, user["tags"].clone()), (200, json!(["management"])));

    browser.fill("#add-vhost input[name=name]", "shop").await;
    browser.fill("#add-vhost input[name=description]", "The shop's messages").await;
    assert_eq!(browser.submit("#add-vhost button[type=submit]").await, "Virtual host shop saved");
    assert_eq!(api(&charon, "GET", "/api/vhosts/shop", None).await.1["description"], "The shop's messages");

    browser
        .client
        .find(Locator::Css("#set-permission select[name=user]"))
        .await
        .unwrap()
        .select_by_value("ops")
        .await
        .unwrap();
    browser
        .client
        .find(Locator::Css("#set-permission select[name=vhost]"))
        .await
        .unwrap()
        .select_by_value("shop")
        .await
        .unwrap();
    browser.fill("#set-permission input[name=configure]", "^ops-.*").await;
    browser.fill("#set-permission input[name=read]", ".*").await;
    assert_eq!(browser.submit("#set-permission button[type=submit]").await, "Permissions of ops in shop set");
    let (status, permission) = api(&charon, "GET", "/api/permissions/shop/ops", None).await;
    assert_eq!(status, 200);
    assert_eq!((permission["configure"].clone(), permission["write"].clone()), (json!("^ops-.*"), json!(".*")));
    let rows = browser.texts("#permissions tbody tr").await;
    assert!(rows.iter().any(|r| r.starts_with("ops") && r.contains("shop") && r.contains("^ops-.*")), "{rows:?}");
    // The page from its top (the form's redirect scrolled it to the permissions).
    browser.goto("/admin").await;
    browser.shot("admin").await;

    // The new user: a queue in its vhost, declared as guest (who created the vhost and so got
    // full permissions there), is on its Queues page.
    assert_eq!(api(&charon, "PUT", "/api/queues/shop/ops-orders", Some(json!({"durable": true}))).await.0, 201);
    browser.click("form[action='/logout'] button").await;
    // The click returns before the browser followed the logout's redirect: a page asked for
    // meanwhile would still carry the old session.
    browser.wait_path("the login page", |p| p.starts_with("/login")).await;
    browser.log_in("ops", "s3cret-pw").await;
    browser.wait_path("/", |p| p == "/").await;
    assert_eq!(browser.text("header .who strong").await, "ops");
    browser.goto("/queues").await;
    assert_eq!(browser.text("#queues tr[data-key='shop\u{1f}ops-orders'] td:nth-child(2)").await, "ops-orders");
    // Not an administrator: the lists it may not read say so, and no form manages access.
    browser.goto("/admin").await;
    assert!(browser.text("#users").await.contains("401"), "users are an administrator's");
    for form in ["#add-user", "#add-vhost", "#set-permission"] {
        assert!(browser.client.find_all(Locator::Css(form)).await.unwrap().is_empty(), "{form}");
    }
    let _ = browser.client.clone().close().await;
}

/// A three-node cluster's overview, on node 1: every node with its state and resources, and an
/// alarm of another node named as blocking publishers; node 3 killed shows as down.
#[tokio::test]
async fn the_overview_of_a_cluster_lists_every_node_and_another_nodes_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "UICLUSTERCOOKIE").unwrap();
    let peers: Vec<String> = (1..=3)
        .flat_map(|n| ["--cluster-peer".to_owned(), format!("charon-{n}@localhost=127.0.0.1:{}", 25930 + n)])
        .collect();
    let mut nodes: Vec<support::Charon> = (1..=3)
        .map(|n| {
            let mut args = vec![
                "--node-name".to_owned(),
                format!("charon-{n}@localhost"),
                "--cluster-listen".to_owned(),
                format!("127.0.0.1:{}", 25930 + n),
                "--cluster-secret-file".to_owned(),
                secret.display().to_string(),
            ];
            args.extend(peers.iter().cloned());
            // Node 2 runs above its memory watermark: in alarm from its start.
            if n == 2 {
                args.extend(["--vm-memory-high-watermark-absolute".to_owned(), "1MB".to_owned()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            support::Charon::start_on(&dir.path().join(format!("node-{n}")), &args)
        })
        .collect();
    let Some(browser) = Browser::start(&nodes[0]).await else { return };
    browser.log_in("guest", "guest").await;
    browser.wait_path("/", |p| p == "/").await;
    let alarm = browser.wait_text("#alarms", true, |t| t.contains("charon-2@localhost")).await;
    assert_eq!(alarm, "Memory alarm on node charon-2@localhost. Publishers are blocked.");
    let deadline = Instant::now() + Duration::from_secs(20);
    while browser.texts("#nodes tbody td:nth-child(2)").await != ["running", "running", "running"] {
        assert!(Instant::now() < deadline, "not every node shown running");
        tokio::time::sleep(Duration::from_millis(200)).await;
        browser.goto("/").await;
    }
    assert_eq!(
        browser.texts("#nodes tbody td:first-child").await,
        ["charon-1@localhost", "charon-2@localhost", "charon-3@localhost"]
    );
    let memory = browser.texts("#nodes tbody td:nth-child(3)").await;
    assert!(memory.iter().all(|m| m.contains(" limit")), "{memory:?}");
    browser.client.execute("document.querySelector('#alarms').scrollIntoView()", vec![]).await.unwrap();
    browser.shot("overview-cluster").await;

    nodes[2].kill9();
    let deadline = Instant::now() + Duration::from_secs(20);
    while browser.texts("#nodes tbody td:nth-child(2)").await != ["running", "running", "down"] {
        assert!(Instant::now() < deadline, "node 3 not shown down");
        tokio::time::sleep(Duration::from_millis(200)).await;
        browser.goto("/").await;
    }
    assert_eq!(browser.text("#nodes tr[data-node='charon-3@localhost'] td:nth-child(3)").await, "–");
}
