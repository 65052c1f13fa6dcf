//! The attempt-limit counters: both stores count an attempt in the transaction that claims it,
//! exactly when it begins; a full counter refuses the claim with nothing written; a claim
//! refused for any other reason counts nothing; declines close a counter; a user's counter is
//! swept once expired, an order's stays with the order (an edit of the order does not reset
//! it), and counting a decline never brings back an order that does not exist.

use super::*;
use payonce::domain::transition;
use payonce::ports::{AttemptCount, Counter, ExpiredSweep, ReviseOutcome, SettleOutcome};
use payonce::service::cleanup::{sweep, CleanupConfig};

store_suite!(
    an_attempt_counts_in_its_claim_and_a_full_counter_refuses_the_next,
    a_full_order_counter_refuses_the_orders_next_attempt_across_keys_and_edits,
    a_claim_refused_on_its_key_or_its_order_counts_nothing,
    declines_close_a_counter_and_an_expired_users_counter_is_swept,
    a_decline_on_an_order_that_does_not_exist_writes_nothing
);

/// The window the counts of these tests fall in.
const WINDOW: i64 = 1;

fn user(name: &str) -> Counter {
    Counter::User {
        user: name.to_owned(),
        window: WINDOW,
    }
}

fn on_order(order: &Order) -> Counter {
    Counter::Order {
        order_id: order.order_id.clone(),
        window: WINDOW,
    }
}

/// `counter` admitting `attempts` attempts and `declines` declines, kept an hour.
fn count<H: PaymentStoreHarness>(
    h: &H,
    counter: Counter,
    attempts: u32,
    declines: u32,
) -> AttemptCount {
    AttemptCount {
        counter,
        max_attempts: attempts,
        max_declines: declines,
        expires_at_s: h.clock().now_s() + 3600,
    }
}

/// Begins an attempt on `order` (as read) under `key`, counted against `counts` (the user's
/// counter, then the order's, as the service asks).
async fn begin_on<H: PaymentStoreHarness>(
    h: &H,
    order: Order,
    key: &str,
    counts: impl Fn(&Order) -> Vec<AttemptCount>,
) -> (BeginOutcome, Begun) {
    let (payment, claim) = new_attempt(h, &order, key);
    let outcome = h
        .payments()
        .begin_attempt(&claim, &order, &payment, &counts(&order))
        .await
        .expect("begin the attempt");
    (
        outcome,
        Begun {
            order,
            payment,
            claim,
        },
    )
}

/// Begins an attempt on a new order under `key`.
async fn begin_counted<H: PaymentStoreHarness>(
    h: &H,
    key: &str,
    counts: impl Fn(&Order) -> Vec<AttemptCount>,
) -> (BeginOutcome, Begun) {
    let order = stored_order(h, USER).await;
    begin_on(h, order, key, counts).await
}

/// Asserts that nothing of `attempt` was written: no record, the order as read, no payment.
async fn assert_nothing_written<H: PaymentStoreHarness>(h: &H, attempt: &Begun) {
    assert_eq!(
        persisted(h, attempt).await,
        Persisted {
            record: None,
            order: Some(attempt.order.clone()),
            payment: None,
        },
        "{}",
        H::NAME
    );
}

/// The PSP declined `attempt`: the payment fails and its order is unpaid again, as read now.
async fn declined_and_released<H: PaymentStoreHarness>(h: &H, attempt: &Begun) -> Order {
    let step = transition(&attempt.payment, &declined("pi_declined"));
    let outcome = h
        .payments()
        .finish_attempt(
            &attempt.payment,
            &step,
            &attempt.claim.lease_token,
            payonce::ports::FinishedBy::Charge,
        )
        .await
        .expect("finish the attempt");
    assert!(
        matches!(outcome, SettleOutcome::Settled(_)),
        "{}: {outcome:?}",
        H::NAME
    );
    let order = order_now(h, &attempt.order.order_id).await;
    assert_eq!(
        order.payment_state,
        OrderPaymentState::Unpaid,
        "{}",
        H::NAME
    );
    order
}

