//! Where the console is mounted, and the links between its pages.

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::StatusCode;
use axum::http::request::Parts;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a URL's segment or query value escapes: all but the unreserved
/// characters, so that a key's `/` stays inside its segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` as one URL segment or query value.
fn escape(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// Where the console is mounted (`/ops`), from the request's full path and
/// the path the router saw, so that links work under any prefix: the
/// prefix of every link, and the overview's own path as the request
/// reached it (`/ops`, or `/ops/` for a router nested at `/ops/`).
///
/// The prefix goes into links and into the cookie's `Path`, so it may hold
/// only what a path segment holds unescaped (letters, digits, `-._~`,
/// `%XX`) and `/`: a mount under any other text is refused, with why.
pub(super) struct Base {
    pub(super) path: String,
    home: String,
}

impl<T: Send + Sync> FromRequestParts<T> for Base {
    type Rejection = (StatusCode, String);

    async fn from_request_parts(parts: &mut Parts, state: &T) -> Result<Self, Self::Rejection> {
        let seen = parts.uri.path().to_owned();
        let full = match OriginalUri::from_request_parts(parts, state).await {
            Ok(OriginalUri(uri)) => uri.path().to_owned(),
            Err(never) => match never {},
        };
        let refuse = |why: String| (StatusCode::INTERNAL_SERVER_ERROR, why);
        let (path, home) = match seen.as_str() {
            "/" => (full.trim_end_matches('/').to_owned(), full.clone()),
            _ => match full.strip_suffix(seen.as_str()) {
                Some(path) => (path.to_owned(), path.to_owned()),
                None => {
                    return Err(refuse(format!(
                        "the console cannot tell where it is mounted: `{full}` does not end in \
                         `{seen}`"
                    )));
                }
            },
        };
        let plain = |c: char| c.is_ascii_alphanumeric() || "-._~%/".contains(c);
        if !path.chars().all(plain) || path.contains("//") {
            return Err(refuse(format!(
                "the console is mounted under `{path}`, which its links and cookie cannot \
                 carry: mount it under letters, digits and `-._~/`"
            )));
        }
        let home = match home.as_str() {
            "" => "/".to_owned(),
            _ => home,
        };
        Ok(Base { path, home })
    }
}

impl Base {
    fn machine(&self, machine: &str) -> String {
        format!("{}/{}", self.path, escape(machine))
    }

    pub(super) fn state(&self, machine: &str, state: &str) -> String {
        format!("{}/states/{}", self.machine(machine), escape(state))
    }

    /// A state's page of the rows after the key whose text is `key`.
    pub(super) fn state_after(&self, machine: &str, state: &str, key: &str) -> String {
        format!("{}?after={}", self.state(machine, state), escape(key))
    }

    pub(super) fn row(&self, machine: &str, key: &str) -> String {
        format!("{}/rows/{}", self.machine(machine), escape(key))
    }

    /// A row's page after a press moved it to the state whose variant is
    /// `to`, which the page says above the row.
    pub(super) fn row_moved(&self, machine: &str, key: &str, to: &str) -> String {
        format!("{}?moved={}", self.row(machine, key), escape(to))
    }

    /// The overview after the dead letter `id` was requeued, which the
    /// page says above the rest.
    pub(super) fn requeued(&self, id: &str) -> String {
        format!("{}?requeued={}", self.home, escape(id))
    }

    /// The overview: the mount path as the router takes it (`/ops`, which
    /// axum routes to a router nested at `/ops`), or `/` at the root.
    pub(super) fn home(&self) -> String {
        self.home.clone()
    }
}
