//! What the PayPal face writes: orders, captures, authorizations and refunds, error bodies,
//! webhook events and ids (shapes of PayPal's `checkout_orders_v2.json` \[O\],
//! `payments_payment_v2.json` \[P\] and `notifications_webhooks_v1.json` \[W\], as
//! `docs/psp-research-paypal.md` quotes them, and of the samples it cites).

use serde_json::{json, Map, Value};

use super::params::{exponent, OrderIntent, Source};
use super::{OrderExtra, RefundExtra};
use crate::faces::dates::{iso8601, rfc3339_ms};
use crate::faces::page::AUTHENTICATE_PATH;
use crate::ledger::{
    Decline, Failure, Intent, Ledger, ModelEvent, Refund, RefundStatus, Reply, Status,
};

/// The characters of PayPal's ids (`5O190127TN364715T`): upper-case letters and digits.
const ID_CHARS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// Length of an order, capture, authorization or refund id (\[O\] examples: 17 characters).
const ID_LEN: usize = 17;

/// Length of a payer id (\[O\] `payer_id`: 13 characters, `^[2-9A-HJ-NP-Z]{13}$`).
const PAYER_ID_LEN: usize = 13;

/// The characters of a payer id (\[O\] `account_id` pattern: no 0, 1, I or O).
const PAYER_ID_CHARS: &[u8] = b"23456789ABCDEFGHJKLMNPQRSTUVWXYZ";

/// The fake's merchant (`payee.merchant_id`), 13 characters like PayPal's.
pub(super) const MERCHANT_ID: &str = "PAYONCEFAKEPP";

/// The fake's merchant e-mail (`payee.email_address`).
const MERCHANT_EMAIL: &str = "merchant@payonce.example";

/// The fake buyer's e-mail once a PayPal payer approved (`payment_source.paypal.email_address`).
const BUYER_EMAIL: &str = "buyer@payonce.example";

/// Which of PayPal's APIs an answer belongs to: its error links point to that API's docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Api {
    /// Orders v2 (`/v2/checkout/orders`).
    Orders,
    /// Payments v2 (`/v2/payments`).
    Payments,
}

/// One refusal: PayPal's `details[0]` (\[O\] `error_details`: `field`, `value`, `location`,
/// `issue`, `description`) and the HTTP status it comes with; the error's `name` and `message`
/// follow the status ([`Issue::reply`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Issue {
    /// 400, 404, 409, 422 or 500.
    pub(super) status: u16,
    /// E.g. `INVALID_STRING_LENGTH`, `ORDER_NOT_APPROVED`.
    pub(super) issue: &'static str,
    field: Option<String>,
    value: Option<String>,
    location: &'static str,
    description: String,
}

impl Issue {
    /// A refusal with this status.
    fn new(
        status: u16,
        issue: &'static str,
        field: Option<&str>,
        location: &'static str,
        description: &str,
    ) -> Self {
        Self {
            status,
            issue,
            field: field.map(str::to_owned),
            value: None,
            location,
            description: description.to_owned(),
        }
    }

    /// 400 INVALID_REQUEST with `issue` on `field` (a JSON pointer, or a header's name).
    pub(super) fn bad(
        issue: &'static str,
        field: &str,
        location: &'static str,
        description: &str,
    ) -> Self {
        Self::new(400, issue, Some(field), location, description)
    }

    /// 422 UNPROCESSABLE_ENTITY with `issue` on `field`.
    pub(super) fn unprocessable(
        issue: &'static str,
        field: &str,
        location: &'static str,
        description: &str,
    ) -> Self {
        Self::new(422, issue, Some(field), location, description)
    }

    /// 422 UNPROCESSABLE_ENTITY with `issue`, about no field in particular.
    pub(super) fn refused(issue: &'static str, description: &str) -> Self {
        Self::new(422, issue, None, "body", description)
    }

    /// 404 RESOURCE_NOT_FOUND INVALID_RESOURCE_ID for the id in the path.
    pub(super) fn not_found(id: &str) -> Self {
        Self::new(
            404,
            "INVALID_RESOURCE_ID",
            None,
            "path",
            "Specified resource ID does not exist. Please check the resource ID and try again.",
        )
        .with_value(id)
    }

