//! Matching a request to a route by method and path, the same way in Lambda (behind API
//! Gateway's routes) and in the local sandbox (which has no API Gateway).

use super::problem::{Problem, ProblemType};
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

/// Who may call a route: what API Gateway's authorizer (or the sandbox, playing it) checks
/// before the function runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A verified bearer JWT (API Gateway's JWT authorizer).
    Bearer,
    /// A verified bearer JWT whose `scope` claim holds this OAuth scope (`AuthorizationScopes`).
    BearerWithScope(&'static str),
    /// No authorizer: the function verifies the payment provider's signature on the body.
    Signed,
    /// Anyone: read-only documents and the sandbox's own development endpoints.
    Public,
}

/// Who serves a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// API Gateway, with a function behind it (and the sandbox, which plays both).
    Api,
    /// Only the local sandbox (`payonce-local`): its page, its development endpoints and the
    /// API's documentation.
    Sandbox,
}

/// Every operation of payonce's HTTP surface; its `operationId` in `docs/openapi.json` is
/// [`Operation::id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `POST /orders` (orders function).
    CreateOrder,
    /// `GET /orders/{order_id}` (orders function).
    GetOrder,
    /// `PATCH /orders/{order_id}` (orders function).
    ReviseOrder,
    /// `POST /payments` (charge function).
    CreatePayment,
    /// `GET /payments/{payment_id}` (charge function).
    GetPayment,
    /// `POST /payments/{payment_id}/refunds` (refund function).
    CreateRefund,
    /// `POST /payments/{payment_id}/capture` (refund function).
    CapturePayment,
    /// `POST /payments/{payment_id}/cancel` (refund function).
    CancelPayment,
    /// `POST /webhooks/{provider}` (webhook receiver).
    ReceiveWebhook,
    /// `GET /openapi.json`: the API document (orders function; the sandbox serves it too).
    GetOpenApi,
    /// `GET /problems/{slug}`: what a problem `type` means (orders function; the sandbox too).
    GetProblem,
    /// `GET /`: the demo checkout page (sandbox).
    GetCheckoutPage,
    /// `GET /index.html`: the same page (sandbox).
    GetCheckoutIndex,
    /// `GET /payonce-keys.js`: the browser key manager (sandbox).
    GetKeyManager,
    /// `GET /_sandbox/health` (sandbox).
    GetSandboxHealth,
    /// `GET /_sandbox/config`: the PSP and its test tokens, for the demo page (sandbox).
    GetSandboxConfig,
    /// `GET /_sandbox/token`: a development token (sandbox).
    GetSandboxToken,
    /// `GET /_sandbox/dynamodb-usage`: DynamoDB requests and capacity so far, with
    /// `--count-dynamodb` (sandbox; `scripts/load` reads it).
    GetSandboxDynamodbUsage,
}

impl Operation {
    /// Its `operationId`.
    pub fn id(self) -> &'static str {
        match self {
            Self::CreateOrder => "createOrder",
            Self::GetOrder => "getOrder",
            Self::ReviseOrder => "reviseOrder",
            Self::CreatePayment => "createPayment",
            Self::GetPayment => "getPayment",
            Self::CreateRefund => "createRefund",
            Self::CapturePayment => "capturePayment",
            Self::CancelPayment => "cancelPayment",
            Self::ReceiveWebhook => "receiveWebhook",
            Self::GetOpenApi => "getOpenApi",
            Self::GetProblem => "getProblem",
            Self::GetCheckoutPage => "getCheckoutPage",
            Self::GetCheckoutIndex => "getCheckoutIndex",
            Self::GetKeyManager => "getKeyManager",
            Self::GetSandboxHealth => "getSandboxHealth",
            Self::GetSandboxConfig => "getSandboxConfig",
            Self::GetSandboxToken => "getSandboxToken",
            Self::GetSandboxDynamodbUsage => "getSandboxDynamodbUsage",
        }
    }
}

/// One route: a method and a path template whose `{name}` segments match one path segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiRoute {
    /// The HTTP method, upper case.
    pub method: &'static str,
    /// The path template, as API Gateway and `docs/openapi.json` write it.
    pub path: &'static str,
    /// What it does.
    pub operation: Operation,
    /// Who may call it.
    pub access: Access,
    /// Who serves it.
    pub server: Server,
}

const fn api(
    method: &'static str,
    path: &'static str,
    operation: Operation,
    access: Access,
) -> ApiRoute {
    ApiRoute {
        method,
        path,
        operation,
        access,
        server: Server::Api,
    }
}

const fn sandbox(method: &'static str, path: &'static str, operation: Operation) -> ApiRoute {
    ApiRoute {
        method,
        path,
        operation,
        access: Access::Public,
        server: Server::Sandbox,
    }
}

