//! Sending a keyed create (a charge or a refund) to a PSP, for every adapter that sends one
//! request per create: busy answers (409, 429) are retried, and the *answered* rule is applied
//! once, here. Moved out of the Stripe adapter unchanged, so Stripe and Omise share it.
//!
//! The answered rule: a call that made no connection proves only that **this** call did
//! not reach the PSP. Once any call under the key got an answer (a 409 or 429 that was retried),
//! a later connection failure no longer proves the PSP never saw the key: it is unknown, as is
//! any failure after connecting; and so is a 401/403 after such an answer (the adapters check
//! [`Sent::retried`] for that).

use super::transport::{CallFailure, PspTransport, WireCall, WireReply};
use std::time::Duration;

/// How often a busy answer (409, or 429) is retried before the outcome is unknown.
pub(crate) const BUSY_RETRIES: u32 = 2;
/// Pause before such a retry.
pub(crate) const BUSY_PAUSE: Duration = Duration::from_millis(300);

/// The last answer of a keyed create (a charge or a refund) once 409 and 429 were retried.
#[derive(Debug)]
pub(crate) struct Sent {
    /// What the PSP answered last.
    pub(crate) reply: WireReply,
    /// Whether an earlier call under the key was answered (a 409 or 429 that was retried).
    pub(crate) retried: bool,
    /// Whether one of those answers was a 409: the PSP said an earlier request under the key
    /// was still being processed (a 429 says only that it took none).
    pub(crate) in_progress: bool,
}

/// A keyed create whose last call got no answer.
#[derive(Debug)]
pub(crate) enum NoAnswer {
    /// No call under the key can have reached the PSP: no connection, and no earlier answer.
    NotSent(String),
    /// A call may have reached the PSP.
    Unknown(String),
}

/// Sends a keyed create (`call` carries an `Idempotency-Key`) over `transport`, within `timeout`
/// in all and `request_timeout` per call, retrying a 409 or a 429 up to [`BUSY_RETRIES`] times
/// while the time allows. Once any call got an answer, a later connection failure no longer
/// proves the PSP never saw the key: it is [`NoAnswer::Unknown`], as is any failure after
/// connecting.
pub(crate) async fn send_with_busy_retries<T: PspTransport + ?Sized>(
    transport: &T,
    call: &WireCall,
    timeout: Duration,
    request_timeout: Duration,
) -> Result<Sent, NoAnswer> {
    let started = tokio::time::Instant::now();
    let mut busy = 0;
    let mut in_progress = false;
    let mut answered = false;
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        let reply = match transport.send(call, left.min(request_timeout)).await {
            Ok(reply) => reply,
            Err(CallFailure::NotConnected(reason)) if !answered => {
                return Err(NoAnswer::NotSent(reason))
            }
            Err(CallFailure::NotConnected(reason) | CallFailure::AfterConnect(reason)) => {
                return Err(NoAnswer::Unknown(reason))
            }
        };
        answered = true;
        if matches!(reply.status, 409 | 429)
            && busy < BUSY_RETRIES
            && started.elapsed() + BUSY_PAUSE * 2 < timeout
        {
            busy += 1;
            in_progress |= reply.status == 409;
            tokio::time::sleep(BUSY_PAUSE).await;
            continue;
        }
        return Ok(Sent {
            reply,
            retried: busy > 0,
            in_progress,
        });
    }
}

/// Raises the credentials alarm (`psp-credentials`) for a 401 or 403 and says what happened.
pub(crate) fn credentials_refused(status: u16) -> String {
    tracing::error!(
        status,
        alarm = "psp-credentials",
        "the PSP refused our credentials"
    );
    format!("the PSP refused our credentials ({status})")
}
