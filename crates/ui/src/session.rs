//! Server-side login sessions: a random token in an `HttpOnly`, `SameSite=Strict` cookie names
//! a session kept here, with its user, its CSRF token and its expiry. Nothing about the user is
//! in the cookie, so logging out or an expiry ends the session for good.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::RngCore;

/// The cookie's name.
pub(crate) const COOKIE: &str = "charon_session";
/// A session unused for this long ends.
const IDLE: Duration = Duration::from_secs(30 * 60);
/// A session ends this long after its login, used or not.
const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// At most this many live sessions; a login beyond it first drops the expired ones, then the
/// oldest (a flood of logins cannot grow the map without bound).
const MAX_SESSIONS: usize = 10_000;

/// One logged-in browser.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    user: String,
    csrf: String,
    started: Instant,
    used: Instant,
    /// A message for the next page (the outcome of a form), shown once.
    flash: Option<Flash>,
}

/// The outcome of a form, shown on the page it redirects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flash {
    /// Whether it reports a failure.
    pub(crate) error: bool,
    /// What to say.
    pub(crate) text: String,
}

impl Session {
    /// The user's name.
    pub(crate) fn user(&self) -> &str {
        &self.user
    }

    /// The token every form of this session carries.
    pub(crate) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether `offered` is this session's CSRF token (compared in constant time).
    pub(crate) fn csrf_matches(&self, offered: &str) -> bool {
        constant_time_eq(self.csrf.as_bytes(), offered.as_bytes())
    }

    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.used) > IDLE || now.duration_since(self.started) > LIFETIME
    }
}

/// Every live session, by token.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_token: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Starts a session for `user`; returns its token.
    pub(crate) fn start(&self, user: &str) -> String {
        let now = Instant::now();
        let token = random_token();
        let session = Session { user: user.to_owned(), csrf: random_token(), started: now, used: now, flash: None };
        let mut sessions = self.by_token.lock();
        if sessions.len() >= MAX_SESSIONS {
            sessions.retain(|_, s| !s.expired(now));
        }
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions.iter().min_by_key(|(_, s)| s.started).map(|(t, _)| t.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(token.clone(), session);
        token
    }

    /// The live session of `token`, marked as used now; an expired one is removed.
    pub(crate) fn get(&self, token: &str) -> Option<Session> {
        self.touch(token, Instant::now())
    }

    fn touch(&self, token: &str, now: Instant) -> Option<Session> {
        let mut sessions = self.by_token.lock();
        let session = sessions.get_mut(token)?;
        if session.expired(now) {
            sessions.remove(token);
            return None;
        }
        session.used = now;
        Some(session.clone())
    }

    /// Ends the session of `token`.
    pub(crate) fn end(&self, token: &str) {
        self.by_token.lock().remove(token);
    }

    /// Leaves `flash` for the next page of the session `token`.
    pub(crate) fn set_flash(&self, token: &str, flash: Flash) {
        if let Some(session) = self.by_token.lock().get_mut(token) {
            session.flash = Some(flash);
        }
    }

    /// Takes the message left for this page, if any.
    pub(crate) fn take_flash(&self, token: &str) -> Option<Flash> {
        self.by_token.lock().get_mut(token).and_then(|s| s.flash.take())
    }
}

/// 32 random bytes from the thread's CSPRNG (ChaCha, seeded by the OS), in hex.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().fold(String::with_capacity(64), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// Equality whose time depends only on the lengths, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The value of the session cookie in a `Cookie` header.
pub(crate) fn token_in(cookie_header: &str) -> Option<&str> {
    cookie_header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` value that gives the browser `token` (`Secure` when served over HTTPS, so the
/// browser never sends it over plain HTTP).
pub(crate) fn set_cookie(token: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}", LIFETIME.as_secs())
}

/// The `Set-Cookie` value that removes it.
pub(crate) fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_long() {
        let sessions = Sessions::default();
        let (a, b) = (sessions.start("guest"), sessions.start("guest"));
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        let session = sessions.get(&a).unwrap();
        assert_eq!(session.user(), "guest");
        assert_ne!(session.csrf(), sessions.get(&b).unwrap().csrf());
    }

    #[test]
    fn idle_and_old_sessions_expire_and_logout_ends_one() {
        let sessions = Sessions::default();
        let token = sessions.start("guest");
        let now = Instant::now();
        assert!(sessions.touch(&token, now + IDLE - Duration::from_secs(1)).is_some());
        // Used a moment ago: the idle clock started again.
        assert!(sessions.touch(&token, now + IDLE + Duration::from_secs(10)).is_some());
        assert!(sessions.touch(&token, now + 2 * IDLE + Duration::from_secs(20)).is_none());
        assert!(sessions.get(&token).is_none(), "an expired session is gone");
        let token = sessions.start("guest");
        sessions.end(&token);
        assert!(sessions.get(&token).is_none());
    }

    #[test]
    fn the_csrf_token_must_match_exactly() {
        let sessions = Sessions::default();
        let session = sessions.get(&sessions.start("guest")).unwrap();
        let csrf = session.csrf().to_owned();
        assert!(session.csrf_matches(&csrf));
        assert!(!session.csrf_matches(""));
        assert!(!session.csrf_matches(&csrf[..63]));
        assert!(!session.csrf_matches(&csrf.replace(&csrf[..1], if &csrf[..1] == "a" { "b" } else { "a" })));
    }

    #[test]
    fn the_cookie_is_found_among_others_and_is_strict() {
        assert_eq!(token_in("a=1; charon_session=abc; b=2"), Some("abc"));
        assert_eq!(token_in("xcharon_session=abc"), None);
        let cookie = set_cookie("abc", false);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/"));
        assert!(!cookie.contains("Secure"));
        assert!(set_cookie("abc", true).ends_with("; Secure"));
    }

    #[test]
    fn a_flash_is_shown_once() {
        let sessions = Sessions::default();
        let token = sessions.start("guest");
        sessions.set_flash(&token, Flash { error: false, text: "Purged".into() });
        assert_eq!(sessions.take_flash(&token).unwrap().text, "Purged");
        assert!(sessions.take_flash(&token).is_none());
    }
}
