//! Matching a request to a route by method and path, the same way in Lambda (behind API
//! Gateway's routes) and in the local sandbox (which has no API Gateway).

use lambda_http::http::Method;
use lambda_http::{Request, RequestExt};

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
    /// (`/payments/{id}/refunds`).
    pub fn param_between(&self, prefix: &[&str], suffix: &[&str]) -> Option<&'a str> {
        let n = prefix.len();
        (self.segments.len() == n + 1 + suffix.len()
            && self.segments[..n] == *prefix
            && self.segments[n + 1..] == *suffix)
            .then(|| self.segments[n])
    }

    /// The last segment when the path is `prefix` + one more segment (`/payments/{id}`).
    pub fn param_after(&self, prefix: &[&str]) -> Option<&'a str> {
        (self.segments.len() == prefix.len() + 1 && self.segments[..prefix.len()] == *prefix)
            .then(|| self.segments[prefix.len()])
    }
}
