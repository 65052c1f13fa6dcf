//! The charge function: POST /payments and GET /payments/{payment_id}.

pub mod handler;
