//! Authorize now, capture later on 2C2P, through the Payment Maintenance API: a settle (`S`)
//! captures an authorization, a void (`V`) cancels it.
//!
//! 2C2P documents no per-payment "authorize only" request: settling later is a setting of the
//! merchant's account, which 2C2P makes, and on such an account every approved payment waits for
//! a settle — payonce's automatic ones too, which it then settles itself at once (the charge's
//! second step, as a PayPal order's capture). A deployment says which kind of account it has
//! (`TWOC2P_SETTLEMENT`); payonce cannot ask 2C2P.
//!
//! What the design leans on, and what it does not:
//! - **A settle is sent again safely.** 2C2P has no idempotency key, but a second `S` of a
//!   settled transaction is refused `39` "already settled", read as the capture it is; so a
//!   settle whose answer was lost is simply sent again (a look first would not help: an
//!   authorization and a captured payment waiting for the day's batch both read `A`).
//! - **Whole only.** Whether a settle may take less than the authorization contradicts between
//!   2C2P's documentation versions, so payonce captures all of it (`actionAmount` the whole,
//!   which every version accepts) and refuses a partial capture before claiming anything.
//! - **The answer's status decides, where it has one.** A transaction 2C2P says is settled was
//!   captured, whatever the code; one it says is voided was canceled (by our void, or the
//!   acquirer when the authorization lapsed). Codes mean something only for a transaction that
//!   stayed authorized.
//! - **`32` "settlement not required"** means 2C2P settled the payment at its approval: the
//!   account settles automatically and the deployment's setting is wrong. The money moved, so it
//!   is read as captured, with `psp-answer-untrusted` raised for the operator.
//! - **A void is documented only before the day's cut-off**; later it is refused and the
//!   authorization stays until the acquirer lets it lapse (when is the acquirer's: commonly 7
//!   days), raised `authorization-expiring` a day before.

use super::transport::PspTransport;
use super::twoc2p_ids::invoice_no_for;
use super::twoc2p_maintenance::{Action, ActionAnswer, ActionFailure, Maintenance, ProcessType};
use crate::domain::{CancellationReason, CaptureMethod, OperationKind, Settlement};
use crate::ports::{OperationOutcome, OperationRequest};
use std::time::Duration;

/// Transaction statuses of a settled (captured) payment: settled, or refunded since.
const SETTLED: [&str; 3] = ["S", "RF", "RP"];

/// Transaction statuses of an authorization that can never be captured: voided (`V`), expired
/// (`EX`). A void pending (`VP`) is not yet either: unknown until it reads one or the other.
const VOIDED: [&str; 2] = ["V", "EX"];

/// Settle codes that refuse for good a transaction left as it was: `12` not in a state for it
/// (still waiting for 3-D Secure, or failed), `31` not allowed, `33` partial not allowed, `34`
/// rejected, `35` failed, `36` past the deadline.
const SETTLE_REFUSALS: [&str; 6] = ["12", "31", "33", "34", "35", "36"];

/// Void codes that refuse for good a transaction left as it was: `12` not in a state for it (a
/// payment still waiting for 3-D Secure, which 2C2P ends itself, or failed), `21` not allowed
/// (past the day's cut-off), `25` failed.
const VOID_REFUSALS: [&str; 3] = ["12", "21", "25"];

impl<T: PspTransport> Maintenance<T> {
    /// Settles (capture) or voids (cancel) `request`'s authorization, its invoice being the
    /// payment's 2C2P id.
    pub async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        let invoice_no = request.provider_payment_id.as_str();
        if invoice_no_for(&request.payment_id).as_deref() != Some(invoice_no) {
            return OperationOutcome::NotSent {
                reason: format!(
                    "{invoice_no:?} is not the 2C2P invoice of {}: nothing sent",
                    request.payment_id
                ),
            };
        }
        let whole = request.payment_amount;
        let process_type = match request.kind {
            // An automatic payment is settled by payonce as soon as 2C2P approves it, outside
            // any claim: a void racing that settle could undo a capture already booked (before
            // the day's batch a void cancels a settle). Only an authorization kept for staff is
            // voided.
            OperationKind::Cancel if request.capture != CaptureMethod::Manual => {
                return OperationOutcome::Refused {
                    code: "cancel_not_supported".into(),
                }
            }
            OperationKind::Capture if request.amount.is_some_and(|amount| amount != whole) => {
                return OperationOutcome::Refused {
                    code: "2c2p_partial_settlement".into(),
                }
            }
            OperationKind::Capture => ProcessType::Settle,
            OperationKind::Cancel => ProcessType::Void,
        };
        let action = Action {
            process_type,
            invoice_no: invoice_no.to_owned(),
            amount: request.currency.decimal_from_minor(whole),
            // For whatever 2C2P makes of it (as a refund's): nothing relies on it.
            idempotency_id: Some(request.idempotency_key.clone()),
        };
        match self.act(&action, timeout).await {
            Ok(answer) => read(&answer, request),
            Err(ActionFailure::NotSent(reason) | ActionFailure::Credentials(reason)) => {
                OperationOutcome::NotSent { reason }
            }
            Err(ActionFailure::Unknown(reason)) => OperationOutcome::Unknown { reason },
        }
    }
}