    /// 409 RESOURCE_CONFLICT PREVIOUS_REQUEST_IN_PROGRESS (\[P\] `#/components/schemas/409`).
    pub(super) fn in_progress() -> Self {
        Self::new(
            409,
            "PREVIOUS_REQUEST_IN_PROGRESS",
            Some("PayPal-Request-Id"),
            "header",
            "A previous request on this resource is currently in progress. Please wait for \
             sometime and try again. It is best to space out the initial and the subsequent \
             request(s) to avoid receiving this error.",
        )
    }

    /// 500 INTERNAL_SERVER_ERROR, with why.
    pub(super) fn internal(description: &str) -> Self {
        Self::new(500, "INTERNAL_SERVICE_ERROR", None, "body", description)
    }

    /// The same, naming the offending `value`.
    pub(super) fn with_value(mut self, value: &str) -> Self {
        self.value = Some(value.to_owned());
        self
    }

    /// The error body (\[O\] `error_422` etc.): `name` and `message` fixed per status, a
    /// `debug_id` drawn from the ledger, this issue as `details[0]`, and an `information_link`
    /// to the API's docs (the href's form is UNCONFIRMED).
    pub(super) fn reply(&self, ledger: &mut Ledger, api: Api) -> Reply {
        let (name, message) = match self.status {
            400 => (
                "INVALID_REQUEST",
                "Request is not well-formed, syntactically incorrect, or violates schema.",
            ),
            404 => (
                "RESOURCE_NOT_FOUND",
                "The specified resource does not exist.",
            ),
            409 => (
                "RESOURCE_CONFLICT",
                "The server has detected a conflict while processing this request.",
            ),
            422 => (
                "UNPROCESSABLE_ENTITY",
                "The requested action could not be performed, semantically incorrect, or failed \
                 business validation.",
            ),
            _ => (
                "INTERNAL_SERVER_ERROR",
                "An internal server error has occurred.",
            ),
        };
        let mut detail = Map::new();
        if let Some(field) = &self.field {
            detail.insert("field".to_owned(), json!(field));
        }
        if let Some(value) = &self.value {
            detail.insert("value".to_owned(), json!(value));
        }
        detail.insert("location".to_owned(), json!(self.location));
        detail.insert("issue".to_owned(), json!(self.issue));
        detail.insert("description".to_owned(), json!(self.description));
        let docs = match api {
            Api::Orders => "https://developer.paypal.com/docs/api/orders/v2/",
            Api::Payments => "https://developer.paypal.com/docs/api/payments/v2/",
        };
        Reply::json(
            self.status,
            &json!({
                "name": name,
                "message": message,
                "debug_id": debug_id(ledger),
                "details": [Value::Object(detail)],
                "links": [{
                    "href": format!("{docs}#error-{}", self.issue),
                    "rel": "information_link",
                    "method": "GET",
                }],
            }),
        )
    }
}

/// 401 AUTHENTICATION_FAILURE (\[O\] `error_401`) for a missing, unknown or expired access token.
pub(super) fn authentication_failure(ledger: &mut Ledger) -> Reply {
    Reply::json(
        401,
        &json!({
            "name": "AUTHENTICATION_FAILURE",
            "message": "Authentication failed due to missing authorization header, or invalid \
                        authentication credentials.",
            "debug_id": debug_id(ledger),
            "details": [],
            "links": [{
                "href": "https://developer.paypal.com/api/rest/authentication/",
                "rel": "information_link",
                "method": "GET",
            }],
        }),
    )
}

/// A `debug_id`: 13 lower-case hex digits from the ledger's randomness (the error example's
/// `90957fca61718`).
fn debug_id(ledger: &mut Ledger) -> String {
    format!("{:013x}", ledger.rng.u64(..) & ((1 << 52) - 1))
}

/// A new order, capture, authorization or refund id: 17 upper-case letters and digits.
pub(super) fn new_id(ledger: &mut Ledger) -> String {
    drawn(ledger, ID_CHARS, ID_LEN)
}

