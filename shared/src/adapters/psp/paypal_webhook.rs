//! PayPal's webhook signature, verified locally (never by asking PayPal): the request names a
//! certificate (`PAYPAL-CERT-URL`), fetched only from an allow-listed origin over HTTPS and kept;
//! `PAYPAL-TRANSMISSION-SIG` is the base64 of an RSA PKCS#1 v1.5 SHA-256 signature by that
//! certificate's key over `<transmission id>|<transmission time>|<webhook id>|<crc32 of the raw
//! body, unsigned decimal>`, where the webhook id is **ours** (configuration, the id PayPal gave
//! our subscription) — never read from the request. `PAYPAL-AUTH-ALGO` must be `SHA256withRSA`.
//!
//! Checks, in order (the receiver answers 400 for a missing or unreadable header, 401 for one
//! that does not verify, 503 when an allowed certificate cannot be fetched right now, so PayPal
//! retries):
//! 1. every header present and readable, the signature base64 ([`SignatureError::Missing`],
//!    [`SignatureError::Malformed`]);
//! 2. the algorithm `SHA256withRSA`, and the certificate URL on an allowed origin — exactly:
//!    `https://api.paypal.com` and `https://api.sandbox.paypal.com` by default; a host that only
//!    ends with an allowed name, another scheme, a port or credentials are refused and never
//!    fetched (SSRF); on PayPal's hosts only under `/v1/notifications/certs/`, without a
//!    query; the sandbox allows only its fake's own loopback origin. A certificate is fetched
//!    only for a request whose signature headers are all there and well formed;
//! 3. the transmission time within 300 s of now ([`SignatureError::Stale`], our choice: PayPal
//!    publishes no tolerance);
//! 4. the certificate valid now (not before, not after), its subject's common name under the
//!    allowed suffix (`.paypal.com`, as PayPal's SDKs require), its key RSA;
//! 5. the signature.
//!
//! Chain: PayPal's SDKs also check that the certificate chains to DigiCert's roots. Here the
//! certificate's origin is authenticated by TLS to an allow-listed PayPal host, and its name and
//! dates are checked; the chain itself is not walked (UNCONFIRMED which intermediate PayPal signs
//! with today, and the SDKs' bundled roots are dated).

use super::b64::{self, Alphabet};
use crate::ports::{PspEvent, SignatureError, WebhookScheme};
use async_trait::async_trait;
use lambda_http::http::HeaderMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The provider name of PayPal's webhooks (`/webhooks/paypal`).
pub const PAYPAL_PROVIDER: &str = "paypal";

/// The header naming the transmission (signed).
pub const TRANSMISSION_ID: &str = "paypal-transmission-id";
/// The header with the transmission's time, RFC 3339 (signed).
pub const TRANSMISSION_TIME: &str = "paypal-transmission-time";
/// The header with the base64 signature.
pub const TRANSMISSION_SIG: &str = "paypal-transmission-sig";
/// The header naming the certificate.
pub const CERT_URL: &str = "paypal-cert-url";
/// The header naming the algorithm.
pub const AUTH_ALGO: &str = "paypal-auth-algo";

/// The only algorithm accepted.
pub const ALGORITHM: &str = "SHA256withRSA";

/// The origins certificates are fetched from unless configured otherwise.
pub const DEFAULT_CERT_ORIGINS: [&str; 2] =
    ["https://api.paypal.com", "https://api.sandbox.paypal.com"];

/// Where PayPal serves its certificates on those origins
/// (`https://api.paypal.com/v1/notifications/certs/CERT-…`).
pub const DEFAULT_CERT_PATH_PREFIX: &str = "/v1/notifications/certs/";

/// The suffix a production certificate's common name must end with.
pub const DEFAULT_SUBJECT_SUFFIX: &str = ".paypal.com";

/// How far a transmission time may be from now, in seconds.
pub const TOLERANCE_S: i64 = 300;

/// How many certificates are kept (PayPal rotates rarely; a bound keeps a flood of allowed URLs
/// from growing memory).
const CACHED_CERTS: usize = 8;

