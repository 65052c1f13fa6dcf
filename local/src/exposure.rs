//! What keeps the sandbox a sandbox, and what lets a checkout on another origin use it:
//!
//! - It listens on loopback and talks to local emulators unless told otherwise, and it refuses
//!   to be told otherwise (a non-loopback address, or AWS endpoints) without both
//!   `--allow-remote` and a JWT secret of the operator's own: its default secret is printed in
//!   the banner, so anyone could mint tokens with it.
//! - It answers only requests whose `Host` names loopback (unless `--allow-remote`), so a web
//!   page elsewhere cannot reach it through DNS rebinding.
//! - CORS as the template configures API Gateway: origins listed with `--allowed-origin` (or
//!   `PAYONCE_LOCAL_ALLOWED_ORIGINS`) may send `Authorization`, `Content-Type` and
//!   `Idempotency-Key` and read `Retry-After`, `Idempotent-Replayed` and `x-request-id`;
//!   no credentials (the API takes bearer tokens, not cookies), never `*`.
//! - The demo page is served with a Content-Security-Policy that allows its own inline code by
//!   hash and nothing else inline.

use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use sha2::{Digest, Sha256};

/// The request headers a checkout may send across origins.
pub const ALLOWED_HEADERS: &str = "authorization, content-type, idempotency-key";
/// The response headers a checkout on another origin may read.
pub const EXPOSED_HEADERS: &str = "retry-after, idempotent-replayed, x-request-id";
/// The methods of the API.
pub const ALLOWED_METHODS: &str = "GET, POST, PATCH";
/// How long a browser may cache a preflight, in seconds.
pub const MAX_AGE_S: u32 = 600;

/// Whether `host` (a name or address, without a port) is loopback.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host part of a `Host` header or URL authority (`127.0.0.1:3000`, `[::1]:3000`).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

/// Whether an endpoint option (`aws`, or a URL) points off this machine.
fn is_remote_endpoint(endpoint: &str) -> bool {
    if endpoint == "aws" {
        return true;
    }
    let authority = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or("");
    !is_loopback(host_of(authority))
}

/// Refuses a sandbox that would be reachable from elsewhere, or would use real AWS, unless the
/// operator said so (`allow_remote`) and chose a JWT secret of their own.
pub fn check(
    host: &str,
    endpoints: &[Option<&str>],
    allow_remote: bool,
    default_jwt_secret: bool,
) -> Result<(), String> {
    let mut reasons = Vec::new();
    if !is_loopback(host) {
        reasons.push(format!("it would listen on {host}, not loopback"));
    }
    for endpoint in endpoints.iter().flatten() {
        if is_remote_endpoint(endpoint) {
            reasons.push(format!("it would use {endpoint}, not a local emulator"));
        }
    }
    if reasons.is_empty() {
        return Ok(());
    }
    let why = reasons.join(" and ");
    match (allow_remote, default_jwt_secret) {
        (true, false) => Ok(()),
        (false, _) => Err(format!(
            "the sandbox refuses to start: {why}. It is a development server that mints tokens; \
             pass --allow-remote with a PAYONCE_LOCAL_JWT_SECRET of your own if you mean it"
        )),
        (true, true) => Err(format!(
            "the sandbox refuses to start: {why}, with the default JWT secret that anyone can \
             read in its banner; set PAYONCE_LOCAL_JWT_SECRET"
        )),
    }
}

/// Whether a request's `Host` may be answered: loopback names only, unless remote access was
/// allowed. A request without one is refused.
pub fn host_allowed(headers: &HeaderMap, allow_remote: bool) -> bool {
    if allow_remote {
        return true;
    }
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|authority| is_loopback(host_of(authority)))
}

/// The origins allowed to call the API from a browser.
#[derive(Debug, Clone, Default)]
pub struct Cors {
    origins: Vec<String>,
}

impl Cors {
    /// Allows exactly `origins` (`scheme://host[:port]`, no path, never `*`).
    pub fn new(origins: Vec<String>) -> Result<Self, String> {
        for origin in &origins {
            let shaped = origin.split_once("://").is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains('/')
            });
            if !shaped {
                return Err(format!(
                    "--allowed-origin {origin:?} is not an origin: give scheme://host[:port], \
                     never * (each origin is listed on its own)"
                ));
            }
        }
        Ok(Self { origins })
    }

    /// The request's `Origin`, if it is one of ours.
    fn allowed<'h>(&self, headers: &'h HeaderMap) -> Option<&'h HeaderValue> {
        headers.get(header::ORIGIN).filter(|origin| {
            self.origins
                .iter()
                .any(|o| o.as_bytes() == origin.as_bytes())
        })
    }

    /// The answer to a CORS preflight (`OPTIONS` with `Access-Control-Request-Method`), if the
    /// request is one: 204, with the CORS headers only for an allowed origin (a browser then
    /// refuses the real request for any other).
    pub fn preflight(&self, method: &Method, headers: &HeaderMap) -> Option<Response> {
        if method != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
        {
            return None;
        }
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::NO_CONTENT;
        if let Some(origin) = self.allowed(headers) {
            let out = response.headers_mut();
            out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            out.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(ALLOWED_METHODS),
            );
            out.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static(ALLOWED_HEADERS),
            );
            out.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(MAX_AGE_S));
            out.insert(header::VARY, HeaderValue::from_static("origin"));
        }
        Some(response)
    }

    /// Adds the CORS headers of an actual request from an allowed origin to its response.
    pub fn decorate(&self, request: &HeaderMap, response: &mut Response) {
        if let Some(origin) = self.allowed(request) {
            let out = response.headers_mut();
            out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            out.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSED_HEADERS),
            );
            out.append(header::VARY, HeaderValue::from_static("origin"));
        }
    }
}

