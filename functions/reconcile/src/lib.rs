//! The reconcile function (EventBridge schedule): settles attempts stuck in `processing`.

pub mod handler;
