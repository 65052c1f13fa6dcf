//! X-Ray subsegments for each DynamoDB and PSP call, sent to the X-Ray daemon Lambda runs beside
//! a function whose tracing is active.
//!
//! Lambda opens the invocation's segment itself and hands its id over in `_X_AMZN_TRACE_ID`
//! (`Root=1-…;Parent=…;Sampled=1`, set by the runtime before each invocation); the daemon
//! listens on UDP at `AWS_XRAY_DAEMON_ADDRESS`. Each call we make becomes one subsegment of
//! that segment: `DynamoDB` (namespace `aws`, with its operation and request id, from an SDK
//! interceptor, see `XRayInterceptor`, feature `dynamodb`) or the PSP's host (namespace `remote`, with the method,
//! the URL without its query and the status). Sending is one UDP datagram after the call ends,
//! never awaited and never failing the call; nothing is sent when the invocation is not sampled
//! or the daemon is not configured (tests, the sandbox).
//!
//! No URL query, header or body is ever recorded: they carry tokens and card data.

use serde_json::{json, Map, Value};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

/// The variable Lambda sets to the daemon's UDP address.
pub const DAEMON_ADDRESS_VARIABLE: &str = "AWS_XRAY_DAEMON_ADDRESS";
/// The variable the runtime sets to the invocation's trace header.
pub const TRACE_HEADER_VARIABLE: &str = "_X_AMZN_TRACE_ID";

/// The parts of a trace header (`Root=…;Parent=…;Sampled=…`) a subsegment needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeader {
    /// The trace id (`1-<8 hex>-<24 hex>`).
    pub root: String,
    /// The id of the segment our subsegments hang under (the function's).
    pub parent: String,
    /// Whether X-Ray keeps this trace.
    pub sampled: bool,
}

impl TraceHeader {
    /// Reads `raw`; `None` without a root or a parent.
    pub fn parse(raw: &str) -> Option<Self> {
        let (mut root, mut parent, mut sampled) = (None, None, false);
        for part in raw.split(';') {
            match part.trim().split_once('=') {
                Some(("Root", value)) if !value.is_empty() => root = Some(value.to_owned()),
                Some(("Parent", value)) if !value.is_empty() => parent = Some(value.to_owned()),
                Some(("Sampled", value)) => sampled = value == "1",
                _ => {}
            }
        }
        Some(Self {
            root: root?,
            parent: parent?,
            sampled,
        })
    }
}

/// One call, as it is recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Subsegment {
    /// `DynamoDB`, or the PSP's host.
    pub name: String,
    /// `aws` for an AWS service, `remote` for any other HTTP API.
    pub namespace: &'static str,
    /// When the call started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// The `aws` object (operation, request id), for an AWS service.
    pub aws: Option<Value>,
    /// The HTTP method and URL (without query), for a remote API.
    pub request: Option<(String, String)>,
    /// The HTTP status, when an answer came.
    pub status: Option<u16>,
}

impl Subsegment {
    /// The X-Ray document of this subsegment under `header`'s segment, with `id`: `error` for a
    /// 4xx answer (and `throttle` for a 429), `fault` for a 5xx or no answer at all.
    pub fn document(&self, header: &TraceHeader, id: &str) -> Value {
        let seconds = |at: SystemTime| {
            at.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        let mut document = Map::new();
        document.insert("type".into(), json!("subsegment"));
        document.insert("name".into(), json!(self.name));
        document.insert("id".into(), json!(id));
        document.insert("trace_id".into(), json!(header.root));
        document.insert("parent_id".into(), json!(header.parent));
        document.insert("namespace".into(), json!(self.namespace));
        document.insert("start_time".into(), json!(seconds(self.start)));
        document.insert("end_time".into(), json!(seconds(self.end)));
        if let Some(aws) = &self.aws {
            document.insert("aws".into(), aws.clone());
        }
        let mut http = Map::new();
        if let Some((method, url)) = &self.request {
            http.insert("request".into(), json!({"method": method, "url": url}));
        }
        if let Some(status) = self.status {
            http.insert("response".into(), json!({ "status": status }));
        }
        if !http.is_empty() {
            document.insert("http".into(), Value::Object(http));
        }
        match self.status {
            Some(429) => {
                document.insert("error".into(), json!(true));
                document.insert("throttle".into(), json!(true));
            }
            Some(400..=499) => {
                document.insert("error".into(), json!(true));
            }
            Some(200..=399) => {}
            _ => {
                document.insert("fault".into(), json!(true));
            }
        }
        Value::Object(document)
    }
}

/// Where subsegments go: the daemon, or nowhere.
#[derive(Clone)]
pub struct XRay {
    sink: Option<Arc<Sink>>,
}

struct Sink {
    socket: UdpSocket,
    daemon: SocketAddr,
    header: Box<dyn Fn() -> Option<String> + Send + Sync>,
}

impl std::fmt::Debug for XRay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.sink {
            Some(sink) => write!(f, "XRay(daemon {})", sink.daemon),
            None => f.write_str("XRay(off)"),
        }
    }
}