async fn an_attempt_counts_in_its_claim_and_a_full_counter_refuses_the_next<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    let counts = |name: &'static str, user_attempts: u32, order_attempts: u32| {
        let h = &h;
        move |order: &Order| {
            vec![
                count(h, user(name), user_attempts, 5),
                count(h, on_order(order), order_attempts, 5),
            ]
        }
    };
    // GIVEN two attempts begun, each counted against alice's counter of two
    for key in ["k1", "k2"] {
        let (outcome, _) = begin_counted(&h, key, counts("alice", 2, 10)).await;
        assert_eq!(outcome, BeginOutcome::Begun, "{}: {key}", H::NAME);
    }

    // WHEN a third begins
    let (outcome, third) = begin_counted(&h, "k3", counts("alice", 2, 10)).await;

    // THEN the user's counter (the first asked for) refuses it, and nothing is written
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
    assert_nothing_written(&h, &third).await;
    // AND the refused attempt counted nothing: bob's counter still admits one attempt only
    let (outcome, _) = begin_counted(&h, "k5", counts("bob", 1, 10)).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
    let (outcome, refused) = begin_counted(&h, "k6", counts("bob", 1, 10)).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
    assert_nothing_written(&h, &refused).await;
}

async fn a_full_order_counter_refuses_the_orders_next_attempt_across_keys_and_edits<
    H: PaymentStoreHarness,
>(
    h: H,
) {
    let counts = |order: &Order| {
        vec![
            count(&h, user("carol"), 100, 100),
            count(&h, on_order(order), 2, 100),
        ]
    };
    // GIVEN an order whose two attempts (two keys, a new tab each) were declined
    let mut order = stored_order(&h, USER).await;
    for key in ["tab-1", "tab-2"] {
        let (outcome, attempt) = begin_on(&h, order, key, counts).await;
        assert_eq!(outcome, BeginOutcome::Begun, "{}: {key}", H::NAME);
        order = declined_and_released(&h, &attempt).await;
    }
    // AND its cart edited since (a new version)
    let edited = Order {
        version: order.version + 1,
        amount: order.amount + 100,
        updated_at_ms: h.clock().now_ms(),
        ..order.clone()
    };
    assert_eq!(
        h.payments().revise_order(&order, &edited).await.unwrap(),
        ReviseOutcome::Revised,
        "{}",
        H::NAME
    );
    let edited = order_now(&h, &order.order_id).await;

    // WHEN a third key tries the order
    let (outcome, third) = begin_on(&h, edited.clone(), "tab-3", counts).await;

    // THEN the order's counter (the second asked for) refuses it, and nothing is written
    assert_eq!(outcome, BeginOutcome::OverLimit(1), "{}", H::NAME);
    assert_nothing_written(&h, &third).await;
    // AND with the user's counter full too, the user's (the first asked for) is the one reported
    let both_full = |order: &Order| {
        vec![
            count(&h, user("carol"), 2, 100),
            count(&h, on_order(order), 2, 100),
        ]
    };
    let (outcome, fourth) = begin_on(&h, edited.clone(), "tab-4", both_full).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
    assert_nothing_written(&h, &fourth).await;
    // AND in the next window the order admits attempts again
    let next_window = |order: &Order| {
        vec![count(
            &h,
            Counter::Order {
                order_id: order.order_id.clone(),
                window: WINDOW + 1,
            },
            2,
            100,
        )]
    };
    let (outcome, _) = begin_on(&h, edited, "tab-5", next_window).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
}