/// The one route table: the functions dispatch on it, the sandbox routes by it as API Gateway
/// would, and tests hold `docs/openapi.json` and `infra/template.yaml` to it.
pub const ROUTES: &[ApiRoute] = &[
    api("POST", "/orders", Operation::CreateOrder, Access::Bearer),
    api(
        "GET",
        "/orders/{order_id}",
        Operation::GetOrder,
        Access::Bearer,
    ),
    api(
        "PATCH",
        "/orders/{order_id}",
        Operation::ReviseOrder,
        Access::Bearer,
    ),
    api(
        "POST",
        "/payments",
        Operation::CreatePayment,
        Access::Bearer,
    ),
    api(
        "GET",
        "/payments/{payment_id}",
        Operation::GetPayment,
        Access::Bearer,
    ),
    api(
        "POST",
        "/payments/{payment_id}/refunds",
        Operation::CreateRefund,
        Access::BearerWithScope(crate::service::REFUND_OAUTH_SCOPE),
    ),
    api(
        "POST",
        "/payments/{payment_id}/capture",
        Operation::CapturePayment,
        Access::BearerWithScope(crate::service::CAPTURE_OAUTH_SCOPE),
    ),
    api(
        "POST",
        "/payments/{payment_id}/cancel",
        Operation::CancelPayment,
        Access::Bearer,
    ),
    api(
        "POST",
        "/webhooks/{provider}",
        Operation::ReceiveWebhook,
        Access::Signed,
    ),
    api(
        "GET",
        "/openapi.json",
        Operation::GetOpenApi,
        Access::Public,
    ),
    api(
        "GET",
        "/problems/{slug}",
        Operation::GetProblem,
        Access::Public,
    ),
    sandbox("GET", "/", Operation::GetCheckoutPage),
    sandbox("GET", "/index.html", Operation::GetCheckoutIndex),
    sandbox("GET", "/payonce-keys.js", Operation::GetKeyManager),
    sandbox("GET", "/_sandbox/health", Operation::GetSandboxHealth),
    sandbox("GET", "/_sandbox/config", Operation::GetSandboxConfig),
    sandbox("GET", "/_sandbox/token", Operation::GetSandboxToken),
    sandbox(
        "GET",
        "/_sandbox/dynamodb-usage",
        Operation::GetSandboxDynamodbUsage,
    ),
];

/// A path's segments, without empty ones (`/orders/` is `/orders`).
fn segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// What a method and path match in [`ROUTES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteMatch<'p> {
    /// This route, with the path's value for the template's parameter, if it has one.
    Found {
        /// The route.
        route: &'static ApiRoute,
        /// The segment that matched the `{name}` segment.
        param: Option<&'p str>,
    },
    /// The path is a route's, with other methods only.
    OtherMethods {
        /// The methods the path takes.
        methods: Vec<&'static str>,
        /// The segment that matched the `{name}` segment.
        param: Option<&'p str>,
    },
    /// No route has this path.
    None,
}

/// Matches `method` and `path` against [`ROUTES`] as API Gateway does: literal segments
/// exactly, a `{name}` segment against any one non-empty segment.
pub fn match_route<'p>(method: &str, path: &'p str) -> RouteMatch<'p> {
    let wanted = segments(path);
    let mut methods = Vec::new();
    let mut matched_param = None;
    for route in ROUTES {
        let template = segments(route.path);
        if template.len() != wanted.len() {
            continue;
        }
        let mut param = None;
        let fits = template.iter().zip(&wanted).all(|(t, w)| {
            if t.starts_with('{') && t.ends_with('}') {
                param = Some(*w);
                true
            } else {
                t == w
            }
        });
        if !fits {
            continue;
        }
        if route.method == method {
            return RouteMatch::Found { route, param };
        }
        methods.push(route.method);
        matched_param = param;
    }
    if methods.is_empty() {
        RouteMatch::None
    } else {
        RouteMatch::OtherMethods {
            methods,
            param: matched_param,
        }
    }
}

/// The API operation a request to a function names, and the id in its path: what each
/// function dispatches on. 404 `route-not-found` when no route has the path, or when its path
/// parameter cannot be an id ([`is_id`]: such a path names nothing and never reaches a store);
/// 405 `method-not-allowed` when the path is a route's with other methods (API Gateway never
/// passes such a request on; a direct invocation can).
pub fn operation_of(request: &Request) -> Result<(Operation, Option<&str>), Problem> {
    let path = request.raw_http_path();
    let path = if path.is_empty() {
        request.uri().path()
    } else {
        path
    };
    let no_route = || Problem::new(ProblemType::RouteNotFound, "no such route");
    match match_route(request.method().as_str(), path) {
        RouteMatch::Found { param: Some(p), .. }
        | RouteMatch::OtherMethods { param: Some(p), .. }
            if !is_id(p) =>
        {
            Err(no_route())
        }
        RouteMatch::Found { route, param } => Ok((route.operation, param)),
        RouteMatch::OtherMethods { methods, .. } => Err(Problem::new(
            ProblemType::MethodNotAllowed,
            format!("this path takes {}", methods.join(", ")),
        )
        .allow(&methods)),
        RouteMatch::None => Err(no_route()),
    }
}