impl XRay {
    /// Records nothing.
    pub fn off() -> Self {
        Self { sink: None }
    }

    /// The process's recorder: to the daemon at `AWS_XRAY_DAEMON_ADDRESS`, under the trace
    /// header in `_X_AMZN_TRACE_ID` at the time of each call; off when no daemon is configured.
    /// Built once (one socket), shared by every client.
    pub fn from_env() -> Self {
        static FROM_ENV: OnceLock<XRay> = OnceLock::new();
        FROM_ENV
            .get_or_init(|| {
                std::env::var(DAEMON_ADDRESS_VARIABLE)
                    .ok()
                    .and_then(|raw| daemon_address(&raw))
                    .map_or_else(Self::off, |daemon| {
                        Self::to_daemon(daemon, || std::env::var(TRACE_HEADER_VARIABLE).ok())
                    })
            })
            .clone()
    }

    /// To the daemon at `daemon`, under the trace header `header` returns for each call.
    pub fn to_daemon(
        daemon: SocketAddr,
        header: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        let bind: SocketAddr = if daemon.is_ipv6() {
            "[::]:0".parse()
        } else {
            "0.0.0.0:0".parse()
        }
        .expect("a literal address");
        match UdpSocket::bind(bind).and_then(|socket| {
            socket.set_nonblocking(true)?;
            Ok(socket)
        }) {
            Ok(socket) => Self {
                sink: Some(Arc::new(Sink {
                    socket,
                    daemon,
                    header: Box::new(header),
                })),
            },
            Err(error) => {
                tracing::warn!(error = %error, "no UDP socket for X-Ray: calls are not traced");
                Self::off()
            }
        }
    }

    /// Whether anything can be sent.
    pub fn is_on(&self) -> bool {
        self.sink.is_some()
    }

    /// Sends `subsegment` when the current invocation is sampled. Never fails the caller.
    pub fn record(&self, subsegment: &Subsegment) {
        let Some(sink) = &self.sink else { return };
        let Some(header) = (sink.header)().and_then(|raw| TraceHeader::parse(&raw)) else {
            return;
        };
        if !header.sampled {
            return;
        }
        let id = format!("{:016x}", fastrand::u64(..));
        let datagram = format!(
            "{{\"format\":\"json\",\"version\":1}}\n{}",
            subsegment.document(&header, &id)
        );
        if let Err(error) = sink.socket.send_to(datagram.as_bytes(), sink.daemon) {
            tracing::debug!(error = %error, "an X-Ray subsegment was not sent");
        }
    }
}

/// The UDP address in `AWS_XRAY_DAEMON_ADDRESS`: `host:port`, or `tcp:… udp:…` pairs.
pub fn daemon_address(raw: &str) -> Option<SocketAddr> {
    let udp = raw
        .split_whitespace()
        .find_map(|part| part.strip_prefix("udp:"))
        .unwrap_or(raw.trim());
    udp.parse().ok()
}

#[cfg(feature = "dynamodb")]
pub use interceptor::XRayInterceptor;

#[cfg(feature = "dynamodb")]
mod interceptor {
    use super::{Subsegment, XRay};
    use aws_smithy_runtime_api::box_error::BoxError;
    use aws_smithy_runtime_api::client::interceptors::context::{
        BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
    };
    use aws_smithy_runtime_api::client::interceptors::Intercept;
    use aws_smithy_runtime_api::client::orchestrator::Metadata;
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
    use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
    use serde_json::json;
    use std::time::SystemTime;

    /// An SDK interceptor recording every operation of a client (retries included) as one
    /// X-Ray subsegment named after the service: register it with
    /// `aws_sdk_dynamodb::config::Builder::interceptor(XRayInterceptor::new("DynamoDB", XRay::from_env()))`.
    #[derive(Debug, Clone)]
    pub struct XRayInterceptor {
        service: &'static str,
        xray: XRay,
    }

    impl XRayInterceptor {
        /// Records `service`'s operations with `xray`.
        pub fn new(service: &'static str, xray: XRay) -> Self {
            Self { service, xray }
        }
    }

    #[derive(Debug, Clone)]
    struct Started(SystemTime);

    impl Storable for Started {
        type Storer = StoreReplace<Self>;
    }

    impl Intercept for XRayInterceptor {
        fn name(&self) -> &'static str {
            "payonce.XRayInterceptor"
        }