/// Why a PayPal webhook verifier could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayPalSetupError {
    /// No webhook id: nothing could ever verify.
    #[error("no PayPal webhook id is configured")]
    NoWebhookId,
    /// An allowed certificate origin that is not `https://host` (or `http://127.0.0.1:port`).
    #[error("{0:?} is not an allowed certificate origin (https://host, or http on loopback)")]
    BadOrigin(String),
}

/// Fetches a certificate's PEM text from an allowed URL.
#[async_trait]
pub trait CertFetch: Send + Sync {
    /// The body at `url`, or why it could not be had.
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String>;
}

/// Certificates over HTTP(S) with reqwest, redirects refused (a redirect could lead off the
/// allow-list).
#[derive(Debug, Clone)]
pub struct HttpCertFetch {
    client: reqwest::Client,
}

impl HttpCertFetch {
    /// A fetcher that gives up after `timeout`.
    pub fn new(timeout: Duration) -> Result<Self, reqwest::Error> {
        Ok(Self {
            client: reqwest::Client::builder()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
        })
    }
}

#[async_trait]
impl CertFetch for HttpCertFetch {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!(
                "the certificate URL answered {}",
                response.status()
            ));
        }
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        if body.len() > 64 * 1024 {
            return Err("the certificate is over 64 KiB".into());
        }
        Ok(body.to_vec())
    }
}

/// A certificate as the verifier uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cert {
    not_before_s: i64,
    not_after_s: i64,
    common_name: Option<String>,
    /// The RSA public key (PKCS#1 `RSAPublicKey`, DER).
    rsa_public_key: Vec<u8>,
}

/// The first certificate of a PEM text, read.
fn parse_pem(pem: &[u8]) -> Result<Cert, String> {
    use x509_cert::der::Decode;
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = std::str::from_utf8(pem).map_err(|_| "the certificate is not text")?;
    let start = text.find(BEGIN).ok_or("no PEM certificate")? + BEGIN.len();
    let end = start
        + text[start..]
            .find(END)
            .ok_or("an unterminated PEM certificate")?;
    let base64: String = text[start..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let der = b64::decode(&base64, Alphabet::Standard).ok_or("a PEM body that is not base64")?;
    let cert = x509_cert::Certificate::from_der(&der).map_err(|e| format!("not X.509: {e}"))?;
    let tbs = &cert.tbs_certificate;
    let seconds = |time: &x509_cert::time::Time| {
        i64::try_from(time.to_unix_duration().as_secs()).unwrap_or(i64::MAX)
    };
    const RSA_ENCRYPTION: x509_cert::der::oid::ObjectIdentifier =
        x509_cert::der::oid::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
    let spki = &tbs.subject_public_key_info;
    if spki.algorithm.oid != RSA_ENCRYPTION {
        return Err("the certificate's key is not RSA".into());
    }
    let rsa_public_key = spki
        .subject_public_key
        .as_bytes()
        .ok_or("the certificate's key has unused bits")?
        .to_vec();
    Ok(Cert {
        not_before_s: seconds(&tbs.validity.not_before),
        not_after_s: seconds(&tbs.validity.not_after),
        common_name: common_name(&tbs.subject),
        rsa_public_key,
    })
}

/// The subject's common name, if it has one that is text.
fn common_name(subject: &x509_cert::name::Name) -> Option<String> {
    use x509_cert::der::asn1::{PrintableStringRef, Utf8StringRef};
    const COMMON_NAME: x509_cert::der::oid::ObjectIdentifier =
        x509_cert::der::oid::ObjectIdentifier::new_unwrap("2.5.4.3");
    subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|attribute| attribute.oid == COMMON_NAME)
        .and_then(|attribute| {
            attribute
                .value
                .decode_as::<Utf8StringRef<'_>>()
                .map(|s| s.as_str().to_owned())
                .or_else(|_| {
                    attribute
                        .value
                        .decode_as::<PrintableStringRef<'_>>()
                        .map(|s| s.as_str().to_owned())
                })
                .ok()
        })
}

