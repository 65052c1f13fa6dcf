//! Limits on payment attempts and declines, per user and per order (card testing): someone
//! trying stolen card numbers one after another makes many attempts and many declines, where a
//! shopper makes a few. A new attempt is admitted only while both of its counters — the user's
//! and the order's, in the current window — are under their limits; it is refused with 429
//! `too-many-attempts` and `Retry-After` (the end of the window) before anything is claimed or
//! sent to the PSP. A replay of a key is never limited: it makes no new attempt.
//!
//! Counters are named by their window ([`Counter`]); the store keeps them (in DynamoDB the
//! user's is an item of the idempotency table expiring by TTL, the order's two attributes of
//! the order's own item). An attempt is counted in the transaction that claims its key and
//! reserves its order ([`ChargeStore::begin_attempt`]): it counts exactly when it begins, so an
//! attempt counts once however many requests carry its key (a double click, a retry of a
//! request cut after its claim), and a request refused for any reason counts nothing. A
//! decline adds one more write per counter when the charge answers it
//! ([`ChargeStore::count_decline`]); a decline learnt later (webhook, reconcile) does not count.

use crate::config::{number, ConfigError, EnvError};
use crate::idempotency::StoreError;
use crate::ports::{AttemptCount, ChargeStore, Counter};
use std::time::Duration;

/// How many attempts, and how many declines among them, one counter admits per window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// New attempts (each one a PSP charge).
    pub attempts: u32,
    /// Declined attempts: once reached, no new attempt is admitted.
    pub declines: u32,
}

/// The limits of a deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptLimits {
    /// The counting window: counters start afresh at each multiple of it.
    pub window: Duration,
    /// Per user (the JWT `sub`), across orders.
    pub per_user: Limit,
    /// Per order, across keys and tabs.
    pub per_order: Limit,
}

impl Default for AttemptLimits {
    /// What a shop would set: in an hour a user may start 20 payments and be declined 10 times,
    /// an order 10 and 5. A shopper with a failing card tries a few cards; a card tester tries
    /// hundreds.
    fn default() -> Self {
        Self {
            window: Duration::from_secs(3600),
            per_user: Limit {
                attempts: 20,
                declines: 10,
            },
            per_order: Limit {
                attempts: 10,
                declines: 5,
            },
        }
    }
}

impl AttemptLimits {
    /// The defaults, each overridden by its variable: `LIMIT_WINDOW_SECONDS`,
    /// `LIMIT_USER_ATTEMPTS`, `LIMIT_USER_DECLINES`, `LIMIT_ORDER_ATTEMPTS`,
    /// `LIMIT_ORDER_DECLINES` (positive integers).
    pub fn from_env() -> Result<Self, ConfigError> {
        let d = Self::default();
        let positive = |name: &'static str, default: u32| -> Result<u32, ConfigError> {
            match number(name, default)? {
                0 => Err(ConfigError::Env(EnvError::Invalid {
                    name,
                    reason: "must be a positive integer".into(),
                })),
                n => Ok(n),
            }
        };
        let window_s = u32::try_from(d.window.as_secs()).unwrap_or(3600);
        Ok(Self {
            window: Duration::from_secs(u64::from(positive("LIMIT_WINDOW_SECONDS", window_s)?)),
            per_user: Limit {
                attempts: positive("LIMIT_USER_ATTEMPTS", d.per_user.attempts)?,
                declines: positive("LIMIT_USER_DECLINES", d.per_user.declines)?,
            },
            per_order: Limit {
                attempts: positive("LIMIT_ORDER_ATTEMPTS", d.per_order.attempts)?,
                declines: positive("LIMIT_ORDER_DECLINES", d.per_order.declines)?,
            },
        })
    }
}

/// Why a new attempt was refused: over a limit, nothing claimed or sent until its window ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Until the window ends.
    pub retry_after: Duration,
    /// `user` or `order`: whose limit.
    pub scope: &'static str,
}

/// Whose limit each counter of an attempt is, in the order they are counted.
const SCOPES: [&str; 2] = ["user", "order"];

/// Applies [`AttemptLimits`]: the counts a new attempt makes, and what a full one answers.
#[derive(Clone, Debug)]
pub struct AttemptLimiter {
    limits: AttemptLimits,
}

impl AttemptLimiter {
    /// Applies `limits`.
    pub fn new(limits: AttemptLimits) -> Self {
        Self { limits }
    }

    /// The limits applied.
    pub fn limits(&self) -> &AttemptLimits {
        &self.limits
    }

    /// The window `now_ms` falls in: its number, when it ends (epoch ms), and when its counters
    /// may be forgotten (a window later, epoch s).
    fn window(&self, now_ms: i64) -> (i64, i64, i64) {
        let width_ms = i64::try_from(self.limits.window.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let number = now_ms.div_euclid(width_ms);
        let ends_ms = (number + 1).saturating_mul(width_ms);
        (
            number,
            ends_ms,
            ends_ms.saturating_add(width_ms).div_euclid(1000),
        )
    }

    /// The two counters of an attempt by `user` on `order_id` in the window `number`, in the
    /// order of [`SCOPES`], with their limits.
    fn counters(&self, user: &str, order_id: &str, number: i64) -> [(Counter, Limit); 2] {
        [
            (
                Counter::User {
                    user: user.to_owned(),
                    window: number,
                },
                self.limits.per_user,
            ),
            (
                Counter::Order {
                    order_id: order_id.to_owned(),
                    window: number,
                },
                self.limits.per_order,
            ),
        ]
    }

    /// The counters a new attempt by `user` on `order_id` at `now_ms` counts against, in its
    /// claim ([`crate::ports::ChargeStore::begin_attempt`]): the user's, then the order's.
    pub fn counts(&self, user: &str, order_id: &str, now_ms: i64) -> Vec<AttemptCount> {
        let (number, _, expires_at_s) = self.window(now_ms);
        self.counters(user, order_id, number)
            .into_iter()
            .map(|(counter, limit)| AttemptCount {
                counter,
                max_attempts: limit.attempts,
                max_declines: limit.declines,
                expires_at_s,
            })
            .collect()
    }

    /// The refusal of an attempt whose claim found the counter at `index` of
    /// [`Self::counts`] full at `now_ms`.
    pub fn refusal(&self, index: usize, now_ms: i64) -> Refusal {
        let (_, ends_ms, _) = self.window(now_ms);
        let scope = SCOPES.get(index).copied().unwrap_or(SCOPES[0]);
        let retry_after =
            Duration::from_millis(u64::try_from(ends_ms - now_ms).unwrap_or(0).max(1000));
        tracing::warn!(
            scope,
            retry_after_s = retry_after.as_secs(),
            "payment attempt refused: over the attempt limit"
        );
        Refusal { retry_after, scope }
    }

    /// Counts a decline of an attempt by `user` on `order_id` in `store`.
    pub async fn record_decline<S: ChargeStore + ?Sized>(
        &self,
        store: &S,
        user: &str,
        order_id: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let (number, _, expires_at_s) = self.window(now_ms);
        for (counter, _) in self.counters(user, order_id, number) {
            store.count_decline(&counter, expires_at_s).await?;
        }
        Ok(())
    }
}
