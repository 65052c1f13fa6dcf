//! The orders function: POST /orders, GET /orders/{order_id}, PATCH /orders/{order_id}.

pub mod handler;
