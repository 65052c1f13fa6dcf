//! What crosses the line between the ledger and a face, and between the model and its callers:
//! a request as it came off the wire, the answer to write, how to deliver it and the webhook
//! events it caused. Bodies are bytes and strings here; only a face knows what is in them.

use std::time::Duration;

use serde_json::Value;

/// One API request as it came off the wire.
#[derive(Clone, Copy, Debug)]
pub struct WireRequest<'a> {
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The path without the query, e.g. `/v1/payment_intents/pi_x/cancel` (Stripe) or
    /// `/charges/chrg_test_x/refunds` (Omise).
    pub path: &'a str,
    /// The raw query string, if any (search, lists).
    pub query: Option<&'a str>,
    /// The raw `Authorization` header value, if any.
    pub authorization: Option<&'a str>,
    /// The raw `Idempotency-Key` header value, if any — on the PayPal face the
    /// `PayPal-Request-Id` header's. Ignored on `GET`, as at Stripe.
    pub idempotency_key: Option<&'a str>,
    /// The raw `Prefer` header value, if any: PayPal's `return=minimal` (its default) or
    /// `return=representation`; the other faces ignore it.
    pub prefer: Option<&'a str>,
    /// The body as it came: `application/x-www-form-urlencoded` (Stripe, Omise, PayPal's token
    /// endpoint) or JSON (2C2P, Square, PayPal).
    pub body: &'a [u8],
}

/// How the server must deliver an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Write it now.
    Now,
    /// Write nothing at all and close the connection: the request took effect, the caller never
    /// learns it (`pm_fake_lost_response`).
    Sever,
    /// Write it after this long (`pm_fake_slow`).
    After(Duration),
}

/// The model's answer to one request.
#[derive(Clone, Debug)]
pub struct WireAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: String,
    /// Answered from the idempotency cache (the server sets `Idempotent-Replayed: true`).
    pub replayed: bool,
    /// How to deliver it.
    pub delivery: Delivery,
    /// The webhook events to send, in the order they happened: those of time-driven transitions
    /// that fell due by this request's time and were not yet handed out by
    /// [`FakeModel::tick`](crate::model::FakeModel::tick), then those the request itself caused.
    /// Every event is handed out exactly once.
    pub events: Vec<ModelEvent>,
}

/// One webhook event.
#[derive(Clone, Debug)]
pub struct ModelEvent {
    /// `evt_...` (Stripe), `evnt_test_...` (Omise), a UUID (Square) or `WH-<17>-<17>`
    /// (PayPal), also the de-duplication key receivers use.
    pub id: String,
    /// E.g. `payment_intent.succeeded`, `refund.created`, `charge.refunded` (Stripe's `type`),
    /// `charge.create`, `charge.complete`, `refund.create` (Omise's `key`) or
    /// `PAYMENT.CAPTURE.COMPLETED` (PayPal's `event_type`).
    pub kind: String,
    /// The event JSON in the face's format, serialised once so that every copy and retry sends
    /// the same bytes.
    pub body: String,
}

/// The model's answer on the fake's customer-facing pages (`/_fake/authenticate/{id}`): HTML,
/// or a redirect, with the webhook events the page caused. Not an API answer: it is never
/// counted, authenticated or stored under an idempotency key.
#[derive(Clone, Debug)]
pub struct PageAnswer {
    /// The HTTP status: 200, 303 (with [`location`](Self::location)), 400, 404 or 409.
    pub status: u16,
    /// Where a 303 sends the browser.
    pub location: Option<String>,
    /// The HTML page (also sent with a 303, for a browser that does not follow it).
    pub html: String,
    /// The webhook events to send, as in [`WireAnswer::events`].
    pub events: Vec<ModelEvent>,
}

impl PageAnswer {
    /// An HTML page with this status that caused no events.
    pub(crate) fn html(status: u16, html: String) -> Self {
        Self {
            status,
            location: None,
            html,
            events: Vec::new(),
        }
    }
}

/// A request's answer before it becomes a [`WireAnswer`].
#[derive(Debug)]
pub(crate) struct Handled {
    pub(crate) reply: Reply,
    pub(crate) replayed: bool,
    pub(crate) delivery: Delivery,
    pub(crate) events: Vec<ModelEvent>,
}

impl Handled {
    /// An answer written at once that caused no events.
    pub(crate) fn plain(reply: Reply) -> Self {
        Self::now(reply, Vec::new())
    }

    /// An answer written at once, with the events it caused.
    pub(crate) fn now(reply: Reply, events: Vec<ModelEvent>) -> Self {
        Self {
            reply,
            replayed: false,
            delivery: Delivery::Now,
            events,
        }
    }
}

/// A JSON answer: status and exact body, kept as text so that an idempotent replay is
/// byte-for-byte the answer the first request got (or would have got). Nothing here knows about
/// HTTP servers: faces build replies, the server writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The HTTP status code.
    pub(crate) status: u16,
    /// The serialised JSON body.
    pub(crate) body: String,
}

impl Reply {
    /// An answer with `value` as its JSON body.
    pub(crate) fn json(status: u16, value: &Value) -> Self {
        Self {
            status,
            body: value.to_string(),
        }
    }

    /// An answer with `text` as its body as it is (the 2C2P face's plain-text answers).
    pub(crate) fn text(status: u16, text: impl Into<String>) -> Self {
        Self {
            status,
            body: text.into(),
        }
    }

    /// Whether the answer may be remembered under an idempotency key: everything except server
    /// errors. The fake's only 5xx (`pm_fake_error_before_charge`) fails before the endpoint did
    /// any work, and Stripe saves a result only once execution began ("Idempotent requests").
    pub(crate) fn is_storable(&self) -> bool {
        self.status < 500
    }
}