/// A new payer id: 13 of PayPal's payer-id characters.
pub(super) fn new_payer_id(ledger: &mut Ledger) -> String {
    drawn(ledger, PAYER_ID_CHARS, PAYER_ID_LEN)
}

/// `len` characters of `alphabet`, drawn from the ledger's randomness.
pub(super) fn drawn(ledger: &mut Ledger, alphabet: &[u8], len: usize) -> String {
    let rng = &mut ledger.rng;
    std::iter::repeat_with(|| char::from(alphabet[rng.usize(..alphabet.len())]))
        .take(len)
        .collect()
}

/// `{"currency_code","value"}` (\[O\] `money`): minor units written with the currency's exponent.
pub(super) fn money(minor: i64, currency: &str) -> Value {
    json!({"currency_code": currency, "value": value_text(minor, currency)})
}

/// Minor units as PayPal's decimal string: `3000` USD → `30.00`, `3000` JPY → `3000`.
pub(super) fn value_text(minor: i64, currency: &str) -> String {
    match exponent(currency) {
        0 => minor.to_string(),
        _ => format!("{}.{:02}", minor.div_euclid(100), minor.rem_euclid(100)),
    }
}

/// A HATEOAS link.
fn link(href: String, rel: &str, method: &str) -> Value {
    json!({"href": href, "rel": rel, "method": method})
}

/// Whether the order is gone: it was never approved and lapsed ([`Failure::AuthenticationRequired`]
/// after `requires_action_for`; the page's *Fail* leaves it waiting, so
/// [`Failure::AuthenticationFailed`] never happens here, and is read alike).
pub(super) fn expired(intent: &Intent) -> bool {
    intent.status == Status::RequiresPaymentMethod
        && matches!(
            intent.failure,
            Some(Failure::AuthenticationRequired | Failure::AuthenticationFailed)
        )
}

/// Whether the attempt was refused with 422 INSTRUMENT_DECLINED (insufficient funds): the order
/// keeps the status it had before.
pub(super) fn instrument_declined(intent: &Intent) -> bool {
    intent.status == Status::RequiresPaymentMethod
        && intent.failure == Some(Failure::Declined(Decline::InsufficientFunds))
}

/// The order's status (\[O\] `order_status`): `CREATED`, `PAYER_ACTION_REQUIRED`, `APPROVED`,
/// `COMPLETED` or `VOIDED` (its authorization voided or lapsed). An order that lapsed reads as
/// it was before (PayPal has no word for it; `GET` answers 404).
pub(super) fn order_status(intent: &Intent, extra: &OrderExtra) -> &'static str {
    let waiting = || {
        if extra.payer_action {
            "PAYER_ACTION_REQUIRED"
        } else {
            "CREATED"
        }
    };
    match intent.status {
        Status::RequiresConfirmation if intent.authenticated => "APPROVED",
        Status::RequiresConfirmation => "CREATED",
        Status::RequiresAction => waiting(),
        Status::RequiresPaymentMethod if expired(intent) => waiting(),
        Status::RequiresPaymentMethod if instrument_declined(intent) => {
            if intent.authenticated {
                "APPROVED"
            } else {
                "CREATED"
            }
        }
        Status::RequiresPaymentMethod
        | Status::Processing
        | Status::Succeeded
        | Status::RequiresCapture => "COMPLETED",
        Status::Canceled => "VOIDED",
    }
}

/// The capture's status (\[O\] `capture_status`): `PENDING`, `DECLINED`, or once completed
/// `COMPLETED`, `PARTIALLY_REFUNDED` or `REFUNDED` by what its completed refunds add up to
/// (pending refunds do not change it: UNCONFIRMED, the fake's choice).
fn capture_status(intent: &Intent, refunds: &[&Refund]) -> &'static str {
    match intent.status {
        Status::Processing => "PENDING",
        Status::RequiresPaymentMethod => "DECLINED",
        _ => {
            let refunded: i64 = refunds
                .iter()
                .filter(|refund| refund.status == RefundStatus::Succeeded)
                .map(|refund| refund.amount)
                .sum();
            let captured = intent.amount_received();
            if refunded <= 0 {
                "COMPLETED"
            } else if refunded >= captured {
                "REFUNDED"
            } else {
                "PARTIALLY_REFUNDED"
            }
        }
    }
}

