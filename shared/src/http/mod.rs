//! The HTTP edge shared by every API function: problem+json, identity from the verified
//! JWT, request limits and JSON parsing. Every error a client sees is mapped here, once.

#[cfg(feature = "payments")]
pub mod errors;

/// The API's OpenAPI 3.1 document as committed (`docs/openapi.json`); tests hold it to the route
/// table, the template and the code. A deployment serves [`openapi_document`].
#[cfg(feature = "payments")]
pub const OPENAPI_DOCUMENT: &str = include_str!("../../../docs/openapi.json");

/// The committed `payment_method.pattern`: every token shape some PSP accepts.
#[cfg(feature = "payments")]
const ANY_PSP_PAYMENT_METHOD: &str = "\"pattern\": \"^[A-Za-z0-9+/=_.:-]{4,2048}$\"";

/// The document a deployment on `psp` serves at `/openapi.json` (orders function, sandbox): the
/// committed one with `payment_method.pattern` narrowed to that PSP's token shape
/// ([`crate::domain::PspKind::payment_method_pattern`]), so a schema-valid token is one the
/// deployment takes. Everything else is the committed text, byte for byte.
#[cfg(feature = "payments")]
pub fn openapi_document(psp: crate::domain::PspKind) -> String {
    debug_assert_eq!(OPENAPI_DOCUMENT.matches(ANY_PSP_PAYMENT_METHOD).count(), 1);
    OPENAPI_DOCUMENT.replacen(
        ANY_PSP_PAYMENT_METHOD,
        &format!(
            "\"pattern\": {}",
            serde_json::Value::from(psp.payment_method_pattern())
        ),
        1,
    )
}
pub mod problem;
pub mod request;
#[cfg(feature = "payments")]
pub mod routing;

#[cfg(feature = "payments")]
pub use errors::{operation_response, payment_response, refund_response};
pub use problem::{Problem, ProblemType};
pub use request::{
    authenticated_user, deadline_ms, has_scope, idempotency_key, json_response, parse_json_body,
    request_id, return_url_allowed, with_request_id, MAX_BODY_BYTES, MAX_RETURN_URL_LEN,
};
#[cfg(feature = "payments")]
pub use routing::{
    is_id, match_route, not_this_function, operation_of, Access, ApiRoute, Operation, RouteMatch,
    Server, MAX_ID_LEN, ROUTES,
};
