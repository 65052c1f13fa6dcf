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
//! was lost is told apart from the payment's other refunds by elimination, with those refunds
//! read only after `RS` answered (a sibling 2C2P lists was stored before it was sent, so it is
//! seen): of the refunds `RS` lists, those whose reference payonce stored on another refund of
//! the payment are theirs; every other one must be explained by an unanswered sibling of its
//! amount or be of ours; if exactly one of our amount is left and no unanswered sibling shares
//! that amount, it is ours. Anything else — a refund nothing explains (made in 2C2P's portal), an
//! amount payonce cannot read — is ambiguous and left to an operator (`refund-unprovable`), never
//! re-sent. A refund is sent again only when `RS` shows none that can be ours, and never once
//! 2C2P named it (its reference stored). (A refund made outside
//! payonce, in 2C2P's portal, breaks the elimination; the deploy docs say so.)
//!
//! **Settled or not.** 2C2P refunds only settled transactions (status `S`); before settlement
//! (`A`, and `RS` "ready for settlement") the whole amount is voided instead (`V`), and a
//! partial refund is refused with [`NOT_SETTLED_CODE`] for staff to send once it settled.

use super::b64::{self, Alphabet};
use super::transport::{CallFailure, PspTransport, WireBody, WireCall, WireReply};
use crate::domain::{Currency, RefundSettlement};
use crate::ports::{PspError, RefundOutcome, RefundRequest, SiblingSource};
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
    pub(super) fn seal(&self, xml: &str) -> Result<String, String> {
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
    pub(super) fn open(&self, token: &str) -> Result<String, String> {
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
            // A label is one short line; anything else would echo key material into an error.
            if found.len() > 40 || found.contains(['\n', '\r']) {
                return Err("a malformed PEM header".into());
            }
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
    /// `S`: the settlement (capture) of an authorization, on an account that settles manually.
    Settle,
}

impl ProcessType {
    /// The wire code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Inquiry => "I",
            Self::Refund => "R",
            Self::RefundStatus => "RS",
            Self::Void => "V",
            Self::Settle => "S",
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
    /// Whether the answer carried a `refundList` at all (an absent list is not an empty one).
    pub refund_list_seen: bool,
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
            // A character reference (`&#39;`, `&#x27;`), as XML writers emit them.
            reference if reference.starts_with("&#") => {
                let digits = &reference[2..reference.len() - 1];
                let code = match digits.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16),
                    None => digits.parse::<u32>(),
                }
                .map_err(|_| format!("a character reference payonce cannot read: {reference}"))?;
                char::from_u32(code).ok_or_else(|| {
                    format!("a character reference payonce cannot read: {reference}")
                })?
            }
            other => return Err(format!("an entity payonce does not read: {other}")),
        });
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The children of `PaymentProcessResponse` payonce reads; each at most once.
const READ_FIELDS: [&str; 6] = [
    "respCode",
    "status",
    "invoiceNo",
    "processType",
    "amount",
    "refundReferenceNo",
];