/// The authorization's status (\[O\] `authorization_status`): `PENDING`, `CREATED`, `CAPTURED`,
/// `DENIED` or `VOIDED` (voided, or lapsed: PayPal's enum has no `EXPIRED`, the brief's pick).
pub(super) fn authorization_status(intent: &Intent) -> &'static str {
    match intent.status {
        Status::Processing => "PENDING",
        Status::Succeeded => "CAPTURED",
        Status::Canceled => "VOIDED",
        Status::RequiresPaymentMethod => "DENIED",
        Status::RequiresCapture | Status::RequiresConfirmation | Status::RequiresAction => {
            "CREATED"
        }
    }
}

/// A refund's status (\[P\] `refund_status`): `PENDING`, `COMPLETED` or `FAILED` (the fake never
/// answers `CANCELLED`).
pub(super) fn refund_status(status: RefundStatus) -> &'static str {
    match status {
        RefundStatus::Pending => "PENDING",
        RefundStatus::Succeeded => "COMPLETED",
        RefundStatus::Failed => "FAILED",
    }
}

/// The card a test token stands for: brand and last digits (Stripe's test cards behind the
/// `pm_card_*` tokens).
fn card(token: &str) -> (&'static str, &'static str) {
    match token {
        "pm_card_mastercard" => ("MASTERCARD", "4444"),
        "pm_card_refundFail" => ("VISA", "5126"),
        "pm_card_visa_chargeDeclined" => ("VISA", "0002"),
        "pm_card_chargeDeclinedInsufficientFunds" => ("VISA", "9995"),
        "pm_card_threeDSecure2Required" => ("VISA", "3220"),
        "pm_card_authenticationRequired" => ("VISA", "3155"),
        _ => ("VISA", "4242"),
    }
}

/// Everything a writer needs about one order: the ledger's charge, what the face keeps, its
/// refunds (oldest first, with what the face keeps of each) and the fake's base URL.
pub(super) struct OrderView<'a> {
    pub(super) intent: &'a Intent,
    pub(super) extra: &'a OrderExtra,
    pub(super) refunds: Vec<(&'a Refund, RefundExtra)>,
    pub(super) base_url: &'a str,
}

