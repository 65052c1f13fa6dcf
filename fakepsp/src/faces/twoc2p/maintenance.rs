//! The 2C2P face's Payment Maintenance API ("Payment Action 2.0", notes §12 and
//! developer.2c2p.com's payment maintenance guides): inquiry, refund status, refund, void and
//! settlement of a payment made through the PGW face, from the same ledger.
//!
//! - **Endpoint**: `POST /2C2PFrontend/PaymentAction/2.0/action` (the sandbox's path), body a
//!   compact JWS as text (`Content-Type: text/plain`; the fake does not look at the request's
//!   content type), answered `text/plain` (the server's part). The envelope is the `jose`
//!   module's: verified with the merchant's public key before anything else, then decrypted with
//!   2C2P's private key ([`TwoC2pMaintenanceKeys`]; generated on first use when the model was
//!   given none). A signature that does not verify, any other `alg`, a `crit`, a malformed
//!   envelope or a payload that does not decrypt → HTTP 401 with a plain-text body and no
//!   token (a third party observed 401 from the real API; 2C2P documents `96` "unable to
//!   decrypt", which the fake never answers).
//! - **Request** (UTF-8 XML, element order not significant): `<PaymentProcessRequest>` with
//!   `version`, `merchantID`, `invoiceNo`, `processType`, `actionAmount` (decimal major units
//!   with the currency's decimals, read exactly as the PGW face reads amounts) and
//!   `idempotencyID`, which the fake accepts and IGNORES: whether 2C2P honours it is
//!   UNCONFIRMED, so a repeated `R` is a second refund (the ID is only kept as the refund's
//!   `idempotency_key` in `_fake/refunds`, or a settle's capture's in `_fake/charges`). The parser takes one flat element list, an optional
//!   XML declaration, whitespace between elements and the five predefined entities; anything
//!   else (attributes, comments, nesting, an element twice, an element not listed) is refused
//!   with respCode `99` "unable to complete" (UNCONFIRMED: 2C2P's code for it), as is a missing
//!   `version` or `processType`; a missing `merchantID` is `03`, a missing `invoiceNo` `15`.
//! - **Answers** are signed (reverse envelope: encrypted to the merchant's public key, signed
//!   PS256 with 2C2P's key), HTTP 200: `<PaymentProcessResponse>` with `version` `3.8`,
//!   `timeStamp` (`ddMMyyHHmmss`, the ledger's clock, UTC), `respCode`, `respDesc`,
//!   `processType`, `invoiceNo`, and, where the transaction exists, `amount`, `status` and
//!   `referenceNo` (the PGW face's `tranRef`). Checks run in this order: `merchantID` not the
//!   face's → `03`; a missing `processType` → `99`; any other than `I`, `RS`, `R`, `V`, `S` →
//!   `17`; no `invoiceNo` → `15`; an invoice with no charge (never paid, or only a token) → `16`
//!   "transaction doesn't exist". Every answer after that describes the transaction (`amount`,
//!   `status`, `referenceNo`).
//! - **Manual settlement** (`ModelConfig::twoc2p_manual_settlement`, a setting of the merchant
//!   account, off by default): on such an account every payment the PGW face approves is only
//!   an authorization (the ledger's manual capture, `requires_capture`: `_fake/charges` outcome
//!   `authorized`, nothing captured) until `S` settles it; the PGW face's answers and
//!   notifications read `0000` as for any approval. One neither settled nor voided lapses after
//!   `authorization_expires_after` (the ledger cancels it: status `V`, no notification; the
//!   PGW inquiry then reads `0003`, as for a voided payment).
//! - **Status** of the transaction: approved and not yet settled `A` (an authorization of a
//!   manual-settlement account, or a captured charge before it settles); settled `S` (a
//!   captured charge settles `twoc2p_settle_after` after it was captured — when it succeeded,
//!   or on a manual-settlement account when `S` captured it —, on the ledger's clock; zero
//!   settles at once; settlement is read, not an event, since 2C2P notifies none); voided `V`
//!   (voided, or an authorization that lapsed); waiting (processing, 3-D Secure) `AP`; failed
//!   `PF`. A refunded transaction still reads `S` (what 2C2P's inquiry says then is
//!   UNCONFIRMED; `RS` lists the refunds).
//! - `I` → `00` with the status and the transaction's amount.
//! - `RS` → `00`, the status and amount, and `refundList` with every refund of the invoice in
//!   creation order (`<refund amount status referenceNo dateTime/>`, status `RF` refunded, `RP`
//!   pending, `RFF` failed, `dateTime` `yyyyMMddHHmmss`).
//! - `R` → an `actionAmount` missing, malformed, or not positive → `18`; a transaction not
//!   settled (`S`) → `12` ("refunds can only be requested for settled transactions"); more than
//!   is left after the refunds that did not fail — including any refund once it is fully
//!   refunded (the fake's choice between `30` and `49`: `30` is the documented code) → `30`;
//!   else `00` and a refund in the ledger, whose fate follows the charge's test token as on
//!   every face (`RF`, `RP` for `pm_fake_refund_pending` until `refund_pending_for`, `RF` then
//!   `RFF` for `pm_card_refundFail`), answered with `amount` the refund's, `status` its status
//!   and a fresh `refundReferenceNo` (ten digits, the refund's id).
//! - `V` → `A` voids: `00`, status `V`, the charge cancelled in the ledger (`_fake/charges`
//!   outcome `canceled`; the money never moved: a captured charge is voided, an authorization
//!   released); `S` → `21` (void not allowed); `V` → `29` (already voided); `AP` or `PF` → `12`.
//! - `S` (settle: "captures / settles a pre-authorised transaction", notes "2C2P authorize now,
//!   settle later") → on an account without manual settlement `32` "Settlement is not
//!   required." whatever the transaction's status. With it: an `actionAmount` missing,
//!   malformed, or not positive → `18` (the older settle pages make it mandatory); then by the
//!   transaction: already captured (reading `A` or `S`) → `39` "Transaction already settled.";
//!   voided or lapsed (`V`) → `31` "Settlement is not allowed."; `AP` or `PF` → `12`; an
//!   authorization (`A`) and an amount other than its whole → `33` "Partial settlement is not
//!   allowed." (2C2P's older pages allow a part: the fake does not, payonce settles the whole);
//!   else the whole is captured in the ledger (`_fake/charges` outcome `succeeded`,
//!   `amount_captured` the amount, one capture, under the `idempotencyID` if sent) → `00`,
//!   status `S`. From then on the transaction reads by the status rules above (`A` until
//!   `twoc2p_settle_after` after the settle, then `S`: voidable before, refundable after); the
//!   PGW face still reads `0000` and sends nothing (2C2P documents no notification for a
//!   settle). The codes are 2C2P's documented maintenance result codes; which one 2C2P answers
//!   in each case is UNCONFIRMED (the fake's choice, above).
//! - **Inspection**: every call is recorded in order (`GET /_fake/2c2p/actions`,
//!   [`TwoC2pAction`]), the refused ones with their HTTP 401 and no fields.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::jose::{open_request, seal_answer};
use super::{decimal_from_minor, minor_from_decimal, transaction_date_time, TwoC2pFace};
use crate::faces::dates::iso8601;
use crate::ledger::{
    escape_html, millis, CancelAttempt, CaptureAttempt, Handled, Intent, Ledger, Refund,
    RefundAttempt, RefundStatus, Reply, Status,
};
use crate::twoc2p_keys::{
    MaintenanceKeys, TwoC2pKeyError, TwoC2pMaintenanceKeys, TwoC2pMerchantKeys,
};