/// Reads a `PaymentProcessResponse`: its direct children's text, and `refundList/refund`'s
/// attributes. Anything not well formed, a field or attribute given twice, an element inside a
/// field, or a listed refund without a reference is refused.
pub fn parse_answer(xml: &str) -> Result<ActionAnswer, String> {
    use xmlparser::{ElementEnd, Token};
    let mut answer = ActionAnswer::default();
    let mut path: Vec<String> = Vec::new();
    let mut pending: Option<String> = None;
    // A `refund` start tag being read (its attributes), and the names already given.
    let mut refund: Option<(ListedRefund, Vec<String>)> = None;
    let mut fields_seen: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut root_seen = false;
    let finish_refund = |refund: Option<(ListedRefund, Vec<String>)>,
                         answer: &mut ActionAnswer|
     -> Result<(), String> {
        if let Some((entry, _)) = refund {
            if entry.reference_no.is_empty() {
                return Err("a listed refund without a referenceNo".into());
            }
            if answer
                .refunds
                .iter()
                .any(|listed| listed.reference_no == entry.reference_no)
            {
                return Err(format!("refund {} listed twice", entry.reference_no));
            }
            answer.refunds.push(entry);
        }
        Ok(())
    };
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
                if path.len() == 2 && READ_FIELDS.contains(&path[1].as_str()) {
                    return Err(format!("an element inside {}", path[1]));
                }
                if refund.is_some() {
                    return Err(format!("an element {name} inside a listed refund"));
                }
                if path.len() == 1 {
                    let read = READ_FIELDS.contains(&name.as_str()) || name == "refundList";
                    if read && fields_seen.contains(&name) {
                        return Err(format!("{name} given twice"));
                    }
                    fields_seen.push(name.clone());
                    text.clear();
                    if name == "refundList" {
                        answer.refund_list_seen = true;
                    }
                }
                if path.len() == 2 && path[1] == "refundList" && name != "refund" {
                    return Err(format!("an element {name} in refundList"));
                }
                if path.len() == 2 && path[1] == "refundList" && name == "refund" {
                    refund = Some((
                        ListedRefund {
                            reference_no: String::new(),
                            amount: String::new(),
                            status: String::new(),
                        },
                        Vec::new(),
                    ));
                }
                pending = Some(name);
            }
            Token::Attribute { local, value, .. } => {
                // Only the attributes of a `refund` start tag itself are read.
                if let (Some((entry, names)), Some("refund")) =
                    (refund.as_mut(), pending.as_deref())
                {
                    let name = local.as_str();
                    if names.iter().any(|seen| seen == name) {
                        return Err(format!("attribute {name} given twice"));
                    }
                    names.push(name.to_owned());
                    let value = unescape(value.as_str())?;
                    match name {
                        "referenceNo" => entry.reference_no = value,
                        "amount" => entry.amount = value,
                        "status" => entry.status = value,
                        _ => {}
                    }
                }
            }
            Token::ElementEnd { end, .. } => match end {
                ElementEnd::Open => {
                    path.push(pending.take().ok_or("an element without a name")?);
                }
                ElementEnd::Empty => {
                    if pending.take().as_deref() == Some("refund") && path.len() == 2 {
                        finish_refund(refund.take(), &mut answer)?;
                    }
                }
                ElementEnd::Close(_, local) => {
                    if path.pop().as_deref() != Some(local.as_str()) {
                        return Err(format!("a stray </{}>", local.as_str()));
                    }
                    if local.as_str() == "refund" && path.len() == 2 {
                        finish_refund(refund.take(), &mut answer)?;
                    }
                    if path.len() == 1 {
                        let value = text.trim().to_owned();
                        match local.as_str() {
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
                        text.clear();
                    }
                }
            },
            Token::Text { text: fragment } => {
                // A field's text, whole (a comment may split it).
                if path.len() == 2 {
                    text.push_str(&unescape(fragment.as_str())?);
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

/// What a refund 2C2P lists (or answers) with `status` is: `RF` refunded, `RFF` and the `RR…`
/// rejections failed, anything else — `RP` pending, or a status payonce does not know, which may
/// be the transaction's — pending under its reference, never failed on a guess.
fn listed_settlement(reference_no: &str, status: &str) -> RefundSettlement {
    let provider_refund_id = reference_no.to_owned();
    match status {
        "RF" => RefundSettlement::Succeeded { provider_refund_id },
        "RFF" => RefundSettlement::Failed {
            provider_refund_id: Some(provider_refund_id),
            code: "2c2p_rff".into(),
        },
        rejected if rejected.starts_with("RR") => RefundSettlement::Failed {
            provider_refund_id: Some(provider_refund_id),
            code: format!("2c2p_{}", rejected.to_ascii_lowercase()),
        },
        _ => RefundSettlement::Pending { provider_refund_id },
    }
}

/// Transaction statuses after which 2C2P refunds (settled; `RF`/`RP` where 2C2P reports a
/// refunded transaction so) and before which it voids (`A` approved, `RS` ready for settlement).
const SETTLED: [&str; 3] = ["S", "RF", "RP"];
const UNSETTLED: [&str; 2] = ["A", "RS"];

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
        siblings: &dyn SiblingSource,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let answer = self
            .status(invoice_no, &status_amount(request), self.request_timeout)
            .await
            .map_err(|failure| PspError {
                reason: failure.reason().to_owned(),
            })?;
        self.read_refund(&answer, request, invoice_no, siblings)
            .await
    }

    /// Which of the refunds `answer` (a refund status) lists is `request`'s. The siblings are
    /// read only now, after the list: a sibling whose refund 2C2P lists was stored before it
    /// was sent, so it is seen here, as known or unanswered.
    async fn read_refund(
        &self,
        answer: &ActionAnswer,
        request: &RefundRequest,
        invoice_no: &str,
        siblings: &dyn SiblingSource,
    ) -> Result<Option<RefundSettlement>, PspError> {
        let void = void_reference(invoice_no);
        let ambiguous = |detail: String| {
            tracing::error!(refund_id = %request.refund_id, invoice_no, detail, alarm = "refund-unprovable",
                "2C2P lists refunds payonce cannot tell apart; an operator must match them");
            Err(PspError {
                reason: format!("2C2P's refunds of {invoice_no} cannot be told apart: {detail}"),
            })
        };
        // Once 2C2P named the refund, it is that one or none: never another, never sent again.
        if let Some(own) = &request.provider_refund_id {
            if own == &void {
                return match answer.status.as_str() {
                    "V" => Ok(Some(RefundSettlement::Succeeded {
                        provider_refund_id: void,
                    })),
                    "VP" => Ok(Some(RefundSettlement::Pending {
                        provider_refund_id: void,
                    })),
                    _ => Ok(None),
                };
            }
            return Ok(answer
                .refunds
                .iter()
                .find(|listed| &listed.reference_no == own)
                .map(|listed| listed_settlement(&listed.reference_no, &listed.status)));
        }
        let voided = answer.status == "V" || answer.status == "VP";
        // Whether a refund of ours is listed is the whole proof that it need not be sent again,
        // so a list that is missing, or empty while 2C2P calls the invoice refunded, proves
        // nothing (an answer of another shape must never read as "no refund").
        if !voided && !answer.refund_list_seen {
            return ambiguous("its refund status carries no refundList".into());
        }
        if matches!(answer.status.as_str(), "RF" | "RP") && answer.refunds.is_empty() {
            return ambiguous(format!(
                "the invoice is {} but its refundList is empty",
                answer.status
            ));
        }
        let siblings = siblings.siblings().await.map_err(|reason| PspError {
            reason: format!("the payment's other refunds could not be read: {reason}"),
        })?;
        if voided {
            // A void has no reference: it is this refund's only if nothing else can be.
            return if siblings.known.iter().any(|known| known == &void) {
                Ok(None)
            } else if siblings.unresolved.is_empty()
                && answer.refunds.is_empty()
                && request.amount == request.captured
            {
                Ok(Some(if answer.status == "V" {
                    RefundSettlement::Succeeded {
                        provider_refund_id: void,
                    }
                } else {
                    RefundSettlement::Pending {
                        provider_refund_id: void,
                    }
                }))
            } else {
                ambiguous(format!("the invoice is {}", answer.status))
            };
        }
        // Every listed refund no sibling holds must be explained: by an unanswered sibling of
        // its amount, or as ours. One that cannot be read, or that nothing explains (a refund
        // made outside payonce), makes the list ambiguous.
        let mut unexplained: Vec<i64> = siblings.unresolved.clone();
        let mut candidates = Vec::new();
        for listed in answer
            .refunds
            .iter()
            .filter(|listed| !siblings.known.contains(&listed.reference_no))
        {
            let Some(amount) = answer_amount(&listed.amount, request.currency) else {
                return ambiguous(format!(
                    "a listed amount {:?} payonce cannot read",
                    listed.amount
                ));
            };
            if amount == request.amount {
                candidates.push(listed);
            } else if let Some(at) = unexplained.iter().position(|&other| other == amount) {
                unexplained.remove(at);
            } else {
                return ambiguous(format!(
                    "refund {} of {} belongs to no refund of the payment",
                    listed.reference_no, listed.amount
                ));
            }
        }
        let twins = unexplained
            .iter()
            .filter(|&&other| other == request.amount)
            .count();
        match candidates[..] {
            [] => Ok(None),
            [only] if twins == 0 => Ok(Some(listed_settlement(&only.reference_no, &only.status))),
            ref several => ambiguous(format!(
                "{} refunds of its amount no other refund of the payment holds, {twins} other unanswered refunds of that amount",
                several.len(),
            )),
        }
    }

    /// Refunds `request` (the invoice `invoice_no`): `RS` first, always — it says whether the
    /// transaction is settled (refund) or not (void the whole, refuse a part), and, before a
    /// re-send, whether an earlier send of this refund already ran. A refund 2C2P already named
    /// is never sent again.
    pub async fn refund(
        &self,
        request: &RefundRequest,
        invoice_no: &str,
        siblings: &dyn SiblingSource,
        timeout: Duration,
    ) -> RefundOutcome {
        let started = tokio::time::Instant::now();
        let left = || timeout.saturating_sub(started.elapsed());
        let status = match self
            .status(invoice_no, &status_amount(request), left())
            .await
        {
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
        let resend = request.resend || request.provider_refund_id.is_some();
        if resend && !crate::mutations::active(crate::mutations::Mutation::TwoC2pRefundResentBlind)
        {
            match self
                .read_refund(&status, request, invoice_no, siblings)
                .await
            {
                Ok(Some(settlement)) => return RefundOutcome::Answered(settlement),
                Ok(None) if request.provider_refund_id.is_some() => {
                    tracing::error!(refund_id = %request.refund_id, invoice_no, alarm = "refund-unprovable",
                        "2C2P does not list a refund it named; it is never sent again");
                    return RefundOutcome::Unknown {
                        reason: "2C2P does not list the refund it named".into(),
                    };
                }
                Ok(None) => {}
                // Ambiguous: never sent again; the refund stays pending for an operator.
                Err(error) => {
                    return RefundOutcome::Unknown {
                        reason: error.reason,
                    }
                }
            }
        }
        let transaction = answer_amount(&status.amount, request.currency);
        let process_type = match status.status.as_str() {
            settled if SETTLED.contains(&settled) => ProcessType::Refund,
            // Before settlement 2C2P voids the whole transaction: only a refund of all that was
            // captured, as our ledger and 2C2P both say, with no refund before it.
            unsettled
                if UNSETTLED.contains(&unsettled)
                    && request.captured > 0
                    && request.amount == request.captured
                    && transaction == Some(request.captured)
                    && status.refunds.is_empty() =>
            {
                ProcessType::Void
            }
            // A part before settlement: nothing of it can have been sent (a refund goes out only
            // once settled, which is final, and a void only for the whole), re-send or not.
            unsettled
                if UNSETTLED.contains(&unsettled)
                    && (!resend || request.amount != request.captured) =>
            {
                return RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: NOT_SETTLED_CODE.to_owned(),
                })
            }
            other if !resend => {
                return RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: format!("2c2p_status_{}", other.to_ascii_lowercase()),
                })
            }
            // A re-send meeting a state it cannot act on (a void pending, a part before
            // settlement): an earlier send may be why; nothing is decided.
            other => {
                return RefundOutcome::Unknown {
                    reason: format!("a re-send found the transaction {other:?}; nothing sent"),
                }
            }
        };
        let action = Action {
            process_type,
            invoice_no: invoice_no.to_owned(),
            amount: match process_type {
                ProcessType::Void => request.currency.decimal_from_minor(request.captured),
                _ => request.currency.decimal_from_minor(request.amount),
            },
            // Per action, so that a void re-sent as a refund after settlement is not the same key.
            idempotency_id: Some(format!("{}-{}", request.refund_id, process_type.code())),
        };
        match self.act(&action, left()).await {
            Ok(answer) => {
                let outcome = classify(&answer, process_type, invoice_no, request, resend);
                self.checked_success(outcome, &answer, request, siblings, resend)
                    .await
            }
            Err(ActionFailure::NotSent(reason) | ActionFailure::Credentials(reason)) => {
                RefundOutcome::NotSent { reason }
            }
            Err(ActionFailure::Unknown(reason)) => RefundOutcome::Unknown { reason },
        }
    }

    /// A refund 2C2P answered with a reference another refund of the payment holds is not
    /// believed (only a re-send reads the siblings for it: a first send's reference is fresh).
    async fn checked_success(
        &self,
        outcome: RefundOutcome,
        answer: &ActionAnswer,
        request: &RefundRequest,
        siblings: &dyn SiblingSource,
        resend: bool,
    ) -> RefundOutcome {
        let Some(reference) = &answer.refund_reference_no else {
            return outcome;
        };
        if !resend {
            return outcome;
        }
        match siblings.siblings().await {
            Ok(siblings) if !siblings.known.contains(reference) => outcome,
            Ok(_) => {
                tracing::error!(refund_id = %request.refund_id, reference, alarm = "refund-unprovable",
                    "2C2P answered a refund with another refund's reference; not believed");
                RefundOutcome::Unknown {
                    reason: format!(
                        "2C2P answered with reference {reference}, which another refund holds"
                    ),
                }
            }
            Err(reason) => RefundOutcome::Unknown {
                reason: format!("the payment's other refunds could not be read: {reason}"),
            },
        }
    }
}