/// Verifies PayPal webhooks for one subscription.
pub struct PayPalWebhooks {
    provider: String,
    webhook_id: String,
    origins: Vec<String>,
    /// What an allowed certificate URL's path starts with (PayPal's:
    /// [`DEFAULT_CERT_PATH_PREFIX`]); it has no query.
    path_prefix: String,
    subject_suffix: String,
    fetch: Arc<dyn CertFetch>,
    cache: Mutex<Vec<(String, Arc<Cert>)>>,
}

impl std::fmt::Debug for PayPalWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayPalWebhooks")
            .field("provider", &self.provider)
            .field("webhook_id", &self.webhook_id)
            .field("origins", &self.origins)
            .field("path_prefix", &self.path_prefix)
            .field("subject_suffix", &self.subject_suffix)
            .finish_non_exhaustive()
    }
}

/// Whether `origin` may be allowed: `https://<host>` (no port, path or credentials), or
/// `http://127.0.0.1:<port>` (the sandbox's fake).
fn is_allowable_origin(origin: &str) -> bool {
    let Ok(url) = url::Url::parse(origin) else {
        return false;
    };
    let bare = url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none()
        && !origin.ends_with('/');
    bare && match url.scheme() {
        "https" => url.port().is_none() && url.host_str().is_some_and(|h| !h.is_empty()),
        "http" => url.host_str() == Some("127.0.0.1") && url.port().is_some(),
        _ => false,
    }
}

impl PayPalWebhooks {
    /// The scheme for our subscription `webhook_id`, fetching certificates with `fetch` from
    /// PayPal's own hosts only ([`DEFAULT_CERT_ORIGINS`]), whose names end with
    /// [`DEFAULT_SUBJECT_SUFFIX`].
    pub fn new(webhook_id: &str, fetch: Arc<dyn CertFetch>) -> Result<Self, PayPalSetupError> {
        Ok(Self::with_origins(
            webhook_id,
            fetch,
            &DEFAULT_CERT_ORIGINS,
            DEFAULT_SUBJECT_SUFFIX,
        )?
        .with_cert_path_prefix(DEFAULT_CERT_PATH_PREFIX))
    }

    /// The scheme of a deployment in PayPal's `live` or sandbox mode: certificates only from
    /// that mode's host (`https://api.paypal.com` live, `https://api.sandbox.paypal.com`
    /// otherwise), so a live receiver never trusts a certificate PayPal's sandbox serves.
    pub fn for_mode(
        webhook_id: &str,
        fetch: Arc<dyn CertFetch>,
        live: bool,
    ) -> Result<Self, PayPalSetupError> {
        let origin = if live {
            DEFAULT_CERT_ORIGINS[0]
        } else {
            DEFAULT_CERT_ORIGINS[1]
        };
        Ok(
            Self::with_origins(webhook_id, fetch, &[origin], DEFAULT_SUBJECT_SUFFIX)?
                .with_cert_path_prefix(DEFAULT_CERT_PATH_PREFIX),
        )
    }

    /// Only certificate URLs whose path starts with `prefix` are allowed (any path unless set).
    pub fn with_cert_path_prefix(mut self, prefix: &str) -> Self {
        self.path_prefix = prefix.to_owned();
        self
    }

