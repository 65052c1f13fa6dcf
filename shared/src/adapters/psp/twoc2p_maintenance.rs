//! 2C2P's Payment Maintenance API ("Payment Action 2.0"): refunds, refund status, voids and
//! inquiries, each an XML `PaymentProcessRequest` encrypted to 2C2P's RSA key (JWE, `RSA-OAEP` +
//! `A256GCM`) and then signed with the merchant's (JWS, `PS256`), posted as the bare token to
//! one URL; the answer is the same envelope the other way round. RSA, PSS and GCM are
//! aws-lc-rs's (the TLS stack's library, already linked); only the JOSE framing — base64url
//! segments joined by dots, with the two fixed headers 2C2P's samples show — is written here.
//!
//! **Nothing in an answer is read before it verifies** with 2C2P's key, decrypts with ours and
//! echoes the invoice and the action asked: an answer that fails any step is *untrusted*, an
//! unknown outcome, never a success.
//!
//! **Refunds carry none of our ids.** The API takes no refund reference of ours that it shows
//! again (an `idempotencyID` exists in 2C2P's tables, but how long it is kept and what a reused
//! one does are not documented: it is sent, and nothing relies on it), and the refund status
//! (`RS`) lists an invoice's refunds by 2C2P's own `referenceNo` alone. So a refund whose answer
//! was lost is told apart from the payment's other refunds by elimination: of the refunds `RS`
//! lists, those whose reference payonce stored on another refund of the payment are theirs, and
//! those of another amount are not ours; if exactly one of our amount is left and no other
//! refund of the payment of that amount is unanswered, it is ours. Anything else is ambiguous
//! and left to an operator (an alarm, `refund-unprovable`), never re-sent. A refund is sent
//! again only when `RS` shows none that can be ours. (A refund made outside
//! payonce, in 2C2P's portal, breaks the elimination; the deploy docs say so.)
//!
//! **Settled or not.** 2C2P refunds only settled transactions (status `S`); before settlement
//! (`A`, and `RS` "ready for settlement") the whole amount is voided instead (`V`), and a
//! partial refund is refused with [`NOT_SETTLED_CODE`] for staff to send once it settled.

use super::b64::{self, Alphabet};
use super::transport::{CallFailure, PspTransport, WireBody, WireCall, WireReply};
use crate::domain::{Currency, RefundSettlement};
use crate::ports::{PspError, RefundOutcome, RefundRequest};
use aws_lc_rs::{aead, encoding::AsDer, rand, rsa, signature};
use std::time::Duration;

/// 2C2P's sandbox maintenance URL (developer.2c2p.com, payment maintenance guides).
pub const SANDBOX_ACTION_URL: &str = "https://demo2.2c2p.com/2C2PFrontend/PaymentAction/2.0/action";
/// 2C2P's production maintenance URL (no `2C2PFrontend` segment there).
pub const PRODUCTION_ACTION_URL: &str = "https://t.2c2p.com/PaymentAction/2.0/action";

/// The request's `version`, as 2C2P's JWE samples send it.
const VERSION: &str = "3.8";
/// The JWE protected header, byte for byte as 2C2P's sample token carries it.
const JWE_HEADER: &str = r#"{"alg":"RSA-OAEP","enc":"A256GCM"}"#;
/// The JWS protected header, byte for byte as 2C2P's sample token carries it.
const JWS_HEADER: &str = r#"{"alg":"PS256","typ":"JWT"}"#;
/// AES-256's key length.
const CEK_LEN: usize = 32;
/// GCM's tag length.
const TAG_LEN: usize = 16;

/// The failure code of a partial refund of a transaction 2C2P has not settled yet.
pub const NOT_SETTLED_CODE: &str = "2c2p_not_settled";
/// The `provider_refund_id` payonce gives a refund 2C2P carried out as a void of the invoice
/// (a void has no reference of its own).
pub fn void_reference(invoice_no: &str) -> String {
    format!("void-{invoice_no}")
}

/// Result codes after which nothing moved: the request's values, the transaction's state or
/// the amounts refused it (2C2P's Payment Action result codes; the reading is ours, 2C2P does
/// not classify them).
const REFUSED: [&str; 31] = [
    "10", "11", "12", "15", "16", "17", "18", "21", "22", "25", "29", "30", "31", "32", "33", "34",
    "35", "36", "37", "38", "39", "40", "41", "43", "44", "45", "46", "47", "48", "49", "54",
];
/// Result codes refusing our merchant credentials: `03`/`14` invalid merchant, `13` invalid
/// hash, `96` unable to decrypt (our envelope).
const CREDENTIALS: [&str; 4] = ["03", "13", "14", "96"];

/// The merchant's and 2C2P's RSA keys for the maintenance API (never logged).
pub struct MaintenanceKeys {
    signing: signature::RsaKeyPair,
    decrypting: rsa::OaepPrivateDecryptingKey,
    encrypting: rsa::OaepPublicEncryptingKey,
    twoc2p_public: Vec<u8>,
}

impl std::fmt::Debug for MaintenanceKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MaintenanceKeys(<redacted>)")
    }
}

/// Why the keys were refused.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceKeyError {
    /// The merchant's private key is not an RSA PKCS#8 key aws-lc-rs takes (2048–8192 bits).
    #[error("the merchant's private key is not an RSA PKCS#8 key (DER): {0}")]
    Merchant(String),
    /// 2C2P's public key is not an RSA SubjectPublicKeyInfo.
    #[error("2C2P's public key is not an RSA SubjectPublicKeyInfo (DER): {0}")]
    TwoC2p(String),
}

impl MaintenanceKeys {
    /// The merchant's private key (PKCS#8 DER: it signs our requests and decrypts 2C2P's
    /// answers; its public half is the one uploaded to 2C2P's portal) and 2C2P's public key
    /// (SubjectPublicKeyInfo DER, from the portal's "2C2P Public Keys > JWE").
    pub fn from_der(
        merchant_pkcs8: &[u8],
        twoc2p_spki: &[u8],
    ) -> Result<Self, MaintenanceKeyError> {
        let signing = signature::RsaKeyPair::from_pkcs8(merchant_pkcs8)
            .map_err(|error| MaintenanceKeyError::Merchant(error.to_string()))?;
        let decrypting = rsa::PrivateDecryptingKey::from_pkcs8(merchant_pkcs8)
            .map_err(|error| MaintenanceKeyError::Merchant(error.to_string()))
            .and_then(|key| {
                rsa::OaepPrivateDecryptingKey::new(key)
                    .map_err(|_| MaintenanceKeyError::Merchant("not usable for OAEP".into()))
            })?;
        let encrypting = rsa::PublicEncryptingKey::from_der(twoc2p_spki)
            .map_err(|error| MaintenanceKeyError::TwoC2p(error.to_string()))
            .and_then(|key| {
                rsa::OaepPublicEncryptingKey::new(key)
                    .map_err(|_| MaintenanceKeyError::TwoC2p("not usable for OAEP".into()))
            })?;
        Ok(Self {
            signing,
            decrypting,
            encrypting,
            twoc2p_public: twoc2p_spki.to_vec(),
        })
    }