impl OrderView<'_> {
    /// The order's own URL.
    fn order_href(&self) -> String {
        format!("{}/v2/checkout/orders/{}", self.base_url, self.intent.id)
    }

    /// The capture's id, once there is one: the attempt of a `CAPTURE` order, the capture of an
    /// `AUTHORIZE` order's authorization.
    pub(super) fn capture_id(&self) -> Option<&str> {
        match self.extra.intent {
            OrderIntent::Capture => self.intent.latest_charge.as_deref(),
            OrderIntent::Authorize => self.extra.auth_capture.as_ref().map(|c| c.id.as_str()),
        }
    }

    /// The authorization's id, once an `AUTHORIZE` order was attempted.
    pub(super) fn authorization_id(&self) -> Option<&str> {
        match self.extra.intent {
            OrderIntent::Authorize => self.intent.latest_charge.as_deref(),
            OrderIntent::Capture => None,
        }
    }

    /// The ledger's refunds alone.
    fn ledger_refunds(&self) -> Vec<&Refund> {
        self.refunds.iter().map(|(refund, _)| *refund).collect()
    }

    /// The order as PayPal answers it: with `full` the whole `order` (\[O\]
    /// `#/components/schemas/order`), else the minimal one (`id`, `status`, `links`: "A minimal
    /// response includes the id, status and HATEOAS links").
    pub(super) fn order(&self, full: bool) -> Value {
        let status = order_status(self.intent, self.extra);
        let links = self.order_links(status);
        if !full {
            return json!({"id": self.intent.id, "status": status, "links": links});
        }
        let extra = self.extra;
        let mut unit = json!({
            "reference_id": extra.reference_id.as_deref().unwrap_or("default"),
            "amount": money(self.intent.amount, &extra.currency),
            "payee": {"email_address": MERCHANT_EMAIL, "merchant_id": MERCHANT_ID},
        });
        for (name, value) in [
            ("description", &extra.description),
            ("custom_id", &extra.custom_id),
            ("invoice_id", &extra.invoice_id),
        ] {
            if let Some(value) = value {
                unit[name] = json!(value);
            }
        }
        let mut payments = Map::new();
        if let Some(authorization) = self.authorization(false) {
            payments.insert("authorizations".to_owned(), json!([authorization]));
        }
        if let Some(capture) = self.capture(false) {
            payments.insert("captures".to_owned(), json!([capture]));
        }
        if !self.refunds.is_empty() {
            let refunds: Vec<Value> = self
                .refunds
                .iter()
                .map(|(refund, refund_extra)| refund_json(refund, refund_extra, self.base_url))
                .collect();
            payments.insert("refunds".to_owned(), json!(refunds));
        }
        if !payments.is_empty() {
            unit["payments"] = Value::Object(payments);
        }
        let mut order = json!({
            "id": self.intent.id,
            "intent": extra.intent.as_str(),
            "status": status,
            "purchase_units": [unit],
            "create_time": iso8601(extra.created_ms.div_euclid(1000)),
            "update_time": iso8601(extra.updated_ms.div_euclid(1000)),
            "links": links,
        });
        if let Some(source) = self.payment_source() {
            order["payment_source"] = source;
        }
        if let Some(payer_id) = &extra.payer_id {
            order["payer"] = json!({"payer_id": payer_id, "email_address": BUYER_EMAIL});
        }
        order
    }

    /// The order's links by status: `self` always; an order waiting for its buyer `approve`
    /// (no source) or `payer-action` (the fake's page, \[O\] `order_status`: "Redirect the payer
    /// to the "rel":"payer-action" HATEOAS link"); one that can be captured or authorized
    /// `update` and `capture` or `authorize` (the README sample of a created order).
    fn order_links(&self, status: &str) -> Vec<Value> {
        let href = self.order_href();
        let mut links = vec![link(href.clone(), "self", "GET")];
        let page = format!("{}{AUTHENTICATE_PATH}/{}", self.base_url, self.intent.id);
        let action = match self.extra.intent {
            OrderIntent::Capture => "capture",
            OrderIntent::Authorize => "authorize",
        };
        match status {
            "PAYER_ACTION_REQUIRED" => links.push(link(page, "payer-action", "GET")),
            "CREATED" if self.intent.status == Status::RequiresAction => {
                links.push(link(page, "approve", "GET"));
                links.push(link(href.clone(), "update", "PATCH"));
                links.push(link(format!("{href}/{action}"), action, "POST"));
            }
            "CREATED" | "APPROVED" => {
                links.push(link(href.clone(), "update", "PATCH"));
                links.push(link(format!("{href}/{action}"), action, "POST"));
            }
            _ => {}
        }
        links
    }

    /// `payment_source` as the order shows it: the card's brand and last digits, or the PayPal
    /// wallet (its account once a payer approved, its vault id when vaulted).
    fn payment_source(&self) -> Option<Value> {
        let extra = self.extra;
        match &extra.source {
            Source::Card { vault_id } => {
                let (brand, last_digits) = card(vault_id);
                Some(json!({"card": {
                    "last_digits": last_digits,
                    "brand": brand,
                    "type": "CREDIT",
                    "attributes": {"vault": {"id": vault_id, "status": "VAULTED"}},
                }}))
            }
            Source::PayPalVault { vault_id } => Some(json!({"paypal": {
                "email_address": BUYER_EMAIL,
                "attributes": {"vault": {"id": vault_id, "status": "VAULTED"}},
            }})),
            Source::PayPalWallet | Source::None => extra.payer_id.as_ref().map(|payer_id| {
                json!({"paypal": {"email_address": BUYER_EMAIL, "account_id": payer_id}})
            }),
        }
    }

    /// `custom_id` and `invoice_id` of the unit, on a payment object.
    fn ids_on(&self, object: &mut Value) {
        for (name, value) in [
            ("custom_id", &self.extra.custom_id),
            ("invoice_id", &self.extra.invoice_id),
        ] {
            if let Some(value) = value {
                object[name] = json!(value);
            }
        }
    }

    /// The capture, if there is one: as the order embeds it (\[O\] `capture`), or with
    /// `standalone` as `GET /v2/payments/captures/{id}` and webhooks give it (\[P\] `capture-2`:
    /// plus `supplementary_data.related_ids` and `payee`). A declined one carries
    /// `status_details.reason` `DECLINED_BY_RISK_FRAUD_FILTERS` (PayPal's own example of a
    /// declined capture; UNCONFIRMED for a plain decline). Links: `self`, `refund`, `up` (the
    /// order, or the authorization it captured).
    pub(super) fn capture(&self, standalone: bool) -> Option<Value> {
        let id = self.capture_id()?;
        let intent = self.intent;
        let extra = self.extra;
        let (amount, created_ms, final_capture, invoice_id, note) = match &extra.auth_capture {
            Some(capture) => (
                capture.amount,
                capture.created_ms,
                capture.final_capture,
                capture.invoice_id.as_ref(),
                capture.note_to_payer.as_ref(),
            ),
            None => (
                intent.amount,
                extra.attempted_ms.unwrap_or(extra.created_ms),
                true,
                None,
                None,
            ),
        };
        let status = capture_status(intent, &self.ledger_refunds());
        let href = format!("{}/v2/payments/captures/{id}", self.base_url);
        let up = match self.authorization_id() {
            Some(authorization) => format!(
                "{}/v2/payments/authorizations/{authorization}",
                self.base_url
            ),
            None => self.order_href(),
        };
        let mut capture = json!({
            "id": id,
            "status": status,
            "amount": money(amount, &extra.currency),
            "final_capture": final_capture,
            "seller_protection": {"status": "NOT_ELIGIBLE"},
            "links": [
                link(href.clone(), "self", "GET"),
                link(format!("{href}/refund"), "refund", "POST"),
                link(up, "up", "GET"),
            ],
            "create_time": iso8601(created_ms.div_euclid(1000)),
            "update_time": iso8601(extra.updated_ms.div_euclid(1000)),
        });
        match status {
            "PENDING" => capture["status_details"] = json!({"reason": "PENDING_REVIEW"}),
            "DECLINED" => {
                capture["status_details"] = json!({"reason": "DECLINED_BY_RISK_FRAUD_FILTERS"});
            }
            _ => {}
        }
        self.ids_on(&mut capture);
        if let Some(invoice_id) = invoice_id {
            capture["invoice_id"] = json!(invoice_id);
        }
        if let Some(note) = note {
            capture["note_to_payer"] = json!(note);
        }
        if standalone {
            let mut related = json!({"order_id": intent.id});
            if let Some(authorization) = self.authorization_id() {
                related["authorization_id"] = json!(authorization);
            }
            capture["supplementary_data"] = json!({"related_ids": related});
            capture["payee"] = json!({"email_address": MERCHANT_EMAIL, "merchant_id": MERCHANT_ID});
        }
        Some(capture)
    }

    /// The authorization of an `AUTHORIZE` order, if it was attempted: as the order embeds it
    /// (\[O\] `authorization`), or with `standalone` as `GET /v2/payments/authorizations/{id}`
    /// and webhooks give it (\[P\] `authorization-2`). `expiration_time` is when the ledger lets
    /// it lapse. Links: `self`, `capture`, `void`, `reauthorize`, `up` (the order), as in
    /// PayPal's recurring-payments sample.
    pub(super) fn authorization(&self, standalone: bool) -> Option<Value> {
        let id = self.authorization_id()?;
        let intent = self.intent;
        let extra = self.extra;
        let href = format!("{}/v2/payments/authorizations/{id}", self.base_url);
        let status = authorization_status(intent);
        let created_ms = extra.attempted_ms.unwrap_or(extra.created_ms);
        let mut authorization = json!({
            "id": id,
            "status": status,
            "amount": money(intent.amount, &extra.currency),
            "seller_protection": {"status": "NOT_ELIGIBLE"},
            "links": [
                link(href.clone(), "self", "GET"),
                link(format!("{href}/capture"), "capture", "POST"),
                link(format!("{href}/void"), "void", "POST"),
                link(format!("{href}/reauthorize"), "reauthorize", "POST"),
                link(self.order_href(), "up", "GET"),
            ],
            "create_time": iso8601(created_ms.div_euclid(1000)),
            "update_time": iso8601(extra.updated_ms.div_euclid(1000)),
        });
        if let Some(expires_ms) = intent.capture_before_ms {
            authorization["expiration_time"] = json!(iso8601(expires_ms.div_euclid(1000)));
        }
        if status == "PENDING" {
            authorization["status_details"] = json!({"reason": "PENDING_REVIEW"});
        }
        self.ids_on(&mut authorization);
        if standalone {
            authorization["supplementary_data"] = json!({"related_ids": {"order_id": intent.id}});
            authorization["payee"] =
                json!({"email_address": MERCHANT_EMAIL, "merchant_id": MERCHANT_ID});
        }
        Some(authorization)
    }
}