        fn read_before_execution(
            &self,
            _context: &BeforeSerializationInterceptorContextRef<'_>,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            if self.xray.is_on() {
                cfg.interceptor_state()
                    .store_put(Started(SystemTime::now()));
            }
            Ok(())
        }

        fn read_after_execution(
            &self,
            context: &FinalizerInterceptorContextRef<'_>,
            _runtime_components: &RuntimeComponents,
            cfg: &mut ConfigBag,
        ) -> Result<(), BoxError> {
            let Some(Started(start)) = cfg.load::<Started>().cloned() else {
                return Ok(());
            };
            let operation = cfg
                .load::<Metadata>()
                .map_or_else(|| "unknown".to_owned(), |m| m.name().to_owned());
            let response = context.response();
            let request_id = response.and_then(|r| {
                r.headers()
                    .get("x-amzn-requestid")
                    .or_else(|| r.headers().get("x-amz-request-id"))
            });
            let mut aws = json!({ "operation": operation });
            if let Some(id) = request_id {
                aws["request_id"] = json!(id);
            }
            self.xray.record(&Subsegment {
                name: self.service.to_owned(),
                namespace: "aws",
                start,
                end: SystemTime::now(),
                aws: Some(aws),
                request: None,
                status: response.map(|r| r.status().as_u16()),
            });
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const HEADER: &str =
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn a_lambda_trace_header_is_read_and_anything_without_root_or_parent_is_refused() {
        let header = TraceHeader::parse(HEADER).expect("parses");
        assert_eq!(header.root, "1-5759e988-bd862e3fe1be46a994272793");
        assert_eq!(header.parent, "53995c3f42cd8ad8");
        assert!(header.sampled);
        assert!(
            !TraceHeader::parse("Root=1-a-b;Parent=c;Sampled=0")
                .expect("parses")
                .sampled
        );
        assert_eq!(TraceHeader::parse("Root=1-a-b;Sampled=1"), None);
        assert_eq!(TraceHeader::parse("Parent=c;Sampled=1"), None);
        assert_eq!(TraceHeader::parse(""), None);
    }

    #[test]
    fn the_daemon_address_is_read_in_both_of_its_forms() {
        let expected: SocketAddr = "169.254.79.129:2000".parse().unwrap();
        assert_eq!(daemon_address("169.254.79.129:2000"), Some(expected));
        assert_eq!(
            daemon_address("tcp:127.0.0.1:2000 udp:169.254.79.129:2000"),
            Some(expected)
        );
        assert_eq!(daemon_address("nonsense"), None);
    }

    fn call(status: Option<u16>) -> Subsegment {
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        Subsegment {
            name: "api.stripe.com".into(),
            namespace: "remote",
            start,
            end: start + Duration::from_millis(500),
            aws: None,
            request: Some((
                "POST".into(),
                "https://api.stripe.com/v1/payment_intents".into(),
            )),
            status,
        }
    }

    #[test]
    fn a_subsegment_document_hangs_under_the_function_segment_with_its_outcome_class() {
        let header = TraceHeader::parse(HEADER).unwrap();
        let document = call(Some(200)).document(&header, "0123456789abcdef");
        assert_eq!(
            document,
            json!({
                "type": "subsegment",
                "name": "api.stripe.com",
                "id": "0123456789abcdef",
                "trace_id": "1-5759e988-bd862e3fe1be46a994272793",
                "parent_id": "53995c3f42cd8ad8",
                "namespace": "remote",
                "start_time": 1_700_000_000.25,
                "end_time": 1_700_000_000.75,
                "http": {
                    "request": {"method": "POST", "url": "https://api.stripe.com/v1/payment_intents"},
                    "response": {"status": 200},
                },
            })
        );
        let flags = |status| {
            let d = call(status).document(&header, "0123456789abcdef");
            (
                d.get("error").is_some(),
                d.get("throttle").is_some(),
                d.get("fault").is_some(),
            )
        };
        assert_eq!(flags(Some(402)), (true, false, false));
        assert_eq!(flags(Some(429)), (true, true, false));
        assert_eq!(flags(Some(503)), (false, false, true));
        assert_eq!(
            flags(None),
            (false, false, true),
            "no answer at all is a fault"
        );
    }

    fn daemon() -> (UdpSocket, SocketAddr) {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let address = socket.local_addr().unwrap();
        (socket, address)
    }

    fn received(socket: &UdpSocket) -> Option<Value> {
        let mut buffer = [0u8; 65_536];
        let (n, _) = socket.recv_from(&mut buffer).ok()?;
        let text = std::str::from_utf8(&buffer[..n]).expect("utf-8");
        let (header, body) = text.split_once('\n').expect("header line");
        assert_eq!(header, r#"{"format":"json","version":1}"#);
        Some(serde_json::from_str(body).expect("json"))
    }

    #[test]
    fn a_sampled_call_reaches_the_daemon_and_an_unsampled_or_untraced_one_does_not() {
        let (socket, address) = daemon();
        let header = Arc::new(std::sync::Mutex::new(Some(HEADER.to_owned())));
        let current = header.clone();
        let xray = XRay::to_daemon(address, move || current.lock().unwrap().clone());
        xray.record(&call(Some(200)));
        let document = received(&socket).expect("a subsegment");
        assert_eq!(document["parent_id"], "53995c3f42cd8ad8");
        assert_eq!(document["id"].as_str().map(str::len), Some(16));

        *header.lock().unwrap() = Some(HEADER.replace("Sampled=1", "Sampled=0"));
        xray.record(&call(Some(200)));
        *header.lock().unwrap() = None;
        xray.record(&call(Some(200)));
        assert_eq!(
            received(&socket),
            None,
            "nothing for an unsampled or untraced call"
        );
        XRay::off().record(&call(Some(200)));
    }
}