    /// A fresh pair of test keys: (merchant PKCS#8, merchant SPKI) — for tests and fakes.
    pub fn generate_pair() -> Result<(Vec<u8>, Vec<u8>), MaintenanceKeyError> {
        let key = rsa::PrivateDecryptingKey::generate(rsa::KeySize::Rsa2048)
            .map_err(|_| MaintenanceKeyError::Merchant("no key generated".into()))?;
        let private = key
            .as_der()
            .map_err(|_| MaintenanceKeyError::Merchant("no PKCS#8".into()))?;
        let public = key
            .public_key()
            .as_der()
            .map_err(|_| MaintenanceKeyError::Merchant("no SPKI".into()))?;
        Ok((private.as_ref().to_vec(), public.as_ref().to_vec()))
    }

    /// `xml` sealed for 2C2P: encrypted to its key, then signed with ours.
    fn seal(&self, xml: &str) -> Result<String, String> {
        let header = b64::encode(JWE_HEADER.as_bytes(), Alphabet::UrlSafeNoPad);
        let mut cek = [0u8; CEK_LEN];
        let mut iv = [0u8; aead::NONCE_LEN];
        rand::fill(&mut cek).map_err(|_| "no randomness".to_owned())?;
        rand::fill(&mut iv).map_err(|_| "no randomness".to_owned())?;
        let mut wrapped = vec![0u8; self.encrypting.ciphertext_size()];
        let wrapped = self
            .encrypting
            .encrypt(&rsa::OAEP_SHA1_MGF1SHA1, &cek, &mut wrapped, None)
            .map_err(|_| "the content key could not be encrypted".to_owned())?
            .to_vec();
        let key = aead::UnboundKey::new(&aead::AES_256_GCM, &cek)
            .map(aead::LessSafeKey::new)
            .map_err(|_| "no AES-256-GCM key".to_owned())?;
        let mut body = xml.as_bytes().to_vec();
        let tag = key
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(iv),
                aead::Aad::from(header.as_bytes()),
                &mut body,
            )
            .map_err(|_| "the request could not be encrypted".to_owned())?;
        let jwe = [
            header,
            b64::encode(&wrapped, Alphabet::UrlSafeNoPad),
            b64::encode(&iv, Alphabet::UrlSafeNoPad),
            b64::encode(&body, Alphabet::UrlSafeNoPad),
            b64::encode(tag.as_ref(), Alphabet::UrlSafeNoPad),
        ]
        .join(".");
        let input = format!(
            "{}.{}",
            b64::encode(JWS_HEADER.as_bytes(), Alphabet::UrlSafeNoPad),
            b64::encode(jwe.as_bytes(), Alphabet::UrlSafeNoPad)
        );
        let mut signature = vec![0u8; self.signing.public_modulus_len()];
        self.signing
            .sign(
                &signature::RSA_PSS_SHA256,
                &rand::SystemRandom::new(),
                input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "the request could not be signed".to_owned())?;
        Ok(format!(
            "{input}.{}",
            b64::encode(&signature, Alphabet::UrlSafeNoPad)
        ))
    }

    /// The XML of an answer `token`: its PS256 signature verified with 2C2P's key before
    /// anything else, then decrypted with ours. Every deviation is an error.
    fn open(&self, token: &str) -> Result<String, String> {
        let parts: Vec<&str> = token.trim().split('.').collect();
        let [header, payload, signature] = parts[..] else {
            return Err(format!("{} segments, not a JWS", parts.len()));
        };
        let header_json = decode_json(header).ok_or("the JWS header is not JSON")?;
        if header_json.get("alg").and_then(|alg| alg.as_str()) != Some("PS256")
            || header_json.get("crit").is_some()
        {
            return Err(format!(
                "a JWS header payonce does not accept: {header_json:?}"
            ));
        }
        let signature = b64::decode(signature, Alphabet::UrlSafeNoPad).ok_or("a bad signature")?;
        signature::UnparsedPublicKey::new(
            &signature::RSA_PSS_2048_8192_SHA256,
            &self.twoc2p_public,
        )
        .verify(format!("{header}.{payload}").as_bytes(), &signature)
        .map_err(|_| "the signature does not verify with 2C2P's key".to_owned())?;
        let jwe = b64::decode(payload, Alphabet::UrlSafeNoPad)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or("the JWS payload is not text")?;
        let parts: Vec<&str> = jwe.split('.').collect();
        let [protected, wrapped, iv, body, tag] = parts[..] else {
            return Err(format!("{} segments, not a JWE", parts.len()));
        };
        let protected_json = decode_json(protected).ok_or("the JWE header is not JSON")?;
        if protected_json.get("alg").and_then(|v| v.as_str()) != Some("RSA-OAEP")
            || protected_json.get("enc").and_then(|v| v.as_str()) != Some("A256GCM")
            || protected_json.get("zip").is_some()
            || protected_json.get("crit").is_some()
        {
            return Err(format!(
                "a JWE header payonce does not accept: {protected_json:?}"
            ));
        }
        let decode = |part: &str| b64::decode(part, Alphabet::UrlSafeNoPad).ok_or("bad base64url");
        let (wrapped, iv, mut body, tag) =
            (decode(wrapped)?, decode(iv)?, decode(body)?, decode(tag)?);
        let mut cek = vec![0u8; self.decrypting.min_output_size()];
        let cek = self
            .decrypting
            .decrypt(&rsa::OAEP_SHA1_MGF1SHA1, &wrapped, &mut cek, None)
            .map_err(|_| "the content key does not decrypt with ours".to_owned())?;
        if cek.len() != CEK_LEN || tag.len() != TAG_LEN {
            return Err("a content key or tag of the wrong length".into());
        }
        let nonce = aead::Nonce::try_assume_unique_for_key(&iv).map_err(|_| "a bad IV")?;
        let key = aead::UnboundKey::new(&aead::AES_256_GCM, cek)
            .map(aead::LessSafeKey::new)
            .map_err(|_| "no AES-256-GCM key")?;
        let plain = key
            .open_in_place_separate_tag(
                nonce,
                aead::Aad::from(protected.as_bytes()),
                &tag,
                &mut body,
            )
            .map_err(|_| "the answer does not decrypt".to_owned())?;
        String::from_utf8(plain.to_vec()).map_err(|_| "the answer is not UTF-8".to_owned())
    }
}