/// What an `S` or `V` answer says of the payment (see the module's documentation).
fn read(answer: &ActionAnswer, request: &OperationRequest) -> OperationOutcome {
    let provider_payment_id = request.provider_payment_id.clone();
    let captured = || {
        OperationOutcome::Answered(Settlement::Captured {
            provider_payment_id: provider_payment_id.clone(),
            amount_captured: request.payment_amount,
        })
    };
    let code = answer.resp_code.as_str();
    let status = answer.status.as_str();
    let amount = request.currency.minor_from_decimal(answer.amount.trim());
    if !answer.amount.trim().is_empty() && amount != Some(request.payment_amount) {
        tracing::error!(payment_id = %request.payment_id, amount = %answer.amount, alarm = "psp-answer-untrusted",
            "a 2C2P settle or void answer names another amount than the payment's; nothing read from it");
        return OperationOutcome::Unknown {
            reason: format!(
                "2C2P answered about {} for our {}",
                answer.amount, request.payment_amount
            ),
        };
    }
    if crate::mutations::active(crate::mutations::Mutation::TwoC2pSettledIsRefused) && code == "39"
    {
        // The planted hole: "already settled" taken for a refusal.
        return OperationOutcome::Refused {
            code: "2c2p_39".into(),
        };
    }
    if SETTLED.contains(&status) {
        return captured();
    }
    if VOIDED.contains(&status) {
        return OperationOutcome::Answered(Settlement::Canceled {
            provider_payment_id: Some(provider_payment_id),
            reason: match request.kind {
                OperationKind::Cancel if status != "EX" => CancellationReason::Requested,
                // Only payonce voids, and never while a capture is claimed: the acquirer let
                // the authorization lapse.
                _ => CancellationReason::Expired,
            },
        });
    }
    match (request.kind, code) {
        (OperationKind::Capture, "00" | "39") => captured(),
        (OperationKind::Capture, "32") => {
            tracing::error!(payment_id = %request.payment_id, alarm = "psp-answer-untrusted",
                "2C2P says the payment needs no settle (32): the account settles automatically, so TWOC2P_SETTLEMENT must not be `manual`; the payment was captured at its approval");
            captured()
        }
        (OperationKind::Cancel, "29") => OperationOutcome::Answered(Settlement::Canceled {
            provider_payment_id: Some(provider_payment_id),
            reason: CancellationReason::Requested,
        }),
        (OperationKind::Capture, refused) if SETTLE_REFUSALS.contains(&refused) => {
            OperationOutcome::Refused {
                code: format!("2c2p_{refused}"),
            }
        }
        (OperationKind::Cancel, refused) if VOID_REFUSALS.contains(&refused) => {
            OperationOutcome::Refused {
                code: format!("2c2p_{refused}"),
            }
        }
        _ => OperationOutcome::Unknown {
            reason: format!(
                "2C2P answered {code} (status {status:?}) to the {}",
                request.kind.as_str()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::psp::transport::scripted::{after_connect, not_connected, Scripted, Step};
    use crate::adapters::psp::transport::{WireBody, WireReply};
    use crate::adapters::psp::twoc2p_maintenance::tests::keys;
    use crate::adapters::psp::twoc2p_maintenance::MaintenanceKeys;
    use crate::domain::Currency;

    const INVOICE: &str = "0123456789abcdef0123456789abcdef";

    struct Fixture {
        maintenance: Maintenance<Scripted>,
        twoc2p: MaintenanceKeys,
    }

    fn fixture_steps(steps: impl FnOnce(&MaintenanceKeys) -> Vec<Step>) -> Fixture {
        let (ours, theirs) = keys();
        Fixture {
            maintenance: Maintenance::new(
                Scripted::new(steps(&theirs)),
                "/action",
                "JT01",
                ours,
                Duration::from_secs(10),
            ),
            twoc2p: theirs,
        }
    }

    fn fixture(answers: &[String]) -> Fixture {
        fixture_steps(|theirs| {
            answers
                .iter()
                .map(|xml| {
                    Ok(WireReply {
                        status: 200,
                        body: theirs.seal(xml).expect("sealed").into_bytes(),
                    })
                })
                .collect()
        })
    }

    fn answer(process_type: &str, code: &str, status: &str) -> String {
        format!("<PaymentProcessResponse><version>3.8</version><respCode>{code}</respCode><processType>{process_type}</processType><invoiceNo>{INVOICE}</invoiceNo><amount>100.00</amount><status>{status}</status></PaymentProcessResponse>")
    }

    fn request(kind: OperationKind, amount: Option<i64>) -> OperationRequest {
        OperationRequest {
            kind,
            payment_id: format!("pay_{INVOICE}"),
            provider_payment_id: INVOICE.into(),
            amount,
            payment_amount: 10_000,
            capture: CaptureMethod::Manual,
            currency: Currency::Thb,
            idempotency_key: kind.psp_key(&format!("pay_{INVOICE}")),
        }
    }

    /// What 2C2P read of each call: `processType actionAmount`.
    fn sent(fixture: &Fixture) -> Vec<String> {
        fixture
            .maintenance
            .transport()
            .calls()
            .iter()
            .map(|call| {
                let WireBody::Text(token) = &call.body else {
                    panic!("not a token: {call:?}")
                };
                let xml = fixture.twoc2p.open(token).expect("2C2P reads our request");
                let field = |name: &str| {
                    xml.split(&format!("<{name}>"))
                        .nth(1)
                        .and_then(|rest| rest.split('<').next())
                        .unwrap_or("")
                        .to_owned()
                };
                assert_eq!(field("invoiceNo"), INVOICE);
                format!("{} {}", field("processType"), field("actionAmount"))
            })
            .collect()
    }

    async fn operate(fixture: &Fixture, request: &OperationRequest) -> OperationOutcome {
        fixture
            .maintenance
            .operate(request, Duration::from_secs(10))
            .await
    }

    fn captured() -> OperationOutcome {
        OperationOutcome::Answered(Settlement::Captured {
            provider_payment_id: INVOICE.into(),
            amount_captured: 10_000,
        })
    }

    fn canceled(reason: CancellationReason) -> OperationOutcome {
        OperationOutcome::Answered(Settlement::Canceled {
            provider_payment_id: Some(INVOICE.into()),
            reason,
        })
    }

    #[tokio::test]
    async fn a_capture_settles_the_whole_and_a_settle_sent_again_reads_already_settled_as_captured()
    {
        for (code, status) in [("00", "S"), ("00", "A"), ("39", "A"), ("39", "S")] {
            for amount in [None, Some(10_000)] {
                let f = fixture(&[answer("S", code, status)]);
                let outcome = operate(&f, &request(OperationKind::Capture, amount)).await;
                assert_eq!(outcome, captured(), "{code} {status} {amount:?}");
                assert_eq!(sent(&f), ["S 100.00"]);
            }
        }
    }

    #[tokio::test]
    async fn a_partial_capture_is_refused_unsent() {
        let f = fixture(&[]);
        let outcome = operate(&f, &request(OperationKind::Capture, Some(4_000))).await;
        assert_eq!(
            outcome,
            OperationOutcome::Refused {
                code: "2c2p_partial_settlement".into()
            }
        );
        assert!(sent(&f).is_empty());
    }

    #[tokio::test]
    async fn a_cancel_voids_the_whole_and_an_already_voided_one_is_canceled() {
        for (code, status) in [("00", "V"), ("29", "V"), ("29", "")] {
            let f = fixture(&[answer("V", code, status)]);
            let outcome = operate(&f, &request(OperationKind::Cancel, None)).await;
            assert_eq!(
                outcome,
                canceled(CancellationReason::Requested),
                "{code} {status}"
            );
            assert_eq!(sent(&f), ["V 100.00"]);
        }
    }

    #[tokio::test]
    async fn an_automatic_payment_is_never_voided_a_void_pending_is_unknown_and_an_expiry_canceled()
    {
        // An automatic payment is settled by payonce outside any claim: no void may race it.
        let f = fixture(&[]);
        let automatic = OperationRequest {
            capture: CaptureMethod::Automatic,
            ..request(OperationKind::Cancel, None)
        };
        assert_eq!(
            operate(&f, &automatic).await,
            OperationOutcome::Refused {
                code: "cancel_not_supported".into()
            }
        );
        assert!(sent(&f).is_empty());
        // A void pending is not final (the void may still fail): unknown; an expired
        // authorization can never be captured.
        let f = fixture(&[answer("V", "00", "VP")]);
        assert!(matches!(
            operate(&f, &request(OperationKind::Cancel, None)).await,
            OperationOutcome::Unknown { .. }
        ));
        for kind in [OperationKind::Capture, OperationKind::Cancel] {
            let process = if kind == OperationKind::Capture {
                "S"
            } else {
                "V"
            };
            let f = fixture(&[answer(process, "31", "EX")]);
            assert_eq!(
                operate(&f, &request(kind, None)).await,
                canceled(CancellationReason::Expired),
                "{kind:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_transactions_status_decides_over_the_code() {
        // A void meeting a settled transaction: it was captured.
        let f = fixture(&[answer("V", "21", "S")]);
        assert_eq!(
            operate(&f, &request(OperationKind::Cancel, None)).await,
            captured()
        );
        // A settle meeting a voided one: the authorization lapsed.
        let f = fixture(&[answer("S", "31", "V")]);
        assert_eq!(
            operate(&f, &request(OperationKind::Capture, None)).await,
            canceled(CancellationReason::Expired)
        );
    }

    #[tokio::test]
    async fn settlement_not_required_means_the_account_settled_it_at_approval() {
        let f = fixture(&[answer("S", "32", "A")]);
        assert_eq!(
            operate(&f, &request(OperationKind::Capture, None)).await,
            captured()
        );
    }

    #[tokio::test]
    async fn refusals_of_an_authorization_left_as_it_was_are_refused_and_anything_else_unknown() {
        for (kind, code) in [
            (OperationKind::Capture, "31"),
            (OperationKind::Capture, "34"),
            (OperationKind::Capture, "36"),
            (OperationKind::Cancel, "21"),
            (OperationKind::Cancel, "25"),
            (OperationKind::Cancel, "12"),
            (OperationKind::Capture, "12"),
        ] {
            let process = if kind == OperationKind::Capture {
                "S"
            } else {
                "V"
            };
            let f = fixture(&[answer(process, code, "A")]);
            assert_eq!(
                operate(&f, &request(kind, None)).await,
                OperationOutcome::Refused {
                    code: format!("2c2p_{code}")
                },
                "{code}"
            );
        }
        for (process, code) in [("S", "99"), ("S", "30"), ("V", "00"), ("V", "39")] {
            let kind = if process == "S" {
                OperationKind::Capture
            } else {
                OperationKind::Cancel
            };
            let f = fixture(&[answer(process, code, "A")]);
            let outcome = operate(&f, &request(kind, None)).await;
            assert!(
                matches!(outcome, OperationOutcome::Unknown { .. }),
                "{process} {code}: {outcome:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_answer_about_another_amount_or_invoice_is_never_believed() {
        let other = answer("S", "00", "S").replace("100.00", "1.00");
        let f = fixture(&[other]);
        assert!(matches!(
            operate(&f, &request(OperationKind::Capture, None)).await,
            OperationOutcome::Unknown { .. }
        ));
        let f = fixture(&[answer("S", "00", "S").replace(INVOICE, "ffff")]);
        assert!(matches!(
            operate(&f, &request(OperationKind::Capture, None)).await,
            OperationOutcome::Unknown { .. }
        ));
        // An id that is not the payment's invoice: nothing sent.
        let f = fixture(&[]);
        let mut foreign = request(OperationKind::Capture, None);
        foreign.provider_payment_id = "ffff".into();
        assert!(matches!(
            operate(&f, &foreign).await,
            OperationOutcome::NotSent { .. }
        ));
        assert!(sent(&f).is_empty());
    }

    #[tokio::test]
    async fn no_connection_is_not_sent_a_lost_answer_unknown_and_refused_keys_not_sent() {
        let f = fixture_steps(|_| vec![not_connected()]);
        assert!(matches!(
            operate(&f, &request(OperationKind::Capture, None)).await,
            OperationOutcome::NotSent { .. }
        ));
        let f = fixture_steps(|_| vec![after_connect()]);
        assert!(matches!(
            operate(&f, &request(OperationKind::Capture, None)).await,
            OperationOutcome::Unknown { .. }
        ));
        let f = fixture_steps(|_| {
            vec![Ok(WireReply {
                status: 401,
                body: b"Unauthorized".to_vec(),
            })]
        });
        assert!(matches!(
            operate(&f, &request(OperationKind::Cancel, None)).await,
            OperationOutcome::NotSent { .. }
        ));
    }
}
