//! Omise's capture and reverse of an authorise-only charge ("Charges API": `POST
//! /charges/{id}/capture`, `POST /charges/{id}/reverse`), each under the claim's derived key.
//!
//! Omise documents no idempotency for either (UNCONFIRMED that `Idempotency-Key` does anything
//! there), so every call looks first: the charge is retrieved, and one already captured,
//! reversed or expired answers from itself, never posted again (the re-send after a lost answer
//! meets what the lost call did). A refusal is read against the charge again: one that moved
//! meanwhile is what the PSP says, one that did not is a refusal. Omise captures the whole
//! authorization (a partial capture needs a `pre_auth` charge, which only merchants contracted
//! with Omise Thailand may create), so only a capture of all of it is ever posted.

use super::keyed::{self, credentials_refused, NoAnswer, Sent};
use super::omise::{is_client_error, is_object_id, OmisePsp};
use super::omise_webhook::charge_settlement;
use super::transport::{PspTransport, WireBody};
use crate::domain::{OperationKind, Settlement};
use crate::ports::{OperationOutcome, OperationRequest};
use serde_json::Value;
use std::time::Duration;

impl<T: PspTransport> OmisePsp<T> {
    /// Captures or reverses the charge under `request.idempotency_key`.
    pub(super) async fn operate_charge(
        &self,
        request: &OperationRequest,
        timeout: Duration,
    ) -> OperationOutcome {
        let id = request.provider_payment_id.as_str();
        if !is_object_id(id) {
            return OperationOutcome::NotSent {
                reason: format!("{id:?} is not an Omise charge id: nothing sent"),
            };
        }
        // The look, the post and the second look share one budget: never past the caller's.
        let started = tokio::time::Instant::now();
        let left = || timeout.saturating_sub(started.elapsed());
        match self.settled_charge(id, left()).await {
            Ok(Some(settlement)) => return OperationOutcome::Answered(settlement),
            Ok(None) => {}
            // Nothing posted: the look failed.
            Err(reason) => return OperationOutcome::NotSent { reason },
        }
        let action = match request.kind {
            OperationKind::Capture => "capture",
            OperationKind::Cancel => "reverse",
        };
        let call = self.call(
            "POST",
            format!("/charges/{id}/{action}"),
            Vec::new(),
            WireBody::Form(Vec::new()),
            Some(&request.idempotency_key),
        );
        let Sent { reply, retried, .. } =
            match keyed::send_with_busy_retries(self.transport(), &call, left(), left()).await {
                Ok(sent) => sent,
                Err(NoAnswer::NotSent(reason)) => return OperationOutcome::NotSent { reason },
                Err(NoAnswer::Unknown(reason)) => return OperationOutcome::Unknown { reason },
            };
        if matches!(reply.status, 401 | 403) {
            let reason = credentials_refused(reply.status);
            return if retried {
                OperationOutcome::Unknown { reason }
            } else {
                OperationOutcome::NotSent { reason }
            };
        }
        let body: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
        match body["object"].as_str() {
            Some("charge") if (200..300).contains(&reply.status) => {
                match charge_settlement(&body, body["id"].as_str().map(str::to_owned)) {
                    Some(settlement) if done(&settlement) => OperationOutcome::Answered(settlement),
                    _ => OperationOutcome::Unknown {
                        reason: format!(
                            "the charge is {} after its {action}",
                            body["status"].as_str().unwrap_or("<no status>")
                        ),
                    },
                }
            }
            Some("error") if is_client_error(reply.status) => {
                // A refusal: of a charge that moved meanwhile (then what it moved to answers),
                // or for good.
                let code = body["code"].as_str().unwrap_or("bad_request").to_owned();
                match self.settled_charge(id, left()).await {
                    Ok(Some(settlement)) => OperationOutcome::Answered(settlement),
                    Ok(None) => OperationOutcome::Refused { code },
                    Err(reason) => OperationOutcome::Unknown { reason },
                }
            }
            _ => OperationOutcome::Unknown {
                reason: format!("PSP answered {} to the {action}", reply.status),
            },
        }
    }

    /// The charge's own word, if it is past its authorization: captured, reversed or expired.
    async fn settled_charge(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<Settlement>, String> {
        let reply = self
            .plain(
                self.call(
                    "GET",
                    format!("/charges/{id}"),
                    Vec::new(),
                    WireBody::Empty,
                    None,
                ),
                timeout,
            )
            .await
            .map_err(|e| e.reason)?;
        if reply.status != 200 {
            return Err(format!("the charge's retrieve answered {}", reply.status));
        }
        let charge: Value =
            serde_json::from_slice(&reply.body).map_err(|e| format!("unreadable charge: {e}"))?;
        Ok(charge_settlement(&charge, Some(id.to_owned())).filter(done))
    }
}

/// Whether a charge's word ends an operation: captured (or succeeded), or canceled.
fn done(settlement: &Settlement) -> bool {
    matches!(
        settlement,
        Settlement::Captured { .. } | Settlement::Succeeded { .. } | Settlement::Canceled { .. }
    )
}