/// The DER of a key given as text: a PEM block labelled `label` (`PRIVATE KEY` for PKCS#8,
/// `PUBLIC KEY` for SubjectPublicKeyInfo) or the DER in standard base64. A certificate is
/// refused with how to take its key out: payonce reads no X.509.
pub fn key_der(text: &str, label: &str) -> Result<Vec<u8>, String> {
    let text = text.trim();
    let body = match text.strip_prefix("-----BEGIN ") {
        Some(rest) => {
            let (found, rest) = rest
                .split_once("-----")
                .ok_or("an unterminated PEM header")?;
            if found != label {
                return Err(format!(
                    "a PEM {found:?}, not {label:?}{}",
                    if found == "CERTIFICATE" {
                        " (take the key out with `openssl x509 -in <file> -pubkey -noout`)"
                    } else if found == "RSA PRIVATE KEY" {
                        " (convert it with `openssl pkcs8 -topk8 -nocrypt -in <file>`)"
                    } else {
                        ""
                    }
                ));
            }
            rest.split_once(&format!("-----END {label}-----"))
                .ok_or("no PEM footer")?
                .0
                .to_owned()
        }
        None => text.to_owned(),
    };
    let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    b64::decode(&compact, Alphabet::Standard).ok_or_else(|| "not base64".to_owned())
}

fn decode_json(segment: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    serde_json::from_slice(&b64::decode(segment, Alphabet::UrlSafeNoPad)?).ok()
}

/// A maintenance action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessType {
    /// `I`: the transaction's state.
    Inquiry,
    /// `R`: a refund of a settled transaction.
    Refund,
    /// `RS`: the transaction's state and every refund of it.
    RefundStatus,
    /// `V`: a void before settlement.
    Void,
}

impl ProcessType {
    /// The wire code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Inquiry => "I",
            Self::Refund => "R",
            Self::RefundStatus => "RS",
            Self::Void => "V",
        }
    }
}

/// One action on an invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// What is asked.
    pub process_type: ProcessType,
    /// The payment's invoice number.
    pub invoice_no: String,
    /// `actionAmount`, a decimal in major units.
    pub amount: String,
    /// `idempotencyID` (our refund id), sent for whatever 2C2P makes of it.
    pub idempotency_id: Option<String>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The `PaymentProcessRequest` of `action`.
pub fn request_xml(merchant_id: &str, action: &Action) -> String {
    let mut xml = format!(
        "<PaymentProcessRequest><version>{VERSION}</version><merchantID>{}</merchantID><invoiceNo>{}</invoiceNo><actionAmount>{}</actionAmount><processType>{}</processType>",
        escape(merchant_id),
        escape(&action.invoice_no),
        escape(&action.amount),
        action.process_type.code()
    );
    if let Some(id) = &action.idempotency_id {
        xml.push_str(&format!("<idempotencyID>{}</idempotencyID>", escape(id)));
    }
    xml.push_str("</PaymentProcessRequest>");
    xml
}

/// One refund of an invoice as `RS` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRefund {
    /// 2C2P's reference of the refund (R's `refundReferenceNo`).
    pub reference_no: String,
    /// Its amount, as written.
    pub amount: String,
    /// `RF` refunded, `RP` pending, `RFF`/`RR…` failed or rejected.
    pub status: String,
}

/// A verified answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActionAnswer {
    /// The result code.
    pub resp_code: String,
    /// The transaction's (or, for `R`, the refund's) status.
    pub status: String,
    /// The echoed invoice.
    pub invoice_no: String,
    /// The echoed process type.
    pub process_type: String,
    /// The amount.
    pub amount: String,
    /// An `R`'s reference of the new refund.
    pub refund_reference_no: Option<String>,
    /// `RS`'s list.
    pub refunds: Vec<ListedRefund>,
}

fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find(';').ok_or("an unterminated entity")?;
        out.push(match &tail[..=end] {
            "&amp;" => '&',
            "&lt;" => '<',
            "&gt;" => '>',
            "&quot;" => '"',
            "&apos;" => '\'',
            other => return Err(format!("an entity payonce does not read: {other}")),
        });
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Reads a `PaymentProcessResponse`: its direct children's text, and `refundList/refund`'s
/// attributes. Anything not well formed is refused.
pub fn parse_answer(xml: &str) -> Result<ActionAnswer, String> {
    use xmlparser::{ElementEnd, Token};
    let mut answer = ActionAnswer::default();
    let mut path: Vec<String> = Vec::new();
    let mut pending: Option<String> = None;
    let mut refund: Option<ListedRefund> = None;
    let mut root_seen = false;
    for token in xmlparser::Tokenizer::from(xml) {
        match token.map_err(|error| format!("malformed XML: {error}"))? {
            Token::Declaration { .. } | Token::Comment { .. } => {}
            Token::ElementStart { local, .. } => {
                let name = local.as_str().to_owned();
                if path.is_empty() {
                    if name != "PaymentProcessResponse" || root_seen {
                        return Err(format!("the root is {name}, not PaymentProcessResponse"));
                    }
                    root_seen = true;
                }
                if path.len() == 2 && path[1] == "refundList" && name == "refund" {
                    refund = Some(ListedRefund {
                        reference_no: String::new(),
                        amount: String::new(),
                        status: String::new(),
                    });
                }
                pending = Some(name);
            }
            Token::Attribute { local, value, .. } => {
                if let Some(entry) = refund.as_mut() {
                    let value = unescape(value.as_str())?;
                    match local.as_str() {
                        "referenceNo" => entry.reference_no = value,
                        "amount" => entry.amount = value,
                        "status" => entry.status = value,
                        _ => {}
                    }
                }
            }
            Token::ElementEnd { end, .. } => match end {
                ElementEnd::Open => path.push(pending.take().ok_or("an element without a name")?),
                ElementEnd::Empty => {
                    pending = None;
                    if let Some(entry) = refund.take() {
                        answer.refunds.push(entry);
                    }
                }
                ElementEnd::Close(_, local) => {
                    if path.pop().as_deref() != Some(local.as_str()) {
                        return Err(format!("a stray </{}>", local.as_str()));
                    }
                    if let Some(entry) = refund.take() {
                        answer.refunds.push(entry);
                    }
                }
            },
            Token::Text { text } => {
                if path.len() == 2 {
                    let value = unescape(text.as_str())?;
                    let value = value.trim().to_owned();
                    match path[1].as_str() {
                        "respCode" => answer.resp_code = value,
                        "status" => answer.status = value,
                        "invoiceNo" => answer.invoice_no = value,
                        "processType" => answer.process_type = value,
                        "amount" => answer.amount = value,
                        "refundReferenceNo" if !value.is_empty() => {
                            answer.refund_reference_no = Some(value)
                        }
                        _ => {}
                    }
                }
            }
            Token::Cdata { .. } | Token::ProcessingInstruction { .. } => {
                return Err("CDATA or a processing instruction in an answer".into())
            }
            Token::DtdStart { .. }
            | Token::EmptyDtd { .. }
            | Token::EntityDeclaration { .. }
            | Token::DtdEnd { .. } => return Err("a DTD in an answer".into()),
        }
    }
    if !root_seen || !path.is_empty() {
        return Err("an incomplete PaymentProcessResponse".into());
    }
    if answer.resp_code.is_empty() {
        return Err("an answer without a respCode".into());
    }
    Ok(answer)
}

