//! The faces: one PSP's wire format each, over the provider-neutral [ledger](crate::ledger) —
//! Stripe's PaymentIntents (`stripe`), Omise's Charges (`omise`), 2C2P PGW v4.3 and its Payment
//! Maintenance API (`twoc2p`),
//! Square's Payments and Refunds (`square`) and PayPal's OAuth, Orders v2 and Payments v2
//! (`paypal`).
//! A face implements [`Face`](crate::ledger::Face): it reads its PSP's requests, validates them in
//! that PSP's terms, calls the ledger's neutral operations, and writes its PSP's objects, errors
//! and webhook events. Faces depend on the ledger and on the shared helpers here (`form`,
//! `dates`, `page`), never on one another; the model (`crate::model`) picks one.

mod dates;
mod form;
mod omise;
mod page;
mod paypal;
mod square;
mod stripe;
// pub(crate): the model's tests of the 2C2P face's rules use its helpers.
pub(crate) mod twoc2p;

pub(crate) use self::dates::iso8601;
pub(crate) use self::omise::OmiseFace;
pub(crate) use self::paypal::{PayPalFace, PayPalSettings};
pub(crate) use self::square::SquareFace;
pub(crate) use self::stripe::StripeFace;
pub(crate) use self::twoc2p::maintenance::ACTION_PATH as TWOC2P_ACTION_PATH;
pub(crate) use self::twoc2p::{sign as sign_twoc2p_jwt, TwoC2pFace};