/// The 404 a function answers for an operation of another function (which API Gateway never
/// routes to it).
pub fn not_this_function() -> Problem {
    Problem::new(ProblemType::RouteNotFound, "no such route")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(method: &str, path: &str) -> Option<(Operation, Option<String>)> {
        match match_route(method, path) {
            RouteMatch::Found { route, param } => Some((route.operation, param.map(str::to_owned))),
            _ => None,
        }
    }

    fn request(method: &str, path: &str) -> Request {
        let mut request = Request::new(lambda_http::Body::Empty);
        *request.method_mut() = method.parse().unwrap();
        *request.uri_mut() = format!("https://api.example.com{path}").parse().unwrap();
        request
    }

    #[test]
    fn routes_match_by_method_and_template_as_api_gateway_does() {
        assert_eq!(
            found("POST", "/orders"),
            Some((Operation::CreateOrder, None))
        );
        assert_eq!(
            found("POST", "/orders/"),
            Some((Operation::CreateOrder, None))
        );
        assert_eq!(
            found("PATCH", "/orders/ord_1"),
            Some((Operation::ReviseOrder, Some("ord_1".into())))
        );
        assert_eq!(
            found("POST", "/payments/pay_1/refunds"),
            Some((Operation::CreateRefund, Some("pay_1".into())))
        );
        // Any one segment fits a parameter, as in API Gateway; the function checks it is an id.
        assert_eq!(
            found("GET", "/payments/pay.1"),
            Some((Operation::GetPayment, Some("pay.1".into())))
        );
        assert_eq!(
            match_route("DELETE", "/orders"),
            RouteMatch::OtherMethods {
                methods: vec!["POST"],
                param: None
            }
        );
        assert_eq!(match_route("GET", "/orders/a/b"), RouteMatch::None);
        assert_eq!(match_route("GET", "/nothing"), RouteMatch::None);
        // Each (method, path) is routed once.
        for (i, a) in ROUTES.iter().enumerate() {
            for b in &ROUTES[i + 1..] {
                assert!((a.method, a.path) != (b.method, b.path), "{a:?} twice");
                assert_ne!(a.operation, b.operation, "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn a_path_id_matches_only_when_it_is_an_id() {
        let id = "pay_0123456789abcdef0123456789abcdef";
        let operation = |method: &str, path: &str| {
            operation_of(&request(method, path)).map(|(op, param)| (op, param.map(str::to_owned)))
        };
        assert_eq!(
            operation("GET", &format!("/payments/{id}")).unwrap(),
            (Operation::GetPayment, Some(id.into()))
        );
        assert_eq!(
            operation("POST", &format!("/payments/{id}/refunds")).unwrap(),
            (Operation::CreateRefund, Some(id.into()))
        );
        let longest = "a".repeat(MAX_ID_LEN);
        assert_eq!(
            operation("GET", &format!("/orders/{longest}")).unwrap(),
            (Operation::GetOrder, Some(longest.clone()))
        );
        for bad in [
            "a".repeat(MAX_ID_LEN + 1),
            "a".repeat(5000),
            "pay%2F1".into(),
            "pay.1".into(),
            "ord_1'--".into(),
        ] {
            for (method, path) in [
                ("GET", format!("/orders/{bad}")),
                ("DELETE", format!("/orders/{bad}")),
                ("POST", format!("/payments/{bad}/refunds")),
                ("GET", format!("/payments/{bad}/refunds")),
            ] {
                let refused = operation(method, &path).unwrap_err();
                assert_eq!(refused.kind, ProblemType::RouteNotFound, "{method} {bad}");
            }
        }
        assert!(!is_id("ﾟ"));
        let refused = operation("DELETE", "/payments").unwrap_err();
        assert_eq!(refused.kind, ProblemType::MethodNotAllowed);
        assert_eq!(refused.detail, "this path takes POST");
        assert_eq!(refused.allow.as_deref(), Some("POST"));
        let both = operation("DELETE", "/orders/ord_1").unwrap_err();
        assert_eq!(both.allow.as_deref(), Some("GET, PATCH"));
    }
}