/// Why an action has no verified answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionFailure {
    /// No connection was made: the action cannot have run.
    NotSent(String),
    /// 2C2P refused our credentials at its door (HTTP 401/403, or `03`/`13`/`14`/`96`): it ran
    /// nothing.
    Credentials(String),
    /// Sent, and no answer payonce can believe.
    Unknown(String),
}

impl ActionFailure {
    fn reason(&self) -> &str {
        match self {
            Self::NotSent(reason) | Self::Credentials(reason) | Self::Unknown(reason) => reason,
        }
    }
}

/// The maintenance API at one URL with our keys.
pub struct Maintenance<T> {
    transport: T,
    path: String,
    merchant_id: String,
    keys: std::sync::Arc<MaintenanceKeys>,
    request_timeout: Duration,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Maintenance<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("transport", &self.transport)
            .field("path", &self.path)
            .field("merchant_id", &self.merchant_id)
            .finish_non_exhaustive()
    }
}

fn alarm_credentials(detail: &str) -> String {
    tracing::error!(
        detail,
        alarm = "psp-credentials",
        "2C2P's maintenance API refused our keys"
    );
    format!("2C2P's maintenance API refused our keys ({detail})")
}

fn alarm_untrusted(detail: &str) -> String {
    tracing::error!(
        detail,
        alarm = "psp-answer-untrusted",
        "a 2C2P maintenance answer cannot be trusted; nothing is read from it"
    );
    format!("untrusted 2C2P maintenance answer: {detail}")
}

/// The refunds `RS` lists that can be `request`'s: those whose reference no other refund of
/// the payment holds.
fn unclaimed<'a>(answer: &'a ActionAnswer, request: &RefundRequest) -> Vec<&'a ListedRefund> {
    answer
        .refunds
        .iter()
        .filter(|listed| {
            !request
                .siblings
                .known
                .iter()
                .any(|known| known == &listed.reference_no)
        })
        .collect()
}

fn listed_settlement(listed: &ListedRefund) -> RefundSettlement {
    let provider_refund_id = listed.reference_no.clone();
    match listed.status.as_str() {
        "RF" => RefundSettlement::Succeeded { provider_refund_id },
        "RP" | "" => RefundSettlement::Pending { provider_refund_id },
        failed => RefundSettlement::Failed {
            provider_refund_id: Some(provider_refund_id),
            code: format!("2c2p_{}", failed.to_ascii_lowercase()),
        },
    }
}