/// The demo page's Content-Security-Policy: its inline `<script>` and `<style>` blocks allowed by
/// their SHA-256, scripts otherwise only from the sandbox itself, API calls to the sandbox or
/// another loopback port (a checkout served by a second sandbox), nothing framed, no forms.
pub fn page_csp(page: &str) -> String {
    let hashes = |tag: &str| -> String {
        inline_blocks(page, tag)
            .map(|body| {
                use base64::Engine as _;
                let digest = Sha256::digest(body.as_bytes());
                format!(
                    " 'sha256-{}'",
                    base64::engine::general_purpose::STANDARD.encode(digest)
                )
            })
            .collect()
    };
    format!(
        "default-src 'none'; script-src 'self'{}; style-src{}; connect-src 'self' \
         http://127.0.0.1:* http://localhost:*; img-src 'self' data:; base-uri 'none'; \
         form-action 'none'; frame-ancestors 'none'",
        hashes("script"),
        hashes("style"),
    )
}

/// The text inside each `<tag …>…</tag>` of `page`.
fn inline_blocks<'p>(page: &'p str, tag: &str) -> impl Iterator<Item = &'p str> + 'p {
    let open = format!("<{tag}");
    let close = format!("</{tag}>");
    let mut rest = page;
    std::iter::from_fn(move || {
        let start = rest.find(&open)?;
        let after_open = &rest[start..];
        let body_start = after_open.find('>')? + 1;
        let body = &after_open[body_start..];
        let end = body.find(&close)?;
        rest = &body[end + close.len()..];
        Some(&body[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_local_emulators_start_without_being_told() {
        assert_eq!(check("127.0.0.1", &[None, None], false, true), Ok(()));
        assert_eq!(
            check(
                "localhost",
                &[Some("http://127.0.0.1:8000"), Some("http://localhost:5000")],
                false,
                true
            ),
            Ok(())
        );
        for (host, endpoints) in [
            ("0.0.0.0", [None, None]),
            ("192.168.1.4", [None, None]),
            ("127.0.0.1", [Some("aws"), None]),
            (
                "127.0.0.1",
                [None, Some("https://sqs.us-east-1.amazonaws.com")],
            ),
        ] {
            let refused = check(host, &endpoints, false, false).unwrap_err();
            assert!(refused.contains("--allow-remote"), "{refused}");
            let default_secret = check(host, &endpoints, true, true).unwrap_err();
            assert!(
                default_secret.contains("PAYONCE_LOCAL_JWT_SECRET"),
                "{default_secret}"
            );
            assert_eq!(check(host, &endpoints, true, false), Ok(()));
        }
    }

    #[test]
    fn only_loopback_hosts_are_answered() {
        let with_host = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            headers
        };
        for host in [
            "127.0.0.1:3000",
            "localhost:3000",
            "[::1]:3000",
            "localhost",
        ] {
            assert!(host_allowed(&with_host(host), false), "{host}");
        }
        for host in [
            "evil.example:3000",
            "127.0.0.1.evil.example",
            "10.0.0.1:3000",
        ] {
            assert!(!host_allowed(&with_host(host), false), "{host}");
            assert!(host_allowed(&with_host(host), true), "{host}");
        }
        assert!(!host_allowed(&HeaderMap::new(), false));
    }

    #[test]
    fn cors_answers_listed_origins_only_and_never_a_wildcard() {
        assert!(Cors::new(vec!["*".into()]).is_err());
        assert!(Cors::new(vec!["http://127.0.0.1:4000/".into()]).is_err());
        let cors = Cors::new(vec!["http://127.0.0.1:4000".into()]).unwrap();
        let preflight = |origin: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            headers.insert(
                header::ACCESS_CONTROL_REQUEST_METHOD,
                HeaderValue::from_static("POST"),
            );
            cors.preflight(&Method::OPTIONS, &headers).unwrap()
        };
        let allowed = preflight("http://127.0.0.1:4000");
        assert_eq!(allowed.status(), StatusCode::NO_CONTENT);
        let h = allowed.headers();
        assert_eq!(
            h[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "http://127.0.0.1:4000"
        );
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_HEADERS], ALLOWED_HEADERS);
        assert!(!h.contains_key(header::ACCESS_CONTROL_ALLOW_CREDENTIALS));
        let refused = preflight("http://127.0.0.1:4001");
        assert!(!refused
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert!(cors.preflight(&Method::POST, &HeaderMap::new()).is_none());
    }

    #[test]
    fn the_page_policy_allows_its_inline_blocks_by_hash() {
        let page = "<style>b{}</style><script type=\"module\">go()</script>";
        let csp = page_csp(page);
        use base64::Engine as _;
        let hash = |s: &str| {
            base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s.as_bytes()))
        };
        assert!(
            csp.contains(&format!("script-src 'self' 'sha256-{}'", hash("go()"))),
            "{csp}"
        );
        assert!(
            csp.contains(&format!("style-src 'sha256-{}'", hash("b{}"))),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        // The real page has one of each.
        let real = page_csp(crate::sandbox_page());
        assert_eq!(real.matches("'sha256-").count(), 2, "{real}");
    }
}