async fn a_claim_refused_on_its_key_or_its_order_counts_nothing<H: PaymentStoreHarness>(h: H) {
    let counts = |order: &Order| {
        vec![
            count(&h, user("dave"), 2, 5),
            count(&h, on_order(order), 1, 5),
        ]
    };
    // GIVEN one attempt begun and counted: one of dave's two, the order's only one
    let (outcome, first) = begin_counted(&h, "taken", counts).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);

    // WHEN the same key is claimed again (a double click), and another key claims the order
    // the first holds (a second tab)
    let (again, _) = begin_on(&h, first.order.clone(), "taken", counts).await;
    let (tab, _) = begin_on(&h, first.order.clone(), "second-tab", counts).await;

    // THEN both are refused on what they claim: the order's full counter is not what refuses
    // the tab, the order that moved is
    assert!(
        matches!(again, BeginOutcome::KeyTaken(_)),
        "{}: {again:?}",
        H::NAME
    );
    let BeginOutcome::OrderChanged(Some(moved)) = tab else {
        panic!("{}: expected OrderChanged, got {tab:?}", H::NAME)
    };
    assert_eq!(
        moved.payment_state,
        OrderPaymentState::Processing,
        "{}",
        H::NAME
    );
    // AND neither counted: dave's counter still admits its second attempt, and only that one
    let (outcome, _) = begin_counted(&h, "next", counts).await;
    assert_eq!(outcome, BeginOutcome::Begun, "{}", H::NAME);
    let (outcome, _) = begin_counted(&h, "over", counts).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}", H::NAME);
}

async fn declines_close_a_counter_and_an_expired_users_counter_is_swept<H: PaymentStoreHarness>(
    h: H,
) {
    let expires_at_s = h.clock().now_s() + 60;
    let erin = || AttemptCount {
        expires_at_s,
        ..count(&h, user("erin"), 10, 2)
    };
    let order = stored_order(&h, USER).await;
    let order_counts = |order: &Order| vec![count(&h, on_order(order), 10, 2)];
    // GIVEN counters a decline created (an attempt counted in the window before, declined in
    // this one): they hold no attempts, and still admit one
    for counter in [user("erin"), on_order(&order)] {
        h.payments()
            .count_decline(&counter, expires_at_s)
            .await
            .unwrap();
    }
    let (outcome, _) = begin_counted(&h, "b1", |_| vec![erin()]).await;
    assert_eq!(
        outcome,
        BeginOutcome::Begun,
        "{}: one decline of two",
        H::NAME
    );
    let (outcome, attempt) = begin_on(&h, order, "b2", order_counts).await;
    assert_eq!(
        outcome,
        BeginOutcome::Begun,
        "{}: one decline of two",
        H::NAME
    );
    let order = declined_and_released(&h, &attempt).await;

    // WHEN a second decline is counted on each
    for counter in [user("erin"), on_order(&order)] {
        h.payments()
            .count_decline(&counter, expires_at_s)
            .await
            .unwrap();
    }

    // THEN two declines close them
    let (outcome, refused) = begin_counted(&h, "b3", |_| vec![erin()]).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}: user", H::NAME);
    assert_nothing_written(&h, &refused).await;
    let order = order_now(&h, &order.order_id).await;
    let (outcome, refused) = begin_on(&h, order, "b4", order_counts).await;
    assert_eq!(outcome, BeginOutcome::OverLimit(0), "{}: order", H::NAME);
    assert_nothing_written(&h, &refused).await;
    // AND once expired, the sweep deletes the user's counter like any expired item (the
    // records of the attempts live on on their payments; the order's counter is the order's)
    h.clock().advance(Duration::from_secs(61));
    let report = sweep(h.records(), &CleanupConfig::default()).await.unwrap();
    assert_eq!(report.deleted_records, 1, "{}: {report:?}", H::NAME);
    let (left, _) = h.records().scan_expired(100, None).await.unwrap();
    assert!(left.is_empty(), "{}: {left:?}", H::NAME);
}

async fn a_decline_on_an_order_that_does_not_exist_writes_nothing<H: PaymentStoreHarness>(h: H) {
    // WHEN a decline is counted on the counter of an order that does not exist
    let counter = Counter::Order {
        order_id: "ord_gone".into(),
        window: WINDOW,
    };
    h.payments()
        .count_decline(&counter, h.clock().now_s() + 60)
        .await
        .unwrap();

    // THEN no order was made of it
    assert_eq!(
        h.payments().get_order("ord_gone").await.unwrap(),
        None,
        "{}",
        H::NAME
    );
}