/// `POST` Payment Action 2.0.
pub(crate) const ACTION_PATH: &str = "/2C2PFrontend/PaymentAction/2.0/action";

/// The version the answers carry.
const VERSION: &str = "3.8";

/// The plain-text body of a refused envelope.
pub(crate) const UNAUTHORIZED: &str = "Unauthorized";

/// One call of the Payment Maintenance API, as `GET /_fake/2c2p/actions`
/// ([`FakeModel::twoc2p_actions`](crate::model::FakeModel::twoc2p_actions)) lists it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TwoC2pAction {
    /// The request's `processType` (`I`, `RS`, `R`, `V`, ...); `None` when the envelope was
    /// refused or the XML did not parse.
    pub process_type: Option<String>,
    /// The request's `invoiceNo`, likewise.
    pub invoice_no: Option<String>,
    /// The request's `actionAmount` as sent, if it had one.
    pub action_amount: Option<String>,
    /// The answer's `respCode`; `None` for a refused envelope (HTTP 401).
    pub resp_code: Option<String>,
    /// The HTTP status answered: 200, 401, or 500 if the fake's keys are unusable.
    pub http_status: u16,
}

/// What the face keeps for the maintenance API.
#[derive(Debug, Default)]
pub(crate) struct Maintenance {
    /// The keys it was given, if any.
    configured: Option<TwoC2pMaintenanceKeys>,
    /// The keys read (or made) on first use.
    keys: Option<Result<MaintenanceKeys, TwoC2pKeyError>>,
    /// How long after it succeeded a charge settles.
    settle_after: Duration,
    /// Every call, in order.
    actions: Vec<TwoC2pAction>,
    /// Refund id (`refundReferenceNo`) → the invoice it refunded.
    refund_invoices: BTreeMap<String, String>,
}