/// The `actionAmount` of a refund status or inquiry: the transaction's, as 2C2P's samples send
/// it (the refund's if payonce does not know it).
fn status_amount(request: &RefundRequest) -> String {
    let amount = if request.captured > 0 {
        request.captured
    } else {
        request.amount
    };
    request.currency.decimal_from_minor(amount)
}

fn answer_amount(text: &str, currency: Currency) -> Option<i64> {
    currency.minor_from_decimal(text.trim())
}

/// What an `R` or `V` answer says of the refund. A refusal of a re-send proves nothing (an
/// earlier send may have landed since `RS` was read, and be why it was refused); an accepted
/// refund of another amount than ours is not believed.
fn classify(
    answer: &ActionAnswer,
    process_type: ProcessType,
    invoice_no: &str,
    request: &RefundRequest,
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
                Some(reference)
                    if answer_amount(&answer.amount, request.currency) == Some(request.amount) =>
                {
                    RefundOutcome::Answered(listed_settlement(reference, &answer.status))
                }
                Some(reference) => {
                    tracing::error!(refund_id = %request.refund_id, reference, amount = %answer.amount,
                        alarm = "psp-answer-untrusted", "2C2P accepted a refund of another amount");
                    RefundOutcome::Unknown {
                        reason: format!("2C2P accepted refund {reference} of {}", answer.amount),
                    }
                }
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
pub(super) mod tests {
    use super::*;

    /// Our keys and 2C2P's, each pair made fresh: ours seals to 2C2P and opens its answers,
    /// 2C2P's (a mirror) opens our requests and seals its answers.
    pub(in crate::adapters::psp) fn keys() -> (MaintenanceKeys, MaintenanceKeys) {
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
        // A header without its closing dashes never shows the key that follows it.
        let body = b64::encode(&private, Alphabet::Standard);
        let broken = format!("-----BEGIN PRIVATE KEY\n{body}\n-----END PRIVATE KEY-----\n");
        let error = key_der(&broken, "PRIVATE KEY").unwrap_err();
        assert!(!error.contains(&body[..40]), "{error}");
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
        // A field payonce does not read may repeat, and hold a character reference.
        let loose = parse_answer("<PaymentProcessResponse><respCode>&#48;0</respCode><respDesc>Merchant&#39;s</respDesc><respDesc>again</respDesc></PaymentProcessResponse>").unwrap();
        assert_eq!(loose.resp_code, "00");
        // A comment inside a field splits its text, which is read whole.
        let split = parse_answer("<PaymentProcessResponse><respCode>0<!-- -->0</respCode><status>R<!---->F</status></PaymentProcessResponse>").unwrap();
        assert_eq!(
            (split.resp_code.as_str(), split.status.as_str()),
            ("00", "RF")
        );
        for bad in [
            "<Other><respCode>00</respCode></Other>",
            "<PaymentProcessResponse><respCode>00</respCode>",
            "<PaymentProcessResponse><status>S</status></PaymentProcessResponse>",
            "<!DOCTYPE x [<!ENTITY a 'b'>]><PaymentProcessResponse><respCode>&a;</respCode></PaymentProcessResponse>",
            "<PaymentProcessResponse><respCode>00</respCode></PaymentProcessResponse><PaymentProcessResponse/>",
            // A field twice (the last would win), an element inside a field, a child of a
            // listed refund, an attribute twice, a listed refund without a reference.
            "<PaymentProcessResponse><respCode>99</respCode><respCode>00</respCode></PaymentProcessResponse>",
            "<PaymentProcessResponse><respCode><x/>00</respCode></PaymentProcessResponse>",
            r#"<PaymentProcessResponse><respCode>00</respCode><refundList><refund referenceNo="1" amount="25.00" status="RF"><sub amount="5.00" status="RFF"/></refund></refundList></PaymentProcessResponse>"#,
            r#"<PaymentProcessResponse><respCode>00</respCode><refundList><refund referenceNo="2" referenceNo="3" amount="1.00" status="RF"/></refundList></PaymentProcessResponse>"#,
            r#"<PaymentProcessResponse><respCode>00</respCode><refundList><refund amount="1.00" status="RF"/></refundList></PaymentProcessResponse>"#,
            // Something else in the list (a shape payonce does not know must not read as "no
            // refunds"), or one refund listed twice.
            r#"<PaymentProcessResponse><respCode>00</respCode><refundList><refundItem referenceNo="1" amount="1.00" status="RF"/></refundList></PaymentProcessResponse>"#,
            r#"<PaymentProcessResponse><respCode>00</respCode><refundList><refund referenceNo="1" amount="1.00" status="RF"/><refund referenceNo="1" amount="1.00" status="RF"/></refundList></PaymentProcessResponse>"#,
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

        /// A refund request of a 100.00 payment, with the siblings a source would read.
        struct Req {
            request: RefundRequest,
            siblings: SiblingRefunds,
        }

        fn request(amount: i64, resend: bool, siblings: SiblingRefunds) -> Req {
            Req {
                request: RefundRequest {
                    refund_id: "rfd_1".into(),
                    payment_id: format!("pay_{INVOICE}"),
                    provider_payment_id: INVOICE.into(),
                    amount,
                    currency: Currency::Thb,
                    reason: None,
                    idempotency_key: format!("payonce-refund-pay_{INVOICE}-1"),
                    resend,
                    provider_refund_id: None,
                    captured: 10_000,
                },
                siblings,
            }
        }

        async fn refund(fixture: &Fixture, request: &Req) -> RefundOutcome {
            fixture
                .maintenance
                .refund(
                    &request.request,
                    INVOICE,
                    &request.siblings,
                    Duration::from_secs(10),
                )
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
            assert_eq!(sent(&f), ["RS 100.00", "R 25.00"]);
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
            assert_eq!(sent(&f), ["RS 100.00"]);
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
            assert_eq!(sent(&f), ["RS 100.00", "R 25.00"]);
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
            assert_eq!(sent(&f), ["RS 100.00"]);
            // None can be ours: sent again.
            let f = fixture(&[
                &status("S", &[("111", "10.00", "RF")]),
                &answer("R", "00", "RF", Some("333")),
            ]);
            assert_eq!(
                refund(&f, &request(2500, true, siblings)).await,
                succeeded("333")
            );
            assert_eq!(sent(&f), ["RS 100.00", "R 25.00"]);
            // A refund of another amount is explained by an unanswered sibling of that amount;
            // ours is not there: sent.
            let f = fixture(&[
                &status("S", &[("222", "24.00", "RF")]),
                &answer("R", "00", "RF", Some("333")),
            ]);
            let explained = SiblingRefunds {
                known: vec![],
                unresolved: vec![2400],
            };
            assert_eq!(
                refund(&f, &request(2500, true, explained)).await,
                succeeded("333")
            );
            // Another refund of the payment of the same amount is unanswered too, two of our
            // amount are left, a refund nothing of ours explains (made outside payonce), or an
            // amount payonce cannot read: ambiguous, never sent again.
            for (siblings, listed) in [
                (SiblingRefunds::default(), vec![("222", "24.00", "RF")]),
                (SiblingRefunds::default(), vec![("222", "1,000.00", "RF")]),
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
                assert_eq!(sent(&f), ["RS 100.00"]);
            }
            // A voided invoice is a resent void's, if nothing else can be.
            let f = fixture(&[&status("V", &[])]);
            assert_eq!(
                refund(&f, &request(10_000, true, Default::default())).await,
                succeeded(&void_reference(INVOICE))
            );
        }

        #[tokio::test]
        async fn a_resend_never_reads_a_missing_or_contradicting_list_as_no_refund() {
            // The refund status with no refundList at all (another shape of answer), or with an
            // empty one while 2C2P calls the invoice refunded: nothing proves the earlier send
            // did not land, so nothing is sent again.
            let without_list =
                |state: &str| status(state, &[]).replace("<refundList></refundList>", "");
            for rs in [
                without_list("S"),
                without_list("RF"),
                status("RF", &[]),
                status("RP", &[]),
            ] {
                let f = fixture(&[&rs, &answer("R", "00", "RF", Some("333"))]);
                let outcome = refund(&f, &request(2500, true, Default::default())).await;
                assert!(
                    matches!(outcome, RefundOutcome::Unknown { .. }),
                    "{rs}: {outcome:?}"
                );
                assert_eq!(sent(&f), ["RS 100.00"], "{rs}");
                // Reconcile's look reads it the same way: no answer, never "not there".
                let f = fixture(&[&rs]);
                let looked = f
                    .maintenance
                    .find_refund(
                        &request(2500, true, Default::default()).request,
                        INVOICE,
                        &SiblingRefunds::default(),
                    )
                    .await;
                assert!(looked.is_err(), "{rs}: {looked:?}");
            }
            // A first send needs no list: it is decided by the transaction's status alone.
            let f = fixture(&[&without_list("S"), &answer("R", "00", "RF", Some("333"))]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                succeeded("333")
            );
        }

        #[tokio::test]
        async fn a_refund_2c2p_named_is_never_sent_again() {
            // Its reference stored, but not listed (a lag, or a channel listing it otherwise):
            // unknown, nothing sent, whatever the resend flag says.
            let f = fixture(&[&status("S", &[("111", "10.00", "RF")])]);
            let mut named = request(2500, false, Default::default());
            named.request.provider_refund_id = Some("222".into());
            assert!(matches!(
                refund(&f, &named).await,
                RefundOutcome::Unknown { .. }
            ));
            assert_eq!(sent(&f), ["RS 100.00"]);
            // Listed: read as 2C2P lists it.
            let f = fixture(&[&status("S", &[("222", "25.00", "RP")])]);
            assert_eq!(
                refund(&f, &named).await,
                RefundOutcome::Answered(RefundSettlement::Pending {
                    provider_refund_id: "222".into()
                })
            );
        }

        #[tokio::test]
        async fn an_accepted_refund_is_believed_only_for_our_amount_and_never_read_failed_on_a_guess(
        ) {
            // 2C2P's `status` may be the transaction's: a reference with status S is pending,
            // for the refund status to settle, never failed.
            let f = fixture(&[&status("S", &[]), &answer("R", "00", "S", Some("555"))]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Answered(RefundSettlement::Pending {
                    provider_refund_id: "555".into()
                })
            );
            // Each action carries its own idempotency id: the refund id and the action.
            let token = match &f.maintenance.transport().calls()[1].body {
                WireBody::Text(token) => token.clone(),
                other => panic!("{other:?}"),
            };
            let xml = f.twoc2p.open(&token).unwrap();
            assert!(
                xml.contains("<idempotencyID>rfd_1-R</idempotencyID>"),
                "{xml}"
            );
            // Accepted for another amount: not believed.
            let other = answer("R", "00", "RF", Some("556")).replace("25.00", "24.00");
            let f = fixture(&[&status("S", &[]), &other]);
            assert!(matches!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Unknown { .. }
            ));
            // A re-send answered with a reference a sibling holds: not believed.
            let f = fixture(&[&status("S", &[]), &answer("R", "00", "RF", Some("111"))]);
            let holds = SiblingRefunds {
                known: vec!["111".into()],
                unresolved: vec![],
            };
            assert!(matches!(
                refund(&f, &request(2500, true, holds)).await,
                RefundOutcome::Unknown { .. }
            ));
        }

        #[tokio::test]
        async fn a_void_is_decided_by_our_ledger_and_a_resend_meeting_an_odd_state_decides_nothing()
        {
            // 2C2P echoing our amount back in the status (25.00 of a 100.00 payment): still a
            // part, refused unsent, never a void of the whole.
            let echo = status("A", &[]).replace("100.00", "25.00");
            let f = fixture(&[&echo]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: NOT_SETTLED_CODE.into()
                })
            );
            // Our ledger's capture unknown: never a void.
            let f = fixture(&[&status("A", &[])]);
            let mut unknown = request(10_000, false, Default::default());
            unknown.request.captured = 0;
            assert!(matches!(
                refund(&f, &unknown).await,
                RefundOutcome::Answered(RefundSettlement::Failed { .. })
            ));
            // A re-send finding a void pending: nothing decided.
            let f = fixture(&[&status("VP", &[])]);
            let outcome = refund(&f, &request(2500, true, Default::default())).await;
            assert!(
                matches!(outcome, RefundOutcome::Unknown { .. }),
                "{outcome:?}"
            );
            assert_eq!(sent(&f), ["RS 100.00"]);
            // A re-sent part finding the payment unsettled: none of it can have gone out (a
            // refund is sent only once settled, for good), so it fails as the first send did.
            let f = fixture(&[&status("A", &[])]);
            assert_eq!(
                refund(&f, &request(2500, true, Default::default())).await,
                RefundOutcome::Answered(RefundSettlement::Failed {
                    provider_refund_id: None,
                    code: NOT_SETTLED_CODE.into()
                })
            );
            // Our own void read pending: pending under its name, not "unlisted".
            let f = fixture(&[&status("VP", &[])]);
            let mut voided = request(10_000, true, Default::default());
            voided.request.provider_refund_id = Some(void_reference(INVOICE));
            assert_eq!(
                refund(&f, &voided).await,
                RefundOutcome::Answered(RefundSettlement::Pending {
                    provider_refund_id: void_reference(INVOICE)
                })
            );
            // A refunded transaction reads as settled: a later part is refunded.
            let f = fixture(&[
                &status("RF", &[("111", "10.00", "RF")]),
                &answer("R", "00", "RF", Some("333")),
            ]);
            assert_eq!(
                refund(&f, &request(2500, false, Default::default())).await,
                succeeded("333")
            );
        }

        #[tokio::test]
        async fn a_lookup_reads_the_refund_by_its_reference_once_known() {
            let f = fixture(&[&status(
                "S",
                &[("111", "10.00", "RF"), ("222", "25.00", "RFF")],
            )]);
            let mut known = request(2500, false, Default::default());
            known.request.provider_refund_id = Some("222".into());
            assert_eq!(
                f.maintenance
                    .find_refund(&known.request, INVOICE, &known.siblings)
                    .await
                    .unwrap(),
                Some(RefundSettlement::Failed {
                    provider_refund_id: Some("222".into()),
                    code: "2c2p_rff".into()
                })
            );
            let f = fixture(&[&status("S", &[("111", "10.00", "RF")])]);
            assert_eq!(
                f.maintenance
                    .find_refund(&known.request, INVOICE, &known.siblings)
                    .await
                    .unwrap(),
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
                    &request(2500, false, Default::default()).request,
                    INVOICE,
                    &SiblingRefunds::default(),
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
                    &request(2500, false, Default::default()).request,
                    INVOICE,
                    &SiblingRefunds::default(),
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
                    &request(2500, false, Default::default()).request,
                    INVOICE,
                    &SiblingRefunds::default(),
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
                    &request(2500, false, Default::default()).request,
                    INVOICE,
                    &SiblingRefunds::default(),
                    Duration::from_secs(10)
                )
                .await,
                RefundOutcome::NotSent { .. }
            ));
            assert_eq!(m.transport().calls().len(), 1);
        }
    }
}