impl<T: PspTransport> Maintenance<T> {
    /// The API at `path` of `transport`'s base URL, for `merchant_id` with `keys`.
    pub fn new(
        transport: T,
        path: impl Into<String>,
        merchant_id: impl Into<String>,
        keys: impl Into<std::sync::Arc<MaintenanceKeys>>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            transport,
            path: path.into(),
            merchant_id: merchant_id.into(),
            keys: keys.into(),
            request_timeout,
        }
    }

    /// The transport (tests read its calls).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Sends `action` and returns its verified answer, which must echo the invoice and the
    /// action.
    pub async fn act(
        &self,
        action: &Action,
        timeout: Duration,
    ) -> Result<ActionAnswer, ActionFailure> {
        let body = self
            .keys
            .seal(&request_xml(&self.merchant_id, action))
            .map_err(ActionFailure::NotSent)?;
        let call = WireCall {
            method: "POST",
            path: self.path.clone(),
            query: Vec::new(),
            headers: Vec::new(),
            body: WireBody::Text(body),
        };
        let reply: WireReply = match self
            .transport
            .send(&call, timeout.min(self.request_timeout))
            .await
        {
            Ok(reply) => reply,
            Err(CallFailure::NotConnected(reason)) => return Err(ActionFailure::NotSent(reason)),
            Err(CallFailure::AfterConnect(reason)) => return Err(ActionFailure::Unknown(reason)),
        };
        if matches!(reply.status, 401 | 403) {
            return Err(ActionFailure::Credentials(alarm_credentials(&format!(
                "HTTP {}",
                reply.status
            ))));
        }
        if reply.status != 200 {
            return Err(ActionFailure::Unknown(format!(
                "2C2P's maintenance API answered HTTP {}",
                reply.status
            )));
        }
        let text = String::from_utf8_lossy(&reply.body);
        let answer = self
            .keys
            .open(&text)
            .and_then(|xml| parse_answer(&xml))
            .map_err(|detail| ActionFailure::Unknown(alarm_untrusted(&detail)))?;
        if CREDENTIALS.contains(&answer.resp_code.as_str()) {
            return Err(ActionFailure::Credentials(alarm_credentials(&format!(
                "respCode {}",
                answer.resp_code
            ))));
        }
        if answer.invoice_no != action.invoice_no
            || answer.process_type != action.process_type.code()
        {
            return Err(ActionFailure::Unknown(alarm_untrusted(&format!(
                "the answer is about {} {}, not {} {}",
                answer.process_type,
                answer.invoice_no,
                action.process_type.code(),
                action.invoice_no
            ))));
        }
        Ok(answer)
    }

    /// The invoice's state and refunds (`RS`).
    async fn status(
        &self,
        invoice_no: &str,
        amount: &str,
        timeout: Duration,
    ) -> Result<ActionAnswer, ActionFailure> {
        let answer = self
            .act(
                &Action {
                    process_type: ProcessType::RefundStatus,
                    invoice_no: invoice_no.to_owned(),
                    amount: amount.to_owned(),
                    idempotency_id: None,
                },
                timeout,
            )
            .await?;
        if answer.resp_code != "00" {
            return Err(ActionFailure::Unknown(format!(
                "2C2P's refund status answered {}",
                answer.resp_code
            )));
        }
        Ok(answer)
    }

    /// What 2C2P holds of `request`'s refund, told apart as the module says; `None` if no
    /// listed refund can be it. An error if 2C2P cannot be asked, or the list is ambiguous.
    pub async fn find_refund(
        &self,
        request: &RefundRequest,
        invoice_no: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let amount = request.currency.decimal_from_minor(request.amount);
        let answer = self
            .status(invoice_no, &amount, self.request_timeout)
            .await
            .map_err(|failure| PspError {
                reason: failure.reason().to_owned(),
            })?;
        self.read_refund(&answer, request, invoice_no)
    }

    fn read_refund(
        &self,
        answer: &ActionAnswer,
        request: &RefundRequest,
        invoice_no: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let void = void_reference(invoice_no);
        if let Some(own) = &request.provider_refund_id {
            if own == &void {
                return Ok(
                    (answer.status == "V").then_some(RefundSettlement::Succeeded {
                        provider_refund_id: void,
                    }),
                );
            }
            return Ok(answer
                .refunds
                .iter()
                .find(|listed| &listed.reference_no == own)
                .map(listed_settlement));
        }
        let ambiguous = |detail: String| {
            tracing::error!(refund_id = %request.refund_id, invoice_no, detail, alarm = "refund-unprovable",
                "2C2P lists refunds payonce cannot tell apart; an operator must match them");
            Err(PspError {
                reason: format!("2C2P's refunds of {invoice_no} cannot be told apart: {detail}"),
            })
        };
        if answer.status == "V" {
            // A void has no reference: it is this refund's only if nothing else can be.
            return if request.siblings.known.iter().any(|known| known == &void) {
                Ok(None)
            } else if request.siblings.unresolved.is_empty() && answer.refunds.is_empty() {
                Ok(Some(RefundSettlement::Succeeded {
                    provider_refund_id: void,
                }))
            } else {
                ambiguous("the invoice was voided".into())
            };
        }
        // Of the refunds no other refund of the payment holds, those of our amount can be ours;
        // one of them is, unless an unanswered sibling of the same amount may own it.
        let amount = request.currency.decimal_from_minor(request.amount);
        let candidates: Vec<&ListedRefund> = unclaimed(answer, request)
            .into_iter()
            .filter(|listed| same_amount(&listed.amount, &amount, request.currency))
            .collect();
        let twins = request
            .siblings
            .unresolved
            .iter()
            .filter(|&&other| other == request.amount)
            .count();
        match candidates[..] {
            [] => Ok(None),
            [only] if twins == 0 => Ok(Some(listed_settlement(only))),
            ref several => ambiguous(format!(
                "{} refunds of its amount no other refund of the payment holds, {twins} other unanswered refunds of that amount",
                several.len(),
            )),
        }
    }

    /// Refunds `request` (the invoice `invoice_no`): `RS` first, always — it says whether the
    /// transaction is settled (refund) or not (void the whole, refuse a part), and, before a
    /// re-send, whether an earlier send of this refund already ran.
    pub async fn refund(
        &self,
        request: &RefundRequest,
        invoice_no: &str,
        timeout: Duration,
    ) -> RefundOutcome {
        let started = tokio::time::Instant::now();
        let left = || timeout.saturating_sub(started.elapsed());
        let amount = request.currency.decimal_from_minor(request.amount);
        let status = match self.status(invoice_no, &amount, left()).await {
            Ok(answer) => answer,
            // A read: nothing of this refund was sent by this call.
            Err(failure) => {
                return RefundOutcome::NotSent {
                    reason: format!(
                        "2C2P's refund status could not be read, so nothing was sent: {}",
                        failure.reason()
                    ),
                }
            }
        };
        if request.resend
            && !crate::mutations::active(crate::mutations::Mutation::TwoC2pRefundResentBlind)
        {
            match self.read_refund(&status, request, invoice_no) {
                Ok(Some(settlement)) => return RefundOutcome::Answered(settlement),
                Ok(None) => {}
                // Ambiguous: never sent again; the refund stays pending for an operator.
                Err(error) => {
                    return RefundOutcome::Unknown {
                        reason: error.reason,
                    }
                }
            }
        }
        let process_type = match status.status.as_str() {
            "S" => ProcessType::Refund,
            "A" | "RS"
                if answer_amount(&status.amount, request.currency) == Some(request.amount)
                    && status.refunds.is_empty() =>
            {
                ProcessType::Void
            }
            "A" | "RS" => {
                return RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: NOT_SETTLED_CODE.to_owned(),
                })
            }
            other => {
                return RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: format!("2c2p_status_{}", other.to_ascii_lowercase()),
                })
            }
        };
        let action = Action {
            process_type,
            invoice_no: invoice_no.to_owned(),
            amount,
            idempotency_id: Some(request.refund_id.clone()),
        };
        match self.act(&action, left()).await {
            Ok(answer) => classify(&answer, process_type, invoice_no, request.resend),
            Err(ActionFailure::NotSent(reason) | ActionFailure::Credentials(reason)) => {
                RefundOutcome::NotSent { reason }
            }
            Err(ActionFailure::Unknown(reason)) => RefundOutcome::Unknown { reason },
        }
    }
}

fn answer_amount(text: &str, currency: Currency) -> Option<i64> {
    currency.minor_from_decimal(text.trim())
}

fn same_amount(listed: &str, ours: &str, currency: Currency) -> bool {
    answer_amount(listed, currency).is_some()
        && answer_amount(listed, currency) == answer_amount(ours, currency)
}