    /// The same, fetching only from `origins` (each exactly `https://host`, or
    /// `http://127.0.0.1:port` for a sandbox), certificates named under `subject_suffix`.
    pub fn with_origins<S: AsRef<str>>(
        webhook_id: &str,
        fetch: Arc<dyn CertFetch>,
        origins: &[S],
        subject_suffix: &str,
    ) -> Result<Self, PayPalSetupError> {
        if webhook_id.trim().is_empty() {
            return Err(PayPalSetupError::NoWebhookId);
        }
        let origins = origins
            .iter()
            .map(|origin| {
                let origin = origin.as_ref();
                if is_allowable_origin(origin) {
                    Ok(origin.to_owned())
                } else {
                    Err(PayPalSetupError::BadOrigin(origin.to_owned()))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            provider: PAYPAL_PROVIDER.to_owned(),
            webhook_id: webhook_id.to_owned(),
            origins,
            path_prefix: "/".to_owned(),
            subject_suffix: subject_suffix.to_owned(),
            fetch,
            cache: Mutex::new(Vec::new()),
        })
    }

    /// The same scheme under another provider name.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// Whether `cert_url` is on an allowed origin, compared whole: scheme, host and port (a
    /// lookalike host, another scheme, credentials or a port are not), under the allowed path,
    /// without a query or fragment.
    fn allowed(&self, cert_url: &str) -> bool {
        let Ok(url) = url::Url::parse(cert_url) else {
            return false;
        };
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
            || !url.path().starts_with(&self.path_prefix)
        {
            return false;
        }
        let origin = url.origin().ascii_serialization();
        self.origins.contains(&origin)
    }

    fn cached(&self, cert_url: &str) -> Option<Arc<Cert>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .iter()
            .find(|(url, _)| url == cert_url)
            .map(|(_, cert)| cert.clone())
    }

    fn keep(&self, cert_url: &str, cert: Cert) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|(url, _)| url != cert_url);
        if cache.len() >= CACHED_CERTS {
            cache.remove(0);
        }
        cache.push((cert_url.to_owned(), Arc::new(cert)));
    }

    /// Keeps `pem` as the certificate at `cert_url` (tests, and a deployment that ships
    /// PayPal's certificate): only for an allowed URL.
    pub fn with_certificate(self, cert_url: &str, pem: &[u8]) -> Result<Self, String> {
        if !self.allowed(cert_url) {
            return Err(format!("{cert_url} is not on an allowed origin"));
        }
        self.keep(cert_url, parse_pem(pem)?);
        Ok(self)
    }

    /// The signed string of a transmission.
    fn signed_string(&self, id: &str, time: &str, body: &[u8]) -> String {
        format!("{id}|{time}|{}|{}", self.webhook_id, crc32fast::hash(body))
    }
}

/// The text of header `name`: missing → [`SignatureError::Missing`], not text →
/// [`SignatureError::Malformed`].
fn header<'h>(headers: &'h HeaderMap, name: &str) -> Result<&'h str, SignatureError> {
    headers
        .get(name)
        .ok_or(SignatureError::Missing)?
        .to_str()
        .map(str::trim)
        .map_err(|_| SignatureError::Malformed)
}

#[async_trait]
impl WebhookScheme for PayPalWebhooks {
    fn provider(&self) -> &str {
        &self.provider
    }