/// A refund (\[P\] `refund`): `custom_id`, `invoice_id` and `note_to_payer` as the refund request
/// gave them; links `self` and `up` (its capture). A pending one carries `status_details.reason`
/// `ECHECK` (the only reason PayPal lists; UNCONFIRMED for the fake's pending refunds).
pub(super) fn refund_json(refund: &Refund, extra: &RefundExtra, base_url: &str) -> Value {
    let mut object = json!({
        "id": refund.id,
        "status": refund_status(refund.status),
        "amount": money(refund.amount, &refund.currency.to_ascii_uppercase()),
        "links": [
            link(format!("{base_url}/v2/payments/refunds/{}", refund.id), "self", "GET"),
            link(format!("{base_url}/v2/payments/captures/{}", extra.capture_id), "up", "GET"),
        ],
        "create_time": iso8601(extra.created_ms.div_euclid(1000)),
        "update_time": iso8601(extra.updated_ms.div_euclid(1000)),
    });
    if refund.status == RefundStatus::Pending {
        object["status_details"] = json!({"reason": "ECHECK"});
    }
    for (name, value) in [
        ("custom_id", &extra.custom_id),
        ("invoice_id", &extra.invoice_id),
        ("note_to_payer", &extra.note_to_payer),
    ] {
        if let Some(value) = value {
            object[name] = json!(value);
        }
    }
    object
}

