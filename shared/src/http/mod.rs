//! The HTTP edge shared by every API function: problem+json, identity from the verified
//! JWT, request limits and JSON parsing. Every error a client sees is mapped here, once.

#[cfg(feature = "payments")]
pub mod errors;

/// The API's OpenAPI 3.1 document (`docs/openapi.json`), served at `/openapi.json` by the orders
/// function and the sandbox; tests hold it to the route table, the template and the code.
#[cfg(feature = "payments")]
pub const OPENAPI_DOCUMENT: &str = include_str!("../../../docs/openapi.json");
pub mod problem;
pub mod request;
#[cfg(feature = "payments")]
pub mod routing;

#[cfg(feature = "payments")]
pub use errors::{payment_response, refund_response};
pub use problem::{Problem, ProblemType};
pub use request::{
    authenticated_user, deadline_ms, has_scope, idempotency_key, json_response, parse_json_body,
    request_id, with_request_id, MAX_BODY_BYTES,
};
#[cfg(feature = "payments")]
pub use routing::{
    is_id, match_route, not_this_function, operation_of, Access, ApiRoute, Operation, RouteMatch,
    Server, MAX_ID_LEN, ROUTES,
};
