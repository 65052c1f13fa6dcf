//! Matching a request to a route by method and path, the same way in Lambda (behind API
//! Gateway's routes) and in the local sandbox (which has no API Gateway).

use lambda_http::http::Method;
use lambda_http::{Request, RequestExt};

/// The longest id payonce accepts, in a path or a body.
pub const MAX_ID_LEN: usize = 64;

/// Whether `id` has the shape of every id payonce issues or accepts: 1 to [`MAX_ID_LEN`]
/// characters of `A-Z a-z 0-9 _ -`. Anything else names nothing payonce holds, and never
/// reaches a store (where an oversized key would be an error, not "not found").
pub fn is_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A request's method and path segments.
#[derive(Debug)]
pub struct Route<'a> {
    /// The HTTP method.
    pub method: &'a Method,
    segments: Vec<&'a str>,
}

impl<'a> Route<'a> {
    /// The route of `request` (the raw path, so stages and mappings do not matter).
    pub fn of(request: &'a Request) -> Self {
        let path = request.raw_http_path();
        let path = if path.is_empty() {
            request.uri().path()
        } else {
            path
        };
        Self {
            method: request.method(),
            segments: path.split('/').filter(|s| !s.is_empty()).collect(),
        }
    }

    /// Whether the path is exactly `literal` (e.g. `["payments"]`).
    pub fn is(&self, literal: &[&str]) -> bool {
        self.segments == literal
    }

    /// The middle segment when the path is `prefix` + one segment + `suffix`
    /// (`/payments/{id}/refunds`) and that segment is an id ([`is_id`]): a path naming a
    /// malformed or oversized id matches no route, so it is a 404.
    pub fn param_between(&self, prefix: &[&str], suffix: &[&str]) -> Option<&'a str> {
        let n = prefix.len();
        (self.segments.len() == n + 1 + suffix.len()
            && self.segments[..n] == *prefix
            && self.segments[n + 1..] == *suffix
            && is_id(self.segments[n]))
        .then(|| self.segments[n])
    }

    /// The last segment when the path is `prefix` + one more segment (`/payments/{id}`) and
    /// that segment is an id ([`is_id`]).
    pub fn param_after(&self, prefix: &[&str]) -> Option<&'a str> {
        self.param_between(prefix, &[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_of(method: &str, path: &str) -> (Method, Vec<String>) {
        (
            method.parse().unwrap(),
            path.split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    fn matches(path: &str, prefix: &[&str], suffix: &[&str]) -> Option<String> {
        let (method, segments) = route_of("GET", path);
        let route = Route {
            method: &method,
            segments: segments.iter().map(String::as_str).collect(),
        };
        route.param_between(prefix, suffix).map(str::to_owned)
    }

    #[test]
    fn a_path_id_matches_only_when_it_is_an_id() {
        let id = "pay_0123456789abcdef0123456789abcdef";
        assert_eq!(
            matches(&format!("/payments/{id}"), &["payments"], &[]),
            Some(id.into())
        );
        assert_eq!(
            matches(
                &format!("/payments/{id}/refunds"),
                &["payments"],
                &["refunds"]
            ),
            Some(id.into())
        );
        let longest = "a".repeat(MAX_ID_LEN);
        assert_eq!(
            matches(&format!("/orders/{longest}"), &["orders"], &[]),
            Some(longest.clone())
        );
        for bad in [
            "a".repeat(MAX_ID_LEN + 1),
            "a".repeat(5000),
            "pay%2F1".into(),
            "pay.1".into(),
            "ord_1'--".into(),
            "ﾟ".into(),
        ] {
            assert_eq!(
                matches(&format!("/orders/{bad}"), &["orders"], &[]),
                None,
                "{bad}"
            );
            assert_eq!(
                matches(
                    &format!("/payments/{bad}/refunds"),
                    &["payments"],
                    &["refunds"]
                ),
                None,
                "{bad}"
            );
        }
    }
}