/// What an `R` or `V` answer says of the refund. A refusal of a re-send proves nothing (an
/// earlier send may have landed since `RS` was read, and be why it was refused).
fn classify(
    answer: &ActionAnswer,
    process_type: ProcessType,
    invoice_no: &str,
    resend: bool,
) -> RefundOutcome {
    let code = answer.resp_code.as_str();
    if code == "00" {
        return match process_type {
            ProcessType::Void if answer.status == "V" => {
                RefundOutcome::Answered(RefundSettlement::Succeeded {
                    provider_refund_id: void_reference(invoice_no),
                })
            }
            ProcessType::Refund => match &answer.refund_reference_no {
                Some(reference) => RefundOutcome::Answered(listed_settlement(&ListedRefund {
                    reference_no: reference.clone(),
                    amount: answer.amount.clone(),
                    status: answer.status.clone(),
                })),
                None => RefundOutcome::Unknown {
                    reason: "2C2P accepted the refund without a reference".into(),
                },
            },
            _ => RefundOutcome::Unknown {
                reason: format!("2C2P answered 00 with status {:?}", answer.status),
            },
        };
    }
    if REFUSED.contains(&code) && !resend {
        return RefundOutcome::Answered(RefundSettlement::Failed {
            provider_refund_id: None,
            code: format!("2c2p_{code}"),
        });
    }
    RefundOutcome::Unknown {
        reason: format!(
            "2C2P answered {code} ({:?}) to {}",
            answer.status,
            process_type.code()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> (MaintenanceKeys, MaintenanceKeys) {
        let (merchant_private, merchant_public) = MaintenanceKeys::generate_pair().expect("keys");
        let (twoc2p_private, twoc2p_public) = MaintenanceKeys::generate_pair().expect("keys");
        (
            MaintenanceKeys::from_der(&merchant_private, &twoc2p_public).expect("ours"),
            // 2C2P's side, seen as a mirror: its key signs and decrypts, ours encrypts.
            MaintenanceKeys::from_der(&twoc2p_private, &merchant_public).expect("theirs"),
        )
    }

    fn segment_json(segment: &str) -> String {
        String::from_utf8(b64::decode(segment, Alphabet::UrlSafeNoPad).expect("b64")).expect("utf8")
    }

    #[test]
    fn a_request_is_encrypted_to_2c2p_then_signed_with_the_headers_2c2p_shows() {
        let (ours, theirs) = keys();
        let xml = request_xml(
            "JT01",
            &Action {
                process_type: ProcessType::Refund,
                invoice_no: "0123abc".into(),
                amount: "25.00".into(),
                idempotency_id: Some("rfd_1".into()),
            },
        );
        let token = ours.seal(&xml).expect("sealed");
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(segment_json(parts[0]), JWS_HEADER);
        let jwe = segment_json(parts[1]);
        let jwe_parts: Vec<&str> = jwe.split('.').collect();
        assert_eq!(jwe_parts.len(), 5);
        assert_eq!(segment_json(jwe_parts[0]), JWE_HEADER);
        assert_eq!(
            b64::decode(jwe_parts[1], Alphabet::UrlSafeNoPad)
                .expect("key")
                .len(),
            256
        );
        assert_eq!(
            b64::decode(jwe_parts[2], Alphabet::UrlSafeNoPad)
                .expect("iv")
                .len(),
            12
        );
        assert_eq!(
            b64::decode(jwe_parts[4], Alphabet::UrlSafeNoPad)
                .expect("tag")
                .len(),
            16
        );
        // 2C2P, holding its private key and our public one, reads exactly our XML.
        assert_eq!(theirs.open(&token).expect("opened"), xml);
        assert!(xml.contains("<processType>R</processType>"));
        assert!(xml.contains("<idempotencyID>rfd_1</idempotencyID>"));
        // Each seal is fresh (a new key and IV), so no two tokens are alike.
        assert_ne!(ours.seal(&xml).expect("sealed"), token);
    }

    #[test]
    fn an_answer_is_believed_only_signed_by_2c2p_and_encrypted_to_us() {
        let (ours, theirs) = keys();
        let answer = "<PaymentProcessResponse><respCode>00</respCode></PaymentProcessResponse>";
        let token = theirs.seal(answer).expect("sealed");
        assert_eq!(ours.open(&token).expect("opened"), answer);
        // Signed by anyone else: refused.
        let (stranger, _) = keys();
        assert!(ours.open(&stranger.seal(answer).expect("sealed")).is_err());
        // Our own request sent back: signed with our key, not 2C2P's.
        assert!(ours.open(&ours.seal(answer).expect("sealed")).is_err());
        // A flipped byte in the signed payload, or alg none / HS256, is refused.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let original = parts[1].clone();
        parts[1] = format!("{}A", &original[..original.len() - 1]);
        assert!(ours.open(&parts.join(".")).is_err());
        for alg in [r#"{"alg":"none"}"#, r#"{"alg":"HS256","typ":"JWT"}"#] {
            let forged = format!(
                "{}.{}.{}",
                b64::encode(alg.as_bytes(), Alphabet::UrlSafeNoPad),
                original,
                parts[2]
            );
            assert!(ours.open(&forged).is_err(), "{alg}");
        }
        assert!(ours.open("not a token").is_err());
    }

    #[test]
    fn keys_are_read_from_pem_or_base64_and_certificates_are_refused_with_the_way_out() {
        let (private, public) = MaintenanceKeys::generate_pair().expect("keys");
        let pem = |label: &str, der: &[u8]| {
            let body = b64::encode(der, Alphabet::Standard);
            let lines: Vec<&str> = body
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).expect("ascii"))
                .collect();
            format!(
                "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
                lines.join("\n")
            )
        };
        assert_eq!(
            key_der(&pem("PRIVATE KEY", &private), "PRIVATE KEY").unwrap(),
            private
        );
        assert_eq!(
            key_der(&pem("PUBLIC KEY", &public), "PUBLIC KEY").unwrap(),
            public
        );
        assert_eq!(
            key_der(&b64::encode(&public, Alphabet::Standard), "PUBLIC KEY").unwrap(),
            public
        );
        assert!(key_der(&pem("CERTIFICATE", &public), "PUBLIC KEY")
            .unwrap_err()
            .contains("openssl x509"));
        assert!(key_der(&pem("PUBLIC KEY", &public), "PRIVATE KEY").is_err());
        assert!(key_der("not a key!", "PUBLIC KEY").is_err());
        // Each side's key in the other's place is refused when the keys are built.
        assert!(MaintenanceKeys::from_der(&public, &public).is_err());
        assert!(MaintenanceKeys::from_der(&private, &private).is_err());
    }

    #[test]
    fn answers_are_read_strictly() {
        let rs = r#"<PaymentProcessResponse><version>3.8</version><respCode>00</respCode><processType>RS</processType><invoiceNo>inv1</invoiceNo><amount>25.00</amount><status>S</status><refundList><refund amount="10.00" status="RF" referenceNo="3598743" dateTime="20210225155130" /><refund amount="5.00" status="RP" referenceNo="3598744" dateTime="20210225155131"></refund></refundList></PaymentProcessResponse>"#;
        let answer = parse_answer(rs).expect("read");
        assert_eq!(answer.resp_code, "00");
        assert_eq!(answer.status, "S");
        assert_eq!(answer.invoice_no, "inv1");
        assert_eq!(answer.refunds.len(), 2);
        assert_eq!(answer.refunds[0].reference_no, "3598743");
        assert_eq!(answer.refunds[1].status, "RP");
        for bad in [
            "<Other><respCode>00</respCode></Other>",
            "<PaymentProcessResponse><respCode>00</respCode>",
            "<PaymentProcessResponse><status>S</status></PaymentProcessResponse>",
            "<!DOCTYPE x [<!ENTITY a 'b'>]><PaymentProcessResponse><respCode>&a;</respCode></PaymentProcessResponse>",
            "<PaymentProcessResponse><respCode>00</respCode></PaymentProcessResponse><PaymentProcessResponse/>",
        ] {
            assert!(parse_answer(bad).is_err(), "{bad}");
        }
    }

    mod refunds {
        use super::super::*;
        use super::keys;
        use crate::adapters::psp::transport::scripted::{
            after_connect, not_connected, Scripted, Step,
        };
        use crate::ports::SiblingRefunds;

        const INVOICE: &str = "0123456789abcdef0123456789abcdef";

        struct Fixture {
            maintenance: Maintenance<Scripted>,
            twoc2p: MaintenanceKeys,
        }

        fn fixture(answers: &[&str]) -> Fixture {
            let (ours, theirs) = keys();
            let steps: Vec<Step> = answers
                .iter()
                .map(|xml| {
                    Ok(WireReply {
                        status: 200,
                        body: theirs.seal(xml).expect("sealed").into_bytes(),
                    })
                })
                .collect();
            Fixture {
                maintenance: Maintenance::new(
                    Scripted::new(steps),
                    "/action",
                    "JT01",
                    ours,
                    Duration::from_secs(10),
                ),
                twoc2p: theirs,
            }
        }

        fn fixture_steps(steps: Vec<Step>) -> Maintenance<Scripted> {
            let (ours, _) = keys();
            Maintenance::new(
                Scripted::new(steps),
                "/action",
                "JT01",
                ours,
                Duration::from_secs(10),
            )
        }

        /// What 2C2P read of each call: (processType, actionAmount, idempotencyID present).
        fn sent(fixture: &Fixture) -> Vec<String> {
            fixture
                .maintenance
                .transport()
                .calls()
                .iter()
                .map(|call| {
                    let WireBody::Text(token) = &call.body else {
                        panic!("not a token: {call:?}")
                    };
                    let xml = fixture.twoc2p.open(token).expect("2C2P reads our request");
                    let field = |name: &str| {
                        xml.split(&format!("<{name}>"))
                            .nth(1)
                            .and_then(|rest| rest.split('<').next())
                            .unwrap_or("")
                            .to_owned()
                    };
                    assert_eq!(field("invoiceNo"), INVOICE);
                    assert_eq!(field("merchantID"), "JT01");
                    format!("{} {}", field("processType"), field("actionAmount"))
                })
                .collect()
        }

        fn status(status: &str, refunds: &[(&str, &str, &str)]) -> String {
            let list: String = refunds
                .iter()
                .map(|(reference, amount, state)| {
                    format!(r#"<refund amount="{amount}" status="{state}" referenceNo="{reference}" dateTime="20261206101010"/>"#)
                })
                .collect();
            format!("<PaymentProcessResponse><version>3.8</version><respCode>00</respCode><respDesc>Success</respDesc><processType>RS</processType><invoiceNo>{INVOICE}</invoiceNo><amount>100.00</amount><status>{status}</status><refundList>{list}</refundList></PaymentProcessResponse>")
        }

        fn answer(process_type: &str, code: &str, status: &str, reference: Option<&str>) -> String {
            let reference = reference
                .map(|r| format!("<refundReferenceNo>{r}</refundReferenceNo>"))
                .unwrap_or_default();
            format!("<PaymentProcessResponse><version>3.8</version><respCode>{code}</respCode><processType>{process_type}</processType><invoiceNo>{INVOICE}</invoiceNo><amount>25.00</amount><status>{status}</status>{reference}</PaymentProcessResponse>")
        }

        fn request(amount: i64, resend: bool, siblings: SiblingRefunds) -> RefundRequest {
            RefundRequest {
                refund_id: "rfd_1".into(),
                payment_id: format!("pay_{INVOICE}"),
                provider_payment_id: INVOICE.into(),
                amount,
                currency: Currency::Thb,
                reason: None,
                idempotency_key: format!("payonce-refund-pay_{INVOICE}-1"),
                resend,
                provider_refund_id: None,
                siblings,
            }
        }

        async fn refund(fixture: &Fixture, request: &RefundRequest) -> RefundOutcome {
            fixture
                .maintenance
                .refund(request, INVOICE, Duration::from_secs(10))
                .await
        }

        fn succeeded(id: &str) -> RefundOutcome {
            RefundOutcome::Answered(RefundSettlement::Succeeded {
                provider_refund_id: id.into(),
            })
        }

        #[tokio::test]
        async fn a_settled_payment_is_refunded_after_its_status_is_read() {
            let f = fixture(&[&status("S", &[]), &answer("R", "00", "RF", Some("3598743"))]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                succeeded("3598743")
            );
            assert_eq!(sent(&f), ["RS 25.00", "R 25.00"]);
            let pending = fixture(&[&status("S", &[]), &answer("R", "00", "RP", Some("3598744"))]);
            assert_eq!(
                refund(&pending, &request(2500, false, Default::default())).await,
                RefundOutcome::Answered(RefundSettlement::Pending {
                    provider_refund_id: "3598744".into()
                })
            );
        }

        #[tokio::test]
        async fn before_settlement_the_whole_is_voided_and_a_part_is_refused_unsent() {
            let f = fixture(&[&status("A", &[]), &answer("V", "00", "V", None)]);
            assert_eq!(
                refund(&f, &request(10_000, false, Default::default())).await,
                succeeded(&void_reference(INVOICE))
            );
            assert_eq!(sent(&f), ["RS 100.00", "V 100.00"]);
            let f = fixture(&[&status("A", &[])]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: NOT_SETTLED_CODE.into()
                })
            );
            assert_eq!(sent(&f), ["RS 25.00"]);
        }

        #[tokio::test]
        async fn a_refusal_fails_a_first_send_and_proves_nothing_after_a_resend() {
            let f = fixture(&[&status("S", &[]), &answer("R", "30", "S", None)]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: "2c2p_30".into()
                })
            );
            let f = fixture(&[&status("S", &[]), &answer("R", "30", "S", None)]);
            assert!(matches!(
                refund(&f, &request(2500, true, Default::default())).await,
                RefundOutcome::Unknown { .. }
            ));
            assert_eq!(sent(&f), ["RS 25.00", "R 25.00"]);
        }

        #[tokio::test]
        async fn a_resend_reads_the_list_first_and_sends_only_when_none_can_be_ours() {
            // Ours landed earlier: the one refund no sibling holds, of our amount.
            let siblings = SiblingRefunds {
                known: vec!["111".into()],
                // Another refund unanswered, of another amount: the 25.00 cannot be it.
                unresolved: vec![1500],
            };
            let f = fixture(&[&status(
                "S",
                &[("111", "10.00", "RF"), ("222", "25.00", "RF")],
            )]);
            assert_eq!(
                refund(&f, &request(2500, true, siblings.clone())).await,
                succeeded("222")
            );
            assert_eq!(sent(&f), ["RS 25.00"]);
            // None can be ours: sent again.
            let f = fixture(&[
                &status("S", &[("111", "10.00", "RF")]),
                &answer("R", "00", "RF", Some("333")),
            ]);
            assert_eq!(
                refund(&f, &request(2500, true, siblings)).await,
                succeeded("333")
            );
            assert_eq!(sent(&f), ["RS 25.00", "R 25.00"]);
            // A refund of another amount that no refund of ours holds is not ours: sent.
            let f = fixture(&[
                &status("S", &[("222", "24.00", "RF")]),
                &answer("R", "00", "RF", Some("333")),
            ]);
            assert_eq!(
                refund(&f, &request(2500, true, SiblingRefunds::default())).await,
                succeeded("333")
            );
            // Another refund of the payment of the same amount is unanswered too, or two of our
            // amount are left: ambiguous, never sent again.
            for (siblings, listed) in [
                (
                    SiblingRefunds {
                        known: vec![],
                        unresolved: vec![2500],
                    },
                    vec![("222", "25.00", "RF")],
                ),
                (
                    SiblingRefunds::default(),
                    vec![("222", "25.00", "RF"), ("223", "25.00", "RF")],
                ),
            ] {
                let f = fixture(&[&status("S", &listed)]);
                assert!(matches!(
                    refund(&f, &request(2500, true, siblings)).await,
                    RefundOutcome::Unknown { .. }
                ));
                assert_eq!(sent(&f), ["RS 25.00"]);
            }
            // A voided invoice is a resent void's, if nothing else can be.
            let f = fixture(&[&status("V", &[])]);
            assert_eq!(
                refund(&f, &request(10_000, true, Default::default())).await,
                succeeded(&void_reference(INVOICE))
            );
        }

        #[tokio::test]
        async fn a_lookup_reads_the_refund_by_its_reference_once_known() {
            let f = fixture(&[&status(
                "S",
                &[("111", "10.00", "RF"), ("222", "25.00", "RFF")],
            )]);
            let mut known = request(2500, false, Default::default());
            known.provider_refund_id = Some("222".into());
            assert_eq!(
                f.maintenance.find_refund(&known, INVOICE).await.unwrap(),
                Some(RefundSettlement::Failed {
                    provider_refund_id: Some("222".into()),
                    code: "2c2p_rff".into()
                })
            );
            let f = fixture(&[&status("S", &[("111", "10.00", "RF")])]);
            assert_eq!(
                f.maintenance.find_refund(&known, INVOICE).await.unwrap(),
                None
            );
        }

        #[tokio::test]
        async fn answers_that_are_not_2c2p_s_or_not_about_us_are_never_believed() {
            // Signed by a stranger.
            let (ours, _) = keys();
            let (_, stranger) = keys();
            let forged = stranger.seal(&status("S", &[])).expect("sealed");
            let m = Maintenance::new(
                Scripted::new([Ok(WireReply {
                    status: 200,
                    body: forged.into_bytes(),
                })]),
                "/action",
                "JT01",
                ours,
                Duration::from_secs(10),
            );
            assert!(matches!(
                m.refund(
                    &request(2500, false, Default::default()),
                    INVOICE,
                    Duration::from_secs(10)
                )
                .await,
                RefundOutcome::NotSent { .. }
            ));
            // About another invoice, or another action, after the status was read: unknown.
            let other = answer("R", "00", "RF", Some("1")).replace(INVOICE, "ffff");
            let f = fixture(&[&status("S", &[]), &other]);
            assert!(matches!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Unknown { .. }
            ));
            let f = fixture(&[&status("S", &[]), &answer("V", "00", "V", None)]);
            assert!(matches!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Unknown { .. }
            ));
            // Accepted without a reference, or 42 pending, or 99: unknown.
            for (code, reference) in [("00", None), ("42", None), ("99", None)] {
                let f = fixture(&[&status("S", &[]), &answer("R", code, "RP", reference)]);
                assert!(
                    matches!(
                        refund(&f, &request(2500, false, Default::default())).await,
                        RefundOutcome::Unknown { .. }
                    ),
                    "{code}"
                );
            }
        }

        #[tokio::test]
        async fn no_connection_is_not_sent_a_lost_answer_is_unknown_and_a_401_refused_our_keys() {
            let m = fixture_steps(vec![not_connected()]);
            assert!(matches!(
                m.refund(
                    &request(2500, false, Default::default()),
                    INVOICE,
                    Duration::from_secs(10)
                )
                .await,
                RefundOutcome::NotSent { .. }
            ));
            let (ours, theirs) = keys();
            let rs = theirs.seal(&status("S", &[])).expect("sealed");
            let m = Maintenance::new(
                Scripted::new([
                    Ok(WireReply {
                        status: 200,
                        body: rs.clone().into_bytes(),
                    }),
                    after_connect(),
                ]),
                "/action",
                "JT01",
                ours,
                Duration::from_secs(10),
            );
            assert!(matches!(
                m.refund(
                    &request(2500, false, Default::default()),
                    INVOICE,
                    Duration::from_secs(10)
                )
                .await,
                RefundOutcome::Unknown { .. }
            ));
            let (ours, _) = keys();
            let m = Maintenance::new(
                Scripted::new([
                    Ok(WireReply {
                        status: 200,
                        body: rs.into_bytes(),
                    }),
                    Ok(WireReply {
                        status: 401,
                        body: b"access denied".to_vec(),
                    }),
                ]),
                "/action",
                "JT01",
                ours,
                Duration::from_secs(10),
            );
            // The status answer was sealed for other keys than these: refused, and nothing sent.
            assert!(matches!(
                m.refund(
                    &request(2500, false, Default::default()),
                    INVOICE,
                    Duration::from_secs(10)
                )
                .await,
                RefundOutcome::NotSent { .. }
            ));
            assert_eq!(m.transport().calls().len(), 1);
        }
    }
}