    /// Fetches the certificate the request names, if it is on an allowed origin and not kept
    /// yet, and only for a request whose signature headers are all there and well formed (a
    /// request that will be refused anyway makes no outbound call). A URL off the allow-list is
    /// never fetched (verification refuses it); a fetch that fails is
    /// [`SignatureError::KeyUnavailable`] (503: PayPal delivers again).
    async fn fetch_keys(&self, headers: &HeaderMap) -> Result<(), SignatureError> {
        let Ok(cert_url) = header(headers, CERT_URL) else {
            return Ok(());
        };
        if !self.allowed(cert_url) || self.cached(cert_url).is_some() {
            return Ok(());
        }
        let well_formed = || -> Option<()> {
            let id = header(headers, TRANSMISSION_ID).ok()?;
            let time = header(headers, TRANSMISSION_TIME).ok()?;
            let signature = header(headers, TRANSMISSION_SIG).ok()?;
            (header(headers, AUTH_ALGO).ok()? == ALGORITHM
                && !id.is_empty()
                && !id.contains('|')
                && crate::logging::epoch_ms_of_rfc3339(time).is_some()
                && b64::decode(signature, Alphabet::Standard).is_some_and(|b| !b.is_empty()))
            .then_some(())
        };
        if well_formed().is_none() {
            return Ok(());
        }
        let pem = self.fetch.fetch(cert_url).await.map_err(|reason| {
            tracing::warn!(cert_url, %reason, "the PayPal certificate could not be fetched");
            SignatureError::KeyUnavailable
        })?;
        match parse_pem(&pem) {
            Ok(cert) => {
                self.keep(cert_url, cert);
                Ok(())
            }
            Err(reason) => {
                // An allowed host served something that is not a certificate: verification
                // refuses the delivery (no key), and nothing is kept.
                tracing::warn!(cert_url, %reason, "the PayPal certificate URL served no usable certificate");
                Ok(())
            }
        }
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), SignatureError> {
        let id = header(headers, TRANSMISSION_ID)?;
        let time = header(headers, TRANSMISSION_TIME)?;
        let signature = header(headers, TRANSMISSION_SIG)?;
        let cert_url = header(headers, CERT_URL)?;
        let algorithm = header(headers, AUTH_ALGO)?;
        let signature = b64::decode(signature, Alphabet::Standard)
            .filter(|bytes| !bytes.is_empty())
            .ok_or(SignatureError::Malformed)?;
        if id.is_empty() || id.contains('|') || time.contains('|') {
            return Err(SignatureError::Malformed);
        }
        if algorithm != ALGORITHM || !self.allowed(cert_url) {
            return Err(SignatureError::NoValidSignature);
        }
        let sent_s = crate::logging::epoch_ms_of_rfc3339(time)
            .ok_or(SignatureError::Malformed)?
            .div_euclid(1000);
        if (now_s - sent_s).abs() > TOLERANCE_S {
            return Err(SignatureError::Stale);
        }
        let cert = self
            .cached(cert_url)
            .ok_or(SignatureError::NoValidSignature)?;
        let named = cert
            .common_name
            .as_deref()
            .is_some_and(|name| name.to_ascii_lowercase().ends_with(&self.subject_suffix));
        if !named || now_s < cert.not_before_s || now_s > cert.not_after_s {
            return Err(SignatureError::NoValidSignature);
        }
        let signed = self.signed_string(id, time, body);
        aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
            &cert.rsa_public_key,
        )
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| SignatureError::NoValidSignature)
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        super::paypal_events::parse_event(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::http::{HeaderName, HeaderValue};
    use serde_json::Value;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Serves one PEM for every URL, and counts what it was asked.
    struct Serving {
        pem: Vec<u8>,
        asked: AtomicUsize,
    }

    #[async_trait]
    impl CertFetch for Serving {
        async fn fetch(&self, _url: &str) -> Result<Vec<u8>, String> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            Ok(self.pem.clone())
        }
    }

    fn vectors() -> Value {
        let here = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/paypal-webhook-signatures.json"
        );
        let text = std::fs::read_to_string(here).expect("the vendored test vectors");
        let upstream = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/testdata/paypal-webhook-signatures.json"
        );
        if let Ok(original) = std::fs::read_to_string(upstream) {
            assert_eq!(
                original, text,
                "the vendored vectors drifted from shared/testdata"
            );
        }
        serde_json::from_str(&text).unwrap()
    }

    fn headers(case: &Value) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, field) in [
            (TRANSMISSION_ID, "transmission_id"),
            (TRANSMISSION_TIME, "transmission_time"),
            (TRANSMISSION_SIG, "signature"),
            (CERT_URL, "cert_url"),
            (AUTH_ALGO, "auth_algo"),
        ] {
            if let Some(value) = case[field].as_str() {
                headers.insert(
                    HeaderName::from_static(name),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
        }
        headers
    }

    /// Every vector of testdata/paypal-webhook-signatures.json, computed independently of this
    /// code: the allow-list (api.paypal.com, api.sandbox.paypal.com), the webhook id and the
    /// tolerance are the file's; its certificates are self-signed test ones named
    /// `messageverificationcerts.paypal.example`, so the name suffix is `.paypal.example` here.
    #[tokio::test]
    async fn passes_the_independent_vectors() {
        let vectors = vectors();
        assert_eq!(vectors["tolerance_seconds"], TOLERANCE_S);
        let origins: Vec<String> = vectors["allowed_cert_hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|host| format!("https://{}", host.as_str().unwrap()))
            .collect();
        assert_eq!(origins, DEFAULT_CERT_ORIGINS);
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 15);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let pem = vectors["certs"][case["cert"].as_str().unwrap()]
                .as_str()
                .unwrap();
            let fetch = Arc::new(Serving {
                pem: pem.as_bytes().to_vec(),
                asked: AtomicUsize::new(0),
            });
            let scheme = PayPalWebhooks::with_origins(
                vectors["webhook_id"].as_str().unwrap(),
                fetch.clone(),
                &DEFAULT_CERT_ORIGINS,
                ".paypal.example",
            )
            .unwrap()
            .with_cert_path_prefix(DEFAULT_CERT_PATH_PREFIX);
            let headers = headers(case);
            let body = case["body"].as_str().unwrap().as_bytes();
            let now = case["now"].as_i64().unwrap();
            scheme.fetch_keys(&headers).await.unwrap();
            let outcome = scheme.verify(&headers, body, now);
            assert_eq!(
                outcome.is_ok(),
                case["valid"].as_bool().unwrap(),
                "{name}: {outcome:?}"
            );
            // A certificate off the allow-list is never fetched, nor one for a request that will
            // be refused whatever the certificate (another algorithm).
            let off_list = name.starts_with("cert_url_");
            assert_eq!(
                fetch.asked.load(Ordering::SeqCst),
                usize::from(!off_list && name != "other_algorithm"),
                "{name}"
            );
            let expected = match name {
                "stale" | "future" => Some(SignatureError::Stale),
                // ("not a signature", base64: it reads, and verifies nothing.)
                _ if case["valid"].as_bool().unwrap() => None,
                _ => Some(SignatureError::NoValidSignature),
            };
            assert_eq!(outcome.err(), expected, "{name}");
            // The certificate is kept: a second delivery asks for nothing.
            scheme.fetch_keys(&headers).await.unwrap();
            assert!(fetch.asked.load(Ordering::SeqCst) <= 1, "{name}");
        }
    }

    #[tokio::test]
    async fn the_production_name_rule_refuses_a_test_certificate_and_setup_is_checked() {
        let vectors = vectors();
        let case = &vectors["cases"][0];
        let pem = vectors["certs"]["main"].as_str().unwrap();
        let fetch = Arc::new(Serving {
            pem: pem.as_bytes().to_vec(),
            asked: AtomicUsize::new(0),
        });
        // GIVEN the production rule (names under .paypal.com)
        let scheme = PayPalWebhooks::new(vectors["webhook_id"].as_str().unwrap(), fetch).unwrap();
        let headers = headers(case);
        scheme.fetch_keys(&headers).await.unwrap();
        // THEN a certificate named elsewhere signs nothing, however valid the signature
        assert_eq!(
            scheme.verify(
                &headers,
                case["body"].as_str().unwrap().as_bytes(),
                case["now"].as_i64().unwrap()
            ),
            Err(SignatureError::NoValidSignature)
        );
        // AND the setup refuses an empty webhook id and origins that are not bare https
        let serving = || -> Arc<dyn CertFetch> {
            Arc::new(Serving {
                pem: Vec::new(),
                asked: AtomicUsize::new(0),
            })
        };
        assert_eq!(
            PayPalWebhooks::new(" ", serving()).unwrap_err(),
            PayPalSetupError::NoWebhookId
        );
        for origin in [
            "http://api.paypal.com",
            "https://api.paypal.com/",
            "https://api.paypal.com:8443",
            "https://user@api.paypal.com",
            "http://10.0.0.1:80",
            "api.paypal.com",
        ] {
            assert!(
                PayPalWebhooks::with_origins("WH1", serving(), &[origin], ".paypal.com").is_err(),
                "{origin}"
            );
        }
        assert!(PayPalWebhooks::with_origins(
            "WH1",
            serving(),
            &["http://127.0.0.1:4010"],
            ".paypal.example"
        )
        .is_ok());
    }

    #[tokio::test]
    async fn on_paypals_hosts_only_the_certificate_path_is_fetched() {
        // GIVEN the production scheme and a valid delivery's headers
        let vectors = vectors();
        let case = &vectors["cases"][0];
        let fetch = Arc::new(Serving {
            pem: vectors["certs"]["main"]
                .as_str()
                .unwrap()
                .as_bytes()
                .to_vec(),
            asked: AtomicUsize::new(0),
        });
        let scheme =
            PayPalWebhooks::new(vectors["webhook_id"].as_str().unwrap(), fetch.clone()).unwrap();
        // WHEN the certificate URL names another path, a query or a fragment on PayPal's host
        for url in [
            "https://api.paypal.com/v1/oauth2/token",
            "https://api.paypal.com/v1/notifications/certs/CERT-1?x=1",
            "https://api.paypal.com/v1/notifications/certs/CERT-1#x",
            "https://api.paypal.com/v1/notifications/certsX/CERT-1",
            "https://api.sandbox.paypal.com/",
        ] {
            let mut headers = headers(case);
            headers.insert(
                HeaderName::from_static(CERT_URL),
                HeaderValue::from_str(url).unwrap(),
            );
            // THEN nothing is fetched, and nothing verifies
            scheme.fetch_keys(&headers).await.unwrap();
            assert_eq!(fetch.asked.load(Ordering::SeqCst), 0, "{url}");
            assert_eq!(
                scheme.verify(&headers, b"{}", case["now"].as_i64().unwrap()),
                Err(SignatureError::NoValidSignature),
                "{url}"
            );
        }
    }

    #[test]
    fn a_deployment_trusts_only_its_own_modes_certificate_host() {
        let fetch = Arc::new(Serving {
            pem: Vec::new(),
            asked: AtomicUsize::new(0),
        });
        let live = PayPalWebhooks::for_mode("WH-1", fetch.clone(), true).unwrap();
        let sandbox = PayPalWebhooks::for_mode("WH-1", fetch, false).unwrap();
        let (production_cert, sandbox_cert) = (
            "https://api.paypal.com/v1/notifications/certs/CERT-1",
            "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-1",
        );
        assert!(live.allowed(production_cert));
        assert!(!live.allowed(sandbox_cert));
        assert!(sandbox.allowed(sandbox_cert));
        assert!(!sandbox.allowed(production_cert));
    }

    #[tokio::test]
    async fn an_unreachable_certificate_is_a_retry_and_missing_headers_are_refused() {
        struct Down;
        #[async_trait]
        impl CertFetch for Down {
            async fn fetch(&self, _url: &str) -> Result<Vec<u8>, String> {
                Err("connection refused".into())
            }
        }
        let vectors = vectors();
        let case = &vectors["cases"][0];
        let scheme = PayPalWebhooks::with_origins(
            vectors["webhook_id"].as_str().unwrap(),
            Arc::new(Down),
            &DEFAULT_CERT_ORIGINS,
            ".paypal.example",
        )
        .unwrap();
        let headers = headers(case);
        assert_eq!(
            scheme.fetch_keys(&headers).await,
            Err(SignatureError::KeyUnavailable)
        );
        // Without the certificate, nothing verifies.
        assert_eq!(
            scheme.verify(
                &headers,
                case["body"].as_str().unwrap().as_bytes(),
                case["now"].as_i64().unwrap()
            ),
            Err(SignatureError::NoValidSignature)
        );
        for missing in [
            TRANSMISSION_ID,
            TRANSMISSION_TIME,
            TRANSMISSION_SIG,
            CERT_URL,
            AUTH_ALGO,
        ] {
            let mut without = headers.clone();
            without.remove(missing);
            assert_eq!(
                scheme.verify(&without, b"{}", case["now"].as_i64().unwrap()),
                Err(SignatureError::Missing),
                "{missing}"
            );
        }
    }
}
