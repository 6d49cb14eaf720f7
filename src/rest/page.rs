//! Pagination of the list endpoints (`pageToken`, `pageSize`; the spec's `PageToken`
//! schema and `page-size` parameter).
//!
//! Results are listed in name order. A token is the last name of the page it ends,
//! base64url-encoded, so the next page starts after that name whatever was created or
//! dropped meanwhile. As the spec asks: without `pageToken` every result comes in one
//! response with `next-page-token: null`; with it (empty for the first page) at most
//! `pageSize` results come, and `next-page-token` is `null` on the last page.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::RestError;

/// A list request's paging parameters, validated.
#[derive(Debug, Default)]
pub(crate) struct PageRequest {
    /// `pageSize`: at most this many results (≥ 1).
    size: Option<usize>,
    /// `pageToken`: `None` when absent (no paging), `Some(None)` for the first page,
    /// `Some(Some(name))` to start after `name`.
    after: Option<Option<String>>,
}

/// One page of results and the token of the next one.
#[derive(Debug)]
pub(crate) struct Page<T> {
    /// The results of this page.
    pub(crate) items: Vec<T>,
    /// The token of the next page; `None` (`null`) on the last page.
    pub(crate) next: Option<String>,
}

impl PageRequest {
    /// Reads `pageSize` and `pageToken` from a URL query.
    ///
    /// # Errors
    /// [`RestError::BadRequest`] for a `pageSize` that is not an integer ≥ 1 (the spec's
    /// `minimum: 1`) or a `pageToken` this server did not issue.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, RestError> {
        let size = match super::query_param(query, "pageSize") {
            None => None,
            Some(raw) => match raw.parse::<usize>() {
                Ok(size) if size >= 1 => Some(size),
                _ => {
                    return Err(RestError::bad(format!(
                        "pageSize {raw:?} is not an integer of at least 1"
                    )));
                }
            },
        };
        let after = match super::query_param(query, "pageToken") {
            None => None,
            Some(token) if token.is_empty() => Some(None),
            Some(token) => {
                let name = URL_SAFE_NO_PAD
                    .decode(token.as_bytes())
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| {
                        RestError::bad(format!("pageToken {token:?} was not issued by this server"))
                    })?;
                Some(Some(name))
            }
        };
        Ok(Self { size, after })
    }

    /// The page of `items` (in any order) this request asks for; `key` is each item's
    /// sort and token key.
    pub(crate) fn page<T>(&self, mut items: Vec<T>, key: impl Fn(&T) -> String) -> Page<T> {
        items.sort_by_key(&key);
        let Some(after) = &self.after else {
            return Page { items, next: None };
        };
        if let Some(after) = after {
            items.retain(|item| key(item).as_str() > after.as_str());
        }
        let next = match self.size {
            Some(size) if items.len() > size => {
                items.truncate(size);
                items.last().map(|last| URL_SAFE_NO_PAD.encode(key(last)))
            }
            _ => None,
        };
        Page { items, next }
    }
}

#[cfg(test)]
mod tests {
    use super::PageRequest;

    fn names(query: &str, items: &[&str]) -> (Vec<String>, Option<String>) {
        let page = PageRequest::parse(Some(query))
            .unwrap()
            .page(items.iter().map(|s| s.to_string()).collect(), Clone::clone);
        (page.items, page.next)
    }

    // Catches a page that repeats or skips a name between two requests.
    #[test]
    fn pages_walk_every_name_once_in_order() {
        let all = ["d", "a", "c", "b", "e"];
        let (first, next) = names("pageSize=2&pageToken=", &all);
        assert_eq!(first, ["a", "b"]);
        let (second, next) = names(&format!("pageSize=2&pageToken={}", next.unwrap()), &all);
        assert_eq!(second, ["c", "d"]);
        let (last, next) = names(&format!("pageSize=2&pageToken={}", next.unwrap()), &all);
        assert_eq!((last, next), (vec!["e".to_string()], None));
        // Without pageToken: everything, whatever pageSize says (the spec's PageToken).
        assert_eq!(names("pageSize=2", &all).0.len(), 5);
    }

    // Catches `pageSize=0` and `pageSize=-5` being served (the spec's `minimum: 1`).
    #[test]
    fn bad_sizes_and_tokens_are_refused() {
        for query in [
            "pageSize=0",
            "pageSize=-5",
            "pageSize=x",
            "pageToken=%21%21",
        ] {
            assert!(PageRequest::parse(Some(query)).is_err(), "{query}");
        }
    }
}
