//! The embedded side of captures and cancels, with the conditions of the DynamoDB adapter's
//! (`adapters/dynamodb/operations.rs`): the request's record among the idempotency records,
//! the operation claimed on its payment.

use super::payments::{leased_to, write_transition, MemoryPaymentStore};
use crate::domain::{Payment, PaymentOperation, Transition};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordState, StoreError,
};
use crate::ports::{
    BeginOperationOutcome, OperationRecordEnd, OperationStore, ResumeOutcome, SettleOutcome,
};
use async_trait::async_trait;

#[async_trait]
impl OperationStore for MemoryPaymentStore {
    fn operation_now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn load_for_operation(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        let now_ms = self.clock.now_ms();
        let tables = self.lock();
        let record = tables
            .records
            .get(record)
            .filter(|r| !r.is_expired_at(now_ms))
            .cloned();
        let payment = tables
            .payments
            .payments
            .get(payment_id)
            .map(|stored| stored.payment.clone());
        Ok((record, payment))
    }

    async fn begin_operation(
        &self,
        claim: &Claim,
        payment: &Payment,
        operation: &PaymentOperation,
    ) -> Result<BeginOperationOutcome, StoreError> {
        self.transaction("begin_operation")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        if let Some(existing) = tables.records.get(&claim.key) {
            if !existing.is_expired_at(now_ms) {
                return Ok(BeginOperationOutcome::KeyTaken(existing.clone()));
            }
        }
        let current = tables
            .payments
            .payments
            .get(&payment.payment_id)
            .map(|stored| stored.payment.clone());
        let as_read = current.as_ref().is_some_and(|now| {
            now.status == payment.status
                && now.operation.is_none()
                && now.operation_count == payment.operation_count
        });
        if !as_read {
            return Ok(BeginOperationOutcome::PaymentChanged(current.map(Box::new)));
        }
        tables
            .records
            .insert(claim.key.clone(), claim.record(now_ms));
        if let Some(stored) = tables.payments.payment_mut(&payment.payment_id) {
            stored.payment.operation = Some(operation.clone());
            stored.payment.operation_count = operation.seq;
        }
        Ok(BeginOperationOutcome::Begun)
    }

    async fn resume_operation(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<ResumeOutcome, StoreError> {
        self.transaction("resume_operation")?;
        let mut tables = self.lock();
        let current = tables.records.get(record);
        if !leased_to(current, seen) {
            return Ok(ResumeOutcome::KeyMoved(current.cloned()));
        }
        if let Some(current) = tables.records.get_mut(record) {
            current.state = RecordState::InProgress {
                lease: lease.clone(),
            };
        }
        Ok(ResumeOutcome::Resumed)
    }

    async fn finish_operation(
        &self,
        payment: &Payment,
        transition: &Transition,
        record: &RecordKey,
        lease: &LeaseToken,
        end: &OperationRecordEnd,
        release: bool,
    ) -> Result<SettleOutcome, StoreError> {
        self.transaction("finish_operation")?;
        let now_ms = self.clock.now_ms();
        let mut tables = self.lock();
        // Every condition first: the record still held under the lease, and (to release) the
        // payment as read with the operation still this record's.
        if !leased_to(tables.records.get(record), lease) {
            return Ok(SettleOutcome::Moved);
        }
        let settled = if release {
            debug_assert_eq!(transition, &Transition::Unchanged);
            let Some(stored) = tables
                .payments
                .payment_mut(&payment.payment_id)
                .filter(|stored| {
                    stored.payment.status == payment.status
                        && stored
                            .payment
                            .operation
                            .as_ref()
                            .is_some_and(|op| op.record == record.as_str())
                })
            else {
                return Ok(SettleOutcome::Moved);
            };
            stored.payment.operation = None;
            SettleOutcome::Settled(Box::new(stored.payment.clone()))
        } else {
            match write_transition(
                &mut tables,
                payment,
                transition,
                now_ms,
                None,
                None,
                self.late_duplicates,
            )?
            .settled()
            {
                SettleOutcome::Settled(after) => SettleOutcome::Settled(after),
                other => return Ok(other),
            }
        };
        match end {
            OperationRecordEnd::Complete {
                result,
                expires_at_s,
            } => {
                if let Some(current) = tables.records.get_mut(record) {
                    current.state = RecordState::Completed {
                        result: result.clone(),
                    };
                    current.expires_at_s = *expires_at_s;
                }
            }
            OperationRecordEnd::Delete => {
                tables.records.remove(record);
            }
        }
        Ok(settled)
    }
}
