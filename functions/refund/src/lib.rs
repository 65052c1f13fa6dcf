//! The refund function: POST /payments/{payment_id}/refunds, for staff tokens only.

pub mod handler;