impl Maintenance {
    /// With the keys `configured` (else made on first use), settling charges `settle_after`
    /// after they succeeded.
    pub(crate) fn new(configured: Option<TwoC2pMaintenanceKeys>, settle_after: Duration) -> Self {
        Self {
            configured,
            settle_after,
            ..Self::default()
        }
    }

    /// The keys, read or made now if not yet.
    fn keys(&mut self) -> Result<&MaintenanceKeys, TwoC2pKeyError> {
        let configured = &self.configured;
        self.keys
            .get_or_insert_with(|| match configured {
                Some(keys) => keys.parse(),
                None => TwoC2pMaintenanceKeys::generate().and_then(|keys| keys.parse()),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The invoice the refund `refund_id` refunded.
    pub(crate) fn refund_invoice(&self, refund_id: &str) -> Option<&String> {
        self.refund_invoices.get(refund_id)
    }
}

/// A parsed request.
#[derive(Debug, Default)]
struct Request {
    merchant_id: Option<String>,
    invoice_no: Option<String>,
    action_amount: Option<String>,
    process_type: Option<String>,
    idempotency_id: Option<String>,
}

/// An answer's fields, before it becomes XML.
#[derive(Debug, Default)]
struct Answer {
    resp_code: &'static str,
    resp_desc: &'static str,
    process_type: String,
    invoice_no: String,
    amount: Option<String>,
    status: Option<&'static str>,
    reference_no: Option<String>,
    refund_reference_no: Option<String>,
    refund_list: Option<Vec<String>>,
}

impl Answer {
    /// An answer with only a code, echoing the request.
    fn code(request: &Request, resp_code: &'static str, resp_desc: &'static str) -> Self {
        Self {
            resp_code,
            resp_desc,
            process_type: request.process_type.clone().unwrap_or_default(),
            invoice_no: request.invoice_no.clone().unwrap_or_default(),
            ..Self::default()
        }
    }

    /// The same answer, describing `intent` (in status `status`).
    fn about(mut self, intent: &Intent, status: &'static str) -> Self {
        self.amount = Some(decimal_from_minor(intent.amount, &intent.currency));
        self.status = Some(status);
        self.reference_no = Some(intent.id.clone());
        self
    }

    /// `<PaymentProcessResponse>`, stamped at `now_ms`.
    fn to_xml(&self, now_ms: i64) -> String {
        let mut xml = String::from("<PaymentProcessResponse>");
        let mut element = |name: &str, value: &str| {
            xml.push_str(&format!("<{name}>{}</{name}>", escape_html(value)));
        };
        element("version", VERSION);
        element("timeStamp", &time_stamp(now_ms));
        element("respCode", self.resp_code);
        element("respDesc", self.resp_desc);
        element("processType", &self.process_type);
        element("invoiceNo", &self.invoice_no);
        for (name, value) in [
            ("amount", self.amount.as_deref()),
            ("status", self.status),
            ("referenceNo", self.reference_no.as_deref()),
            ("refundReferenceNo", self.refund_reference_no.as_deref()),
        ] {
            if let Some(value) = value {
                element(name, value);
            }
        }
        if let Some(refunds) = &self.refund_list {
            xml.push_str("<refundList>");
            for refund in refunds {
                xml.push_str(refund);
            }
            xml.push_str("</refundList>");
        }
        xml.push_str("</PaymentProcessResponse>");
        xml
    }
}

impl TwoC2pFace {
    /// `POST /2C2PFrontend/PaymentAction/2.0/action` (see the module docs).
    pub(super) fn payment_action(
        &mut self,
        ledger: &mut Ledger,
        body: &[u8],
        now_ms: i64,
    ) -> Handled {
        let opened = match self.maintenance.keys() {
            Ok(keys) => open_request(keys, body),
            Err(error) => return self.unusable_keys(&error),
        };
        let Ok(plaintext) = opened else {
            self.maintenance.actions.push(TwoC2pAction {
                process_type: None,
                invoice_no: None,
                action_amount: None,
                resp_code: None,
                http_status: 401,
            });
            return Handled::plain(Reply::text(401, UNAUTHORIZED));
        };
        let request = std::str::from_utf8(&plaintext)
            .ok()
            .and_then(|xml| parse_flat(xml, "PaymentProcessRequest"))
            .and_then(|elements| request_from(&elements));
        let answer = match &request {
            Some(request) => self.act(ledger, request, now_ms),
            None => Answer::code(&Request::default(), "99", "Unable to complete the request."),
        };
        let request = request.unwrap_or_default();
        let sealed = match self.maintenance.keys() {
            Ok(keys) => seal_answer(keys, answer.to_xml(now_ms).as_bytes()),
            Err(error) => return self.unusable_keys(&error),
        };
        let reply = match sealed {
            Ok(jws) => Reply::text(200, jws),
            Err(error) => Reply::text(500, format!("the fake could not answer: {}", error.0)),
        };
        self.maintenance.actions.push(TwoC2pAction {
            process_type: request.process_type,
            invoice_no: request.invoice_no,
            action_amount: request.action_amount,
            resp_code: (reply.status == 200).then(|| answer.resp_code.to_owned()),
            http_status: reply.status,
        });
        Handled::plain(reply)
    }

    /// The merchant's side of the keys (made now if not yet), with the action endpoint under
    /// the face's base URL; `None` if the configured keys are unusable.
    pub(crate) fn merchant_keys(&mut self) -> Option<TwoC2pMerchantKeys> {
        let action_url = format!("{}{ACTION_PATH}", self.base_url);
        self.maintenance
            .keys()
            .ok()
            .map(|keys| keys.merchant_side(action_url))
    }

    /// Every maintenance call so far, in order.
    pub(crate) fn actions(&self) -> Vec<TwoC2pAction> {
        self.maintenance.actions.clone()
    }

    /// The answer when the keys cannot be used: 500, plain text.
    fn unusable_keys(&mut self, error: &TwoC2pKeyError) -> Handled {
        self.maintenance.actions.push(TwoC2pAction {
            process_type: None,
            invoice_no: None,
            action_amount: None,
            resp_code: None,
            http_status: 500,
        });
        Handled::plain(Reply::text(500, error.to_string()))
    }

    /// What a verified, parsed request comes to (see the module docs).
    fn act(&mut self, ledger: &mut Ledger, request: &Request, now_ms: i64) -> Answer {
        let code = |resp_code, resp_desc| Answer::code(request, resp_code, resp_desc);
        match request.merchant_id.as_deref() {
            Some(merchant) if merchant == self.merchant_id => {}
            _ => return code("03", "Invalid merchant ID."),
        }
        let Some(process_type) = request.process_type.as_deref() else {
            return code("99", "Unable to complete the request.");
        };
        if !matches!(process_type, "I" | "RS" | "R" | "V" | "S") {
            return code("17", "Invalid process type.");
        }
        let Some(invoice_no) = request.invoice_no.as_deref() else {
            return code("15", "Invalid invoice number.");
        };
        let index = self
            .invoices
            .by_invoice
            .get(invoice_no)
            .and_then(|invoice| invoice.charge)
            .filter(|&index| index < ledger.intents.len());
        let Some(index) = index else {
            return code("16", "Transaction does not exist.");
        };
        let status = self.transaction_status(&ledger.intents[index], now_ms);
        let about = |answer: Answer, ledger: &Ledger| answer.about(&ledger.intents[index], status);
        match process_type {
            "I" => about(code("00", "Success"), ledger),
            "RS" => {
                let mut answer = about(code("00", "Success"), ledger);
                let tran_ref = &ledger.intents[index].id;
                let refunds = ledger
                    .refunds_of
                    .get(tran_ref)
                    .map_or(Vec::new(), |positions| {
                        positions
                            .iter()
                            .filter_map(|&position| ledger.refunds.get(position))
                            .map(refund_line)
                            .collect()
                    });
                answer.refund_list = Some(refunds);
                answer
            }
            "R" => self.refund(ledger, request, index, status, now_ms),
            "S" => self.settle(ledger, request, index, status, now_ms),
            _ => self.void(ledger, request, index, status, now_ms),
        }
    }

    /// `S`: the settlement of the whole authorization at `index`, on a manual-settlement
    /// account; `32` on any other.
    fn settle(
        &mut self,
        ledger: &mut Ledger,
        request: &Request,
        index: usize,
        status: &'static str,
        now_ms: i64,
    ) -> Answer {
        let code = |resp_code, resp_desc| Answer::code(request, resp_code, resp_desc);
        let intent = &ledger.intents[index];
        if !self.manual_settlement {
            return code("32", "Settlement is not required.").about(intent, status);
        }
        let amount = request
            .action_amount
            .as_deref()
            .and_then(|amount| minor_from_decimal(amount, &intent.currency))
            .filter(|&amount| amount > 0);
        let Some(amount) = amount else {
            return code("18", "Invalid amount.").about(intent, status);
        };
        match intent.status {
            Status::RequiresCapture => {}
            Status::Succeeded => {
                return code("39", "Transaction already settled.").about(intent, status)
            }
            Status::Canceled => {
                return code("31", "Settlement is not allowed.").about(intent, status)
            }
            _ => {
                return code("12", "Transaction status is not valid for this action.")
                    .about(intent, status)
            }
        }
        if amount != intent.amount_capturable() {
            return code("33", "Partial settlement is not allowed.").about(intent, status);
        }
        let tran_ref = intent.id.clone();
        match ledger.capture(
            &*self,
            &tran_ref,
            Some(amount),
            request.idempotency_id.clone(),
            now_ms,
        ) {
            CaptureAttempt::Made(_) => code("00", "Success").about(&ledger.intents[index], "S"),
            CaptureAttempt::NoSuchCharge
            | CaptureAttempt::UnexpectedState(_)
            | CaptureAttempt::Exceeds => {
                code("12", "Transaction status is not valid for this action.")
                    .about(&ledger.intents[index], status)
            }
        }
    }

    /// `R`: a refund of the settled transaction at `index`.
    fn refund(
        &mut self,
        ledger: &mut Ledger,
        request: &Request,
        index: usize,
        status: &'static str,
        now_ms: i64,
    ) -> Answer {
        let code = |resp_code, resp_desc| Answer::code(request, resp_code, resp_desc);
        let intent = &ledger.intents[index];
        let amount = request
            .action_amount
            .as_deref()
            .and_then(|amount| minor_from_decimal(amount, &intent.currency))
            .filter(|&amount| amount > 0);
        let Some(amount) = amount else {
            return code("18", "Invalid amount.").about(intent, status);
        };
        if status != "S" {
            return code("12", "Transaction status is not valid for this action.")
                .about(intent, status);
        }
        let tran_ref = intent.id.clone();
        let attempt = ledger.attempt_refund(
            &*self,
            &tran_ref,
            Some(amount),
            None,
            BTreeMap::new(),
            request.idempotency_id.clone(),
            now_ms,
        );
        let intent = &ledger.intents[index];
        match attempt {
            RefundAttempt::Made(position) => {
                let Some(refund) = ledger.refunds.get(position) else {
                    return code("99", "Unable to complete the request.");
                };
                if let Some(invoice_no) = &request.invoice_no {
                    self.maintenance
                        .refund_invoices
                        .insert(refund.id.clone(), invoice_no.clone());
                }
                let mut answer = code("00", "Success").about(intent, refund_status(refund.status));
                answer.amount = Some(decimal_from_minor(refund.amount, &refund.currency));
                answer.refund_reference_no = Some(refund.id.clone());
                answer
            }
            RefundAttempt::AlreadyRefunded { .. } | RefundAttempt::Exceeds { .. } => {
                code("30", "Refund amount is more than the transaction amount.")
                    .about(intent, status)
            }
            RefundAttempt::NoSuchCharge | RefundAttempt::NotRefundable => {
                code("12", "Transaction status is not valid for this action.").about(intent, status)
            }
        }
    }

    /// `V`: a void of the approved, unsettled transaction at `index`: a captured charge is
    /// voided, an authorization (manual-settlement account) released.
    fn void(
        &mut self,
        ledger: &mut Ledger,
        request: &Request,
        index: usize,
        status: &'static str,
        now_ms: i64,
    ) -> Answer {
        let code = |resp_code, resp_desc| Answer::code(request, resp_code, resp_desc);
        match status {
            "S" => {
                return code("21", "Void is not allowed: the transaction is settled.")
                    .about(&ledger.intents[index], status)
            }
            "V" => {
                return code("29", "Transaction already voided.")
                    .about(&ledger.intents[index], status)
            }
            "A" => {}
            _ => {
                return code("12", "Transaction status is not valid for this action.")
                    .about(&ledger.intents[index], status)
            }
        }
        let tran_ref = ledger.intents[index].id.clone();
        let reason = Some("void".to_owned());
        let attempt = if ledger.intents[index].status == Status::RequiresCapture {
            ledger.cancel(
                &*self,
                &tran_ref,
                reason,
                request.idempotency_id.clone(),
                now_ms,
            )
        } else {
            ledger.void(&*self, &tran_ref, reason, now_ms)
        };
        match attempt {
            CancelAttempt::Canceled(_) => code("00", "Success").about(&ledger.intents[index], "V"),
            CancelAttempt::NotCancelable(_) | CancelAttempt::NoSuchCharge => {
                code("12", "Transaction status is not valid for this action.")
                    .about(&ledger.intents[index], status)
            }
        }
    }

    /// The transaction's maintenance status at `now_ms` (see the module docs).
    fn transaction_status(&self, intent: &Intent, now_ms: i64) -> &'static str {
        match intent.status {
            // Captured: at once on an ordinary account, by `S` on a manual-settlement one
            // (`succeeded_ms` is then the capture's time).
            Status::Succeeded => {
                let succeeded_ms = intent
                    .succeeded_ms
                    .unwrap_or_else(|| intent.created.saturating_mul(1000));
                let settles_ms = succeeded_ms.saturating_add(millis(self.maintenance.settle_after));
                if now_ms >= settles_ms {
                    "S"
                } else {
                    "A"
                }
            }
            // An authorization of a manual-settlement account, not yet settled.
            Status::RequiresCapture => "A",
            // Voided, or an authorization that lapsed.
            Status::Canceled => "V",
            Status::RequiresPaymentMethod => "PF",
            Status::RequiresConfirmation | Status::RequiresAction | Status::Processing => "AP",
        }
    }
}

/// A refund's status in the maintenance API's words.
pub(crate) fn refund_status(status: RefundStatus) -> &'static str {
    match status {
        RefundStatus::Succeeded => "RF",
        RefundStatus::Pending => "RP",
        RefundStatus::Failed => "RFF",
    }
}

/// One `<refund .../>` of a `refundList`.
fn refund_line(refund: &Refund) -> String {
    format!(
        r#"<refund amount="{}" status="{}" referenceNo="{}" dateTime="{}"/>"#,
        escape_html(&decimal_from_minor(refund.amount, &refund.currency)),
        refund_status(refund.status),
        escape_html(&refund.id),
        transaction_date_time(refund.created),
    )
}

/// Epoch ms as `ddMMyyHHmmss` (UTC).
fn time_stamp(now_ms: i64) -> String {
    let digits: String = iso8601(now_ms.div_euclid(1000))
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let part = |range: std::ops::Range<usize>| digits.get(range).unwrap_or_default().to_owned();
    format!("{}{}{}{}", part(6..8), part(4..6), part(2..4), part(8..14))
}

/// The request from its elements: only those the fake models (`version`, `merchantID`,
/// `invoiceNo`, `actionAmount`, `processType`, `idempotencyID`), `version` required.
fn request_from(elements: &[(String, String)]) -> Option<Request> {
    let mut request = Request::default();
    let mut version = false;
    for (name, value) in elements {
        let value = Some(value.clone());
        match name.as_str() {
            "version" => version = true,
            "merchantID" => request.merchant_id = value,
            "invoiceNo" => request.invoice_no = value,
            "actionAmount" => request.action_amount = value,
            "processType" => request.process_type = value,
            "idempotencyID" => request.idempotency_id = value,
            _ => return None,
        }
    }
    version.then_some(request)
}

/// The elements of a flat XML document `<root><a>text</a>…</root>`, in order: an optional XML
/// declaration first, whitespace between elements, text with the five predefined entities;
/// `None` for anything else (attributes, comments, CDATA, nesting, empty-element tags, an
/// element twice, trailing content).
pub(crate) fn parse_flat(xml: &str, root: &str) -> Option<Vec<(String, String)>> {
    let mut rest = xml.trim_start_matches('\u{feff}').trim();
    if let Some(declaration) = rest.strip_prefix("<?xml") {
        let (_, after) = declaration.split_once("?>")?;
        rest = after.trim_start();
    }
    rest = rest.strip_prefix(&format!("<{root}>"))?;
    let closing_root = format!("</{root}>");
    let mut elements: Vec<(String, String)> = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix(closing_root.as_str()) {
            return after.trim().is_empty().then_some(elements);
        }
        let after_open = rest.strip_prefix('<')?;
        let (name, after_name) = after_open.split_once('>')?;
        let mut chars = name.chars();
        let valid_name = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name || elements.iter().any(|(seen, _)| seen == name) {
            return None;
        }
        let (raw, after_text) = after_name.split_once('<')?;
        rest = after_text.strip_prefix(&format!("/{name}>"))?;
        elements.push((name.to_owned(), unescape(raw)?));
    }
}

/// XML text with the five predefined entities replaced; `None` for any other `&`.
fn unescape(raw: &str) -> Option<String> {
    let mut text = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('&') {
        text.push_str(&rest[..at]);
        let (entity, after) = rest[at..].split_once(';')?;
        text.push(match entity {
            "&amp" => '&',
            "&lt" => '<',
            "&gt" => '>',
            "&quot" => '"',
            "&apos" => '\'',
            _ => return None,
        });
        rest = after;
    }
    text.push_str(rest);
    Some(text)
}
