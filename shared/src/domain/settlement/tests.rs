//! The transition function's rules, one test per rule, and every status against every
//! settlement for the order they only rise in.

use super::*;
use crate::domain::payment::{test_payment, CaptureMethod};

fn payment(status: PaymentStatus, failure: Option<FailureKind>) -> Payment {
    test_payment(status, failure)
}

fn succeeded() -> Settlement {
    Settlement::Succeeded {
        provider_payment_id: "pi_1".into(),
    }
}

fn declined() -> Settlement {
    Settlement::Declined {
        provider_payment_id: Some("pi_1".into()),
        decline_code: "generic_decline".into(),
    }
}

#[test]
fn processing_moves_to_either_final_state() {
    let p = payment(PaymentStatus::Processing, None);
    assert!(matches!(
        transition(&p, &succeeded()),
        Transition::Apply {
            status: PaymentStatus::Succeeded,
            ..
        }
    ));
    match transition(&p, &declined()) {
        Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(f),
            provider_payment_id,
            ..
        } => {
            assert_eq!(f.kind, FailureKind::Declined);
            assert_eq!(f.decline_code.as_deref(), Some("generic_decline"));
            assert_eq!(provider_payment_id.as_deref(), Some("pi_1"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        transition(&p, &Settlement::Abandoned),
        Transition::Apply {
            status: PaymentStatus::Failed,
            ..
        }
    ));
}

#[test]
fn nothing_moves_a_success_backwards() {
    let p = payment(PaymentStatus::Succeeded, None);
    for s in [
        succeeded(),
        declined(),
        Settlement::Rejected,
        Settlement::Abandoned,
    ] {
        assert_eq!(transition(&p, &s), Transition::Unchanged, "{s:?}");
    }
}

#[test]
fn a_psp_success_beats_an_inferred_failure_but_failures_do_not_stack() {
    let abandoned = payment(PaymentStatus::Failed, Some(FailureKind::Abandoned));
    assert!(matches!(
        transition(&abandoned, &succeeded()),
        Transition::Apply {
            status: PaymentStatus::Succeeded,
            failure: None,
            ..
        }
    ));
    assert_eq!(transition(&abandoned, &declined()), Transition::Unchanged);
    let declined_payment = payment(PaymentStatus::Failed, Some(FailureKind::Declined));
    assert_eq!(
        transition(&declined_payment, &Settlement::Abandoned),
        Transition::Unchanged
    );
}

#[test]
fn word_about_another_psp_payment_moves_nothing_once_ours_is_known() {
    // GIVEN a declined payment whose PSP payment we hold
    let mut declined_payment = payment(PaymentStatus::Failed, Some(FailureKind::Declined));
    declined_payment.provider_payment_id = Some("pi_1".into());
    // WHEN a signed success names our payment but another PSP payment
    let foreign = Settlement::Succeeded {
        provider_payment_id: "pi_other".into(),
    };
    // THEN nothing moves; the same word about ours would (a success beats a failure only
    // if inferred, so use a processing payment for that)
    assert!(names_another_payment(&declined_payment, &foreign));
    assert_eq!(
        transition(&declined_payment, &foreign),
        Transition::Unchanged
    );
    let mut processing = payment(PaymentStatus::Processing, None);
    processing.provider_payment_id = Some("pi_1".into());
    assert_eq!(transition(&processing, &foreign), Transition::Unchanged);
    assert!(matches!(
        transition(&processing, &succeeded()),
        Transition::Apply {
            status: PaymentStatus::Succeeded,
            ..
        }
    ));
    // AND before any PSP id is stored, the first word names it
    let unknown = payment(PaymentStatus::Processing, None);
    assert!(!names_another_payment(&unknown, &foreign));
}

#[test]
fn only_the_charges_own_success_from_processing_leaves_the_order() {
    let processing = payment(PaymentStatus::Processing, None);
    let failed = payment(PaymentStatus::Failed, Some(FailureKind::Abandoned));
    // A success from processing: the attempt holds its order, which it leaves.
    assert!(completion_leaves_order(
        &processing,
        &transition(&processing, &succeeded())
    ));
    // A success that beats an inferred failure: the order may have moved on, so it follows
    // (or a duplicate refund is made).
    assert!(!completion_leaves_order(
        &failed,
        &transition(&failed, &succeeded())
    ));
    // A decline releases the order; nothing changing writes no order either way.
    assert!(!completion_leaves_order(
        &processing,
        &transition(&processing, &declined())
    ));
    assert!(!completion_leaves_order(
        &processing,
        &Transition::Unchanged
    ));
}

fn action() -> NextAction {
    NextAction {
        url: "https://psp.example/authenticate/pi_1".into(),
        expires_at_ms: 3_600_000,
    }
}

/// One settlement of every kind, all about `pi_1` where they name a PSP payment.
fn every_settlement() -> Vec<Settlement> {
    let pi = || "pi_1".to_string();
    vec![
        succeeded(),
        Settlement::Captured {
            provider_payment_id: pi(),
            amount_captured: 60,
        },
        Settlement::ActionRequired {
            provider_payment_id: pi(),
            next_action: action(),
        },
        Settlement::ActionCompleted {
            provider_payment_id: pi(),
        },
        Settlement::Authorized {
            provider_payment_id: pi(),
            amount_capturable: 100,
            capture_before_ms: Some(7 * 86_400_000),
        },
        declined(),
        Settlement::Rejected,
        Settlement::Refused,
        Settlement::AuthenticationRequired {
            provider_payment_id: Some(pi()),
        },
        Settlement::AuthenticationFailed {
            provider_payment_id: Some(pi()),
        },
        Settlement::Canceled {
            provider_payment_id: Some(pi()),
            reason: CancellationReason::Requested,
        },
        Settlement::Abandoned,
        Settlement::Pending {
            provider_payment_id: pi(),
        },
    ]
}

/// `status`, manual capture, with the PSP id `pi_1` held and the progress that status has.
fn manual(status: PaymentStatus) -> Payment {
    let mut p = payment(status, None);
    p.capture = CaptureMethod::Manual;
    p.return_url = Some("https://shop.example/return".into());
    p.provider_payment_id = Some("pi_1".into());
    match status {
        PaymentStatus::RequiresAction => p.progress.next_action = Some(action()),
        PaymentStatus::Authorized => p.progress.amount_capturable = 100,
        PaymentStatus::Failed => {
            p.failure = Some(Failure {
                kind: FailureKind::Declined,
                decline_code: None,
            })
        }
        PaymentStatus::Canceled => {
            p.progress.cancellation_reason = Some(CancellationReason::Requested)
        }
        _ => {}
    }
    p
}

#[test]
fn every_move_raises_the_status_and_a_failure_is_raised_only_by_a_success() {
    for status in PaymentStatus::ALL {
        for capture in [CaptureMethod::Automatic, CaptureMethod::Manual] {
            let current = Payment {
                capture,
                ..manual(status)
            };
            for settlement in every_settlement() {
                let step = transition(&current, &settlement);
                let Some(to) = step.status() else { continue };
                let case = format!("{status:?} ({capture:?}) + {settlement:?} → {to:?}");
                assert!(to.rank() >= status.rank(), "lowered: {case}");
                if to == status {
                    // Within one status only the two one-way fill-ins move anything.
                    let after = current.after(&step, 1);
                    let flag = status == PaymentStatus::RequiresAction
                        && !current.progress.action_completed
                        && after.progress.action_completed;
                    let amount = status == PaymentStatus::Succeeded
                        && current.progress.amount_captured.is_none()
                        && after.progress.amount_captured.is_some();
                    let lapse = status == PaymentStatus::Authorized
                        && current.progress.capture_before_ms.is_none()
                        && after.progress.capture_before_ms.is_some();
                    let id = status == PaymentStatus::Processing
                        && current.provider_payment_id.is_none()
                        && after.provider_payment_id.is_some();
                    assert!(
                        flag || amount || lapse || id,
                        "moved within its status: {case}"
                    );
                }
                if status.is_final() {
                    assert_eq!(to, PaymentStatus::Succeeded, "a final status moved: {case}");
                }
                // A final status closes what was open; a failure carries its detail.
                if to.is_final() {
                    let after = current.after(&step, 1);
                    assert_eq!(after.progress.next_action, None, "{case}");
                    assert_eq!(after.progress.amount_capturable, 0, "{case}");
                    assert_eq!(
                        after.failure.is_some(),
                        to == PaymentStatus::Failed,
                        "{case}"
                    );
                    assert_eq!(
                        after.progress.cancellation_reason.is_some(),
                        to == PaymentStatus::Canceled,
                        "{case}"
                    );
                }
            }
        }
    }
}

#[test]
fn each_status_moves_on_exactly_the_word_it_can_take() {
    use PaymentStatus as S;
    // The status each settlement of `every_settlement` leads to from each status, in its
    // order: P processing, A requires_action, Z authorized, S succeeded, F failed, C canceled,
    // - unchanged. (Each payment holds its PSP id: a refusal naming no PSP payment moves none.)
    let table = [
        (S::Processing, "S S A - Z F - - F F F F -"),
        (S::RequiresAction, "S S - A Z F - - F F C - -"),
        (S::Authorized, "S S - - Z C - - - - C - -"),
        (S::Succeeded, "- S - - - - - - - - - - -"),
        (S::Failed, "S S - - - - - - - - - - -"),
        (S::Canceled, "S S - - - - - - - - - - -"),
    ];
    let status_of = |symbol| match symbol {
        "P" => Some(S::Processing),
        "A" => Some(S::RequiresAction),
        "Z" => Some(S::Authorized),
        "S" => Some(S::Succeeded),
        "F" => Some(S::Failed),
        "C" => Some(S::Canceled),
        _ => None,
    };
    for (status, expected) in table {
        let current = manual(status);
        let expected: Vec<_> = expected.split(' ').map(status_of).collect();
        assert_eq!(expected.len(), every_settlement().len());
        for (settlement, want) in every_settlement().iter().zip(expected) {
            assert_eq!(
                transition(&current, settlement).status(),
                want,
                "{status:?} + {settlement:?}"
            );
        }
    }
}

#[test]
fn an_action_then_an_authorization_then_a_partial_capture() {
    // GIVEN a manual payment the PSP asks the customer to authenticate
    let p = manual(PaymentStatus::Processing);
    let p = p.after(
        &transition(
            &p,
            &Settlement::ActionRequired {
                provider_payment_id: "pi_1".into(),
                next_action: action(),
            },
        ),
        1,
    );
    assert_eq!(p.status, PaymentStatus::RequiresAction);
    assert_eq!(p.view().next_action.map(|a| a.expires_at), Some(3_600));
    // WHEN the PSP says it is processing after the customer acted, then (late) that it needs
    // the action again
    let acted = transition(
        &p,
        &Settlement::ActionCompleted {
            provider_payment_id: "pi_1".into(),
        },
    );
    let p = p.after(&acted, 2);
    assert!(p.progress.action_completed && p.view().action_completed);
    let late = Settlement::ActionRequired {
        provider_payment_id: "pi_1".into(),
        next_action: action(),
    };
    // THEN the flag holds and the late word moves nothing
    assert_eq!(transition(&p, &late), Transition::Unchanged);
    // WHEN it authorizes, THEN the view shows what may be captured and until when
    let p = p.after(
        &transition(
            &p,
            &Settlement::Authorized {
                provider_payment_id: "pi_1".into(),
                amount_capturable: 100,
                capture_before_ms: Some(7 * 86_400_000),
            },
        ),
        3,
    );
    let view = p.view();
    assert_eq!(
        (view.status, view.amount_capturable, view.capture_before),
        (PaymentStatus::Authorized, Some(100), Some(7 * 86_400))
    );
    assert_eq!(view.next_action, None);
    assert_eq!(p.amount_captured(), 0);
    // WHEN 60 of it is captured, THEN refunds are bounded by 60 and nothing is capturable
    let p = p.after(
        &transition(
            &p,
            &Settlement::Captured {
                provider_payment_id: "pi_1".into(),
                amount_captured: 60,
            },
        ),
        4,
    );
    assert_eq!(p.status, PaymentStatus::Succeeded);
    assert_eq!(p.amount_captured(), 60);
    let view = p.view();
    assert_eq!(
        (view.amount_captured, view.amount_capturable),
        (Some(60), None)
    );
}

#[test]
fn a_success_that_did_not_state_its_amount_is_filled_in_once_by_the_capture() {
    // GIVEN a manual payment a success without an amount reached first (a webhook)
    let p = manual(PaymentStatus::Authorized);
    let p = p.after(&transition(&p, &succeeded()), 1);
    // (unknown until stated: nothing refundable)
    assert_eq!(p.amount_captured(), 0);
    assert_eq!(p.view().amount_captured, None);
    // WHEN the capture's answer says 60, THEN 60 it is, once
    let captured = Settlement::Captured {
        provider_payment_id: "pi_1".into(),
        amount_captured: 60,
    };
    let p = p.after(&transition(&p, &captured), 2);
    assert_eq!(p.amount_captured(), 60);
    let again = Settlement::Captured {
        provider_payment_id: "pi_1".into(),
        amount_captured: 100,
    };
    assert_eq!(transition(&p, &again), Transition::Unchanged);
    // AND an automatic payment's success is the whole amount, whatever is said later
    let auto = payment(PaymentStatus::Succeeded, None);
    assert_eq!(transition(&auto, &captured), Transition::Unchanged);
    assert_eq!(auto.amount_captured(), 100);
}

#[test]
fn a_cancel_ends_an_open_or_authorized_payment_but_a_psp_success_beats_it() {
    // A processing attempt whose intent is canceled never ran (the fence's own cancel of the
    // intent it created): abandoned, as the lookup of that intent says.
    let processing = manual(PaymentStatus::Processing);
    let cancel = Settlement::Canceled {
        provider_payment_id: Some("pi_1".into()),
        reason: CancellationReason::Abandoned,
    };
    let abandoned = processing.after(&transition(&processing, &cancel), 1);
    assert_eq!(
        (abandoned.status, abandoned.failure.map(|f| f.kind)),
        (PaymentStatus::Failed, Some(FailureKind::Abandoned))
    );
    for status in [PaymentStatus::RequiresAction, PaymentStatus::Authorized] {
        let p = manual(status);
        let cancel = Settlement::Canceled {
            provider_payment_id: Some("pi_1".into()),
            reason: CancellationReason::Expired,
        };
        let p = p.after(&transition(&p, &cancel), 1);
        let view = p.view();
        assert_eq!(
            (view.status, view.cancellation_reason),
            (PaymentStatus::Canceled, Some(CancellationReason::Expired)),
            "{status:?}"
        );
        assert_eq!(p.amount_captured(), 0);
        let p = p.after(&transition(&p, &succeeded()), 2);
        assert_eq!(p.status, PaymentStatus::Succeeded, "{status:?}");
        assert_eq!(p.view().cancellation_reason, None);
    }
}

#[test]
fn authentication_failures_end_the_attempt_before_anything_is_authorized() {
    let failed = Settlement::AuthenticationFailed {
        provider_payment_id: Some("pi_1".into()),
    };
    let p = manual(PaymentStatus::RequiresAction);
    match transition(&p, &failed) {
        Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(f),
            progress,
            ..
        } => {
            assert_eq!(f.kind, FailureKind::AuthenticationFailed);
            assert_eq!(progress.next_action, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        transition(&manual(PaymentStatus::Authorized), &failed),
        Transition::Unchanged
    );
    // Proof that the PSP never ran the attempt cannot stand once it asked for an action.
    assert_eq!(
        transition(&p, &Settlement::Abandoned),
        Transition::Unchanged
    );
}

#[test]
fn authentication_required_for_a_payment_that_asked_for_it_is_a_failed_authentication() {
    let required = Settlement::AuthenticationRequired {
        provider_payment_id: Some("pi_1".into()),
    };
    let kind = |p: &Payment| match transition(p, &required) {
        Transition::Apply {
            status: PaymentStatus::Failed,
            failure: Some(f),
            ..
        } => f.kind,
        other => panic!("{other:?}"),
    };
    // Without a return URL the PSP could send the customer nowhere: the client must add one.
    let mut plain = payment(PaymentStatus::Processing, None);
    plain.return_url = None;
    assert_eq!(kind(&plain), FailureKind::AuthenticationRequired);
    // With one, 3-D Secure was asked for (2C2P answers `0004` for a failed challenge too),
    // whether the customer was already sent or the PSP refused before sending them.
    assert_eq!(
        kind(&manual(PaymentStatus::RequiresAction)),
        FailureKind::AuthenticationFailed
    );
    let mut asked = manual(PaymentStatus::Processing);
    asked.provider_payment_id = None;
    assert_eq!(kind(&asked), FailureKind::AuthenticationFailed);
}

#[test]
fn word_about_another_psp_payment_moves_none_of_the_new_states() {
    for status in PaymentStatus::ALL {
        let p = manual(status);
        for settlement in every_settlement() {
            let foreign = match settlement {
                Settlement::Succeeded { .. } => Settlement::Succeeded {
                    provider_payment_id: "pi_other".into(),
                },
                Settlement::Captured {
                    amount_captured, ..
                } => Settlement::Captured {
                    provider_payment_id: "pi_other".into(),
                    amount_captured,
                },
                Settlement::Authorized {
                    amount_capturable,
                    capture_before_ms,
                    ..
                } => Settlement::Authorized {
                    provider_payment_id: "pi_other".into(),
                    amount_capturable,
                    capture_before_ms,
                },
                Settlement::Canceled { reason, .. } => Settlement::Canceled {
                    provider_payment_id: Some("pi_other".into()),
                    reason,
                },
                _ => continue,
            };
            assert_eq!(
                transition(&p, &foreign),
                Transition::Unchanged,
                "{status:?} + {foreign:?}"
            );
        }
    }
}

#[test]
fn only_a_hold_keeps_the_order_and_a_held_order_is_left_by_its_own_success() {
    use PaymentStatus as S;
    assert_eq!(S::RequiresAction.order_effect(), OrderEffect::Hold);
    assert_eq!(S::Authorized.order_effect(), OrderEffect::Hold);
    assert_eq!(S::Canceled.order_effect(), OrderEffect::Release);
    for status in [S::Processing, S::RequiresAction, S::Authorized] {
        let p = manual(status);
        assert!(completion_leaves_order(&p, &transition(&p, &succeeded())));
        assert!(status.in_flight());
    }
    for status in [S::Succeeded, S::Failed, S::Canceled] {
        assert!(!status.in_flight());
    }
}

#[test]
fn only_a_payment_with_a_return_url_waits_for_the_customer() {
    // GIVEN a one-step payment (no return URL) the PSP says needs an action
    let p = payment(PaymentStatus::Processing, None);
    let asks = Settlement::ActionRequired {
        provider_payment_id: "pi_1".into(),
        next_action: action(),
    };
    // THEN it stays processing (nobody can act; the PSP fails or times it out)
    assert_eq!(transition(&p, &asks), Transition::Unchanged);
    // AND with a return URL it waits
    let with_url = Payment {
        return_url: Some("https://shop.example/r".into()),
        ..p
    };
    assert_eq!(
        transition(&with_url, &asks).status(),
        Some(PaymentStatus::RequiresAction)
    );
}

#[test]
fn an_authorization_learns_its_lapse_once_from_whichever_word_states_it() {
    // GIVEN an authorization a webhook reported without its lapse (an unexpanded charge)
    let p = manual(PaymentStatus::Authorized);
    assert_eq!(p.progress.capture_before_ms, None);
    let stated = Settlement::Authorized {
        provider_payment_id: "pi_1".into(),
        amount_capturable: 100,
        capture_before_ms: Some(7 * 86_400_000),
    };
    // WHEN the create's answer states it, THEN it is filled in, and only once
    let p = p.after(&transition(&p, &stated), 1);
    assert_eq!(p.progress.capture_before_ms, Some(7 * 86_400_000));
    let other = Settlement::Authorized {
        provider_payment_id: "pi_1".into(),
        amount_capturable: 100,
        capture_before_ms: Some(8 * 86_400_000),
    };
    assert_eq!(transition(&p, &other), Transition::Unchanged);
}

#[test]
fn an_authorization_of_a_payment_captured_at_once_only_fills_in_its_psp_id() {
    // GIVEN a processing payment captured at once, its PSP id not known yet
    let processing = payment(PaymentStatus::Processing, None);
    assert!(!processing.capture_is_manual());
    let authorized = Settlement::Authorized {
        provider_payment_id: "sq_1".into(),
        amount_capturable: processing.amount,
        capture_before_ms: Some(1),
    };
    // WHEN the PSP says it authorized it (Square approves before payonce completes)
    // THEN the payment stays processing, with the PSP id and nothing else filled in
    assert_eq!(
        transition(&processing, &authorized),
        Transition::Apply {
            status: PaymentStatus::Processing,
            failure: None,
            provider_payment_id: Some("sq_1".into()),
            progress: processing.progress.clone(),
        }
    );
    // AND once the id is stored, the same word moves nothing (so it is written once)
    let mut stored = processing.clone();
    stored.provider_payment_id = Some("sq_1".into());
    assert_eq!(transition(&stored, &authorized), Transition::Unchanged);
    // AND word of another PSP payment moves nothing either
    let other = Settlement::Authorized {
        provider_payment_id: "sq_2".into(),
        amount_capturable: processing.amount,
        capture_before_ms: None,
    };
    assert_eq!(transition(&stored, &other), Transition::Unchanged);
    // AND it never lowers or fills anything on any other status
    for status in [
        PaymentStatus::RequiresAction,
        PaymentStatus::Succeeded,
        PaymentStatus::Failed,
        PaymentStatus::Canceled,
    ] {
        let failure = (status == PaymentStatus::Failed).then_some(FailureKind::Declined);
        assert_eq!(
            transition(&payment(status, failure), &authorized),
            Transition::Unchanged,
            "{status:?}"
        );
    }
    // AND the completion's word then succeeds it
    let completed = Settlement::Captured {
        provider_payment_id: "sq_1".into(),
        amount_captured: stored.amount,
    };
    assert!(matches!(
        transition(&stored, &completed),
        Transition::Apply {
            status: PaymentStatus::Succeeded,
            ..
        }
    ));
    // BUT a manual payment is authorized by the same word
    let mut manual = processing.clone();
    manual.capture = CaptureMethod::Manual;
    assert!(matches!(
        transition(&manual, &authorized),
        Transition::Apply {
            status: PaymentStatus::Authorized,
            ..
        }
    ));
}

#[test]
fn a_refusal_naming_no_psp_payment_never_fails_one_whose_id_is_stored() {
    // GIVEN a processing payment whose PSP payment is known (stored before its completion)
    let mut held = payment(PaymentStatus::Processing, None);
    held.provider_payment_id = Some("sq_1".into());
    // WHEN a re-send is refused or declined without naming a PSP payment (its key forgotten)
    for word in [
        Settlement::Rejected,
        Settlement::Refused,
        Settlement::Declined {
            provider_payment_id: None,
            decline_code: "generic_decline".into(),
        },
        Settlement::AuthenticationRequired {
            provider_payment_id: None,
        },
        Settlement::AuthenticationFailed {
            provider_payment_id: None,
        },
    ] {
        // THEN the payment stays as it is: only word about its own PSP payment moves it
        assert_eq!(transition(&held, &word), Transition::Unchanged, "{word:?}");
    }
    // AND a decline naming it does move it, as without an id a refusal does
    assert!(matches!(
        transition(
            &held,
            &Settlement::Declined {
                provider_payment_id: Some("sq_1".into()),
                decline_code: "generic_decline".into()
            }
        ),
        Transition::Apply {
            status: PaymentStatus::Failed,
            ..
        }
    ));
    assert!(matches!(
        transition(
            &payment(PaymentStatus::Processing, None),
            &Settlement::Refused
        ),
        Transition::Apply {
            status: PaymentStatus::Failed,
            ..
        }
    ));
}

#[test]
fn an_undecided_payment_only_fills_in_its_psp_id() {
    let processing = payment(PaymentStatus::Processing, None);
    let pending = Settlement::Pending {
        provider_payment_id: "sq_1".into(),
    };
    assert_eq!(
        transition(&processing, &pending),
        Transition::Apply {
            status: PaymentStatus::Processing,
            failure: None,
            provider_payment_id: Some("sq_1".into()),
            progress: processing.progress.clone(),
        }
    );
    let mut stored = processing;
    stored.provider_payment_id = Some("sq_1".into());
    assert_eq!(transition(&stored, &pending), Transition::Unchanged);
}