/// The minimal form of a Payments API object (`id`, `status`, `links`): what `Prefer:
/// return=minimal` (the default) answers.
pub(super) fn minimal(object: &Value) -> Value {
    json!({"id": object["id"], "status": object["status"], "links": object["links"]})
}

/// A webhook event (\[W\] `#/components/schemas/event`): `{id: "WH-<17>-<17>", event_version
/// "1.0", create_time, resource_type, resource_version "2.0", event_type, summary, resource,
/// links}`, its id drawn from the ledger's randomness, its links the fake's own.
pub(super) fn event(
    ledger: &mut Ledger,
    base_url: &str,
    event_type: &str,
    resource_type: &str,
    summary: String,
    resource: Value,
    at_ms: i64,
) -> ModelEvent {
    let id = format!("WH-{}-{}", new_id(ledger), new_id(ledger));
    let href = format!("{base_url}/v1/notifications/webhooks-events/{id}");
    let body = json!({
        "id": id,
        "event_version": "1.0",
        "create_time": rfc3339_ms(at_ms),
        "resource_type": resource_type,
        "resource_version": "2.0",
        "event_type": event_type,
        "summary": summary,
        "resource": resource,
        "links": [
            link(href.clone(), "self", "GET"),
            link(format!("{href}/resend"), "resend", "POST"),
        ],
    });
    ModelEvent {
        id,
        kind: event_type.to_owned(),
        body: body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_follow_the_currencys_exponent() {
        assert_eq!(value_text(3000, "USD"), "30.00");
        assert_eq!(value_text(5, "EUR"), "0.05");
        assert_eq!(value_text(3000, "JPY"), "3000");
        assert_eq!(
            money(1234, "THB"),
            json!({"currency_code": "THB", "value": "12.34"})
        );
    }
}
