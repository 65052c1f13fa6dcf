//! The DynamoDB side of captures and cancels: the request's idempotency record (in the
//! idempotency table) and the operation claimed on its payment (`op_kind`, `op_amount`,
//! `op_record` on the payment item), claimed in one transaction and ended in another with the
//! payment's move.

use super::attributes::{n, s};
use super::codec::{operation_attributes, payment_from_item};
use super::expr::{build_error, names, put_item, update_item, values};
use super::idempotency::{item_from_record, record_from_item};
use super::payments::{complete_record, DynamoPaymentStore, Op, OrderWrite, TxFailure};
use super::schema::{
    payment_pk, EXPIRES_AT, LEASE_TOKEN, LEASE_UNTIL_MS, OP_AMOUNT, OP_COUNT, OP_FROM, OP_KIND,
    OP_RECORD, OP_SEQ, PK, STATUS,
};
use crate::domain::{Payment, PaymentOperation, Transition};
use crate::idempotency::{
    Claim, IdempotencyRecord, Lease, LeaseToken, RecordKey, RecordStatus, StoreError,
};
use crate::ports::{
    BeginOperationOutcome, OperationRecordEnd, OperationStore, ResumeOutcome, SettleOutcome,
};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem};

impl DynamoPaymentStore {
    /// How the record held under `lease` ends, as a transaction item (fenced on the lease).
    fn record_end(
        &self,
        record: &RecordKey,
        lease: &LeaseToken,
        end: &OperationRecordEnd,
    ) -> Result<TransactWriteItem, StoreError> {
        match end {
            OperationRecordEnd::Complete {
                result,
                expires_at_s,
            } => complete_record(
                &self.tables.idempotency,
                record.as_str(),
                lease,
                result,
                *expires_at_s,
            ),
            OperationRecordEnd::Delete => {
                let delete = Delete::builder()
                    .table_name(&self.tables.idempotency)
                    .key(PK, s(record.as_str()))
                    .condition_expression("#lease_token = :mine")
                    .set_expression_attribute_names(names(&[LEASE_TOKEN]))
                    .set_expression_attribute_values(values(vec![(":mine", s(lease.as_str()))]))
                    .build()
                    .map_err(build_error)?;
                Ok(TransactWriteItem::builder().delete(delete).build())
            }
        }
    }
}

#[async_trait]
impl OperationStore for DynamoPaymentStore {
    fn operation_now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn load_for_operation(
        &self,
        record: &RecordKey,
        payment_id: &str,
    ) -> Result<(Option<IdempotencyRecord>, Option<Payment>), StoreError> {
        let (record, item) = self.load_record_and(record, payment_pk(payment_id)).await?;
        Ok((record, item.as_ref().map(payment_from_item).transpose()?))
    }

    async fn begin_operation(
        &self,
        claim: &Claim,
        payment: &Payment,
        operation: &PaymentOperation,
    ) -> Result<BeginOperationOutcome, StoreError> {
        let now_ms = self.clock.now_ms();
        let record = claim.record(now_ms);
        let mut set = vec![format!("#{OP_COUNT} = :op_count")];
        let mut vals = vec![
            (":read_status", s(payment.status.as_str())),
            (":op_count", n(operation.seq)),
        ];
        let mut names = vec!["status", OP_COUNT];
        for (name, value) in operation_attributes(Some(operation)) {
            let placeholder = match name {
                OP_KIND => ":op_kind",
                OP_AMOUNT => ":op_amount",
                OP_SEQ => ":op_seq",
                OP_FROM => ":op_from",
                _ => ":op_record",
            };
            set.push(format!("#{name} = {placeholder}"));
            vals.push((placeholder, value));
            names.push(name);
        }
        // The count as read: a claim decided on a stale read would reuse a number, and with it
        // the PSP key of a claim released before it.
        let counted = if payment.operation_count == 0 {
            format!("attribute_not_exists(#{OP_COUNT})")
        } else {
            vals.push((":read_count", n(payment.operation_count)));
            format!("#{OP_COUNT} = :read_count")
        };
        let items = vec![
            put_item(
                &self.tables.idempotency,
                item_from_record(&record),
                "attribute_not_exists(#pk) OR #expires_at < :now_s",
                &[PK, EXPIRES_AT],
                vec![(":now_s", n(now_ms.div_euclid(1000)))],
            )?,
            update_item(
                &self.tables.payments,
                &payment_pk(&payment.payment_id),
                &format!("SET {}", set.join(", ")),
                &format!("#status = :read_status AND attribute_not_exists(#op_kind) AND {counted}"),
                &names,
                vals,
            )?,
        ];
        match self.transact("begin_operation", items).await {
            Ok(()) => Ok(BeginOperationOutcome::Begun),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) => {
                if let Some(r) = reasons.first().filter(|r| r.condition_failed()) {
                    return match &r.item {
                        Some(item) => Ok(BeginOperationOutcome::KeyTaken(record_from_item(item)?)),
                        None => Err(StoreError::Corrupt {
                            key: claim.key.to_string(),
                            reason: "claim refused without the existing record".into(),
                        }),
                    };
                }
                if let Some(r) = reasons.get(1).filter(|r| r.condition_failed()) {
                    return Ok(BeginOperationOutcome::PaymentChanged(
                        r.item
                            .as_ref()
                            .map(payment_from_item)
                            .transpose()?
                            .map(Box::new),
                    ));
                }
                Err(StoreError::Corrupt {
                    key: claim.key.to_string(),
                    reason: format!(
                        "begin_operation cancelled without a failed condition: {reasons:?}"
                    ),
                })
            }
        }
    }

    async fn resume_operation(
        &self,
        record: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
    ) -> Result<ResumeOutcome, StoreError> {
        let items = vec![update_item(
            &self.tables.idempotency,
            record.as_str(),
            "SET #lease_token = :new_token, #lease_until_ms = :until_ms",
            "#lease_token = :seen AND #status = :in_progress",
            &[LEASE_TOKEN, LEASE_UNTIL_MS, STATUS],
            vec![
                (":new_token", s(lease.token.as_str())),
                (":until_ms", n(lease.until_ms)),
                (":seen", s(seen.as_str())),
                (":in_progress", s(RecordStatus::InProgress.as_str())),
            ],
        )?];
        match self.transact("resume_operation", items).await {
            Ok(()) => Ok(ResumeOutcome::Resumed),
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) => {
                let now = reasons
                    .first()
                    .and_then(|r| r.item.as_ref())
                    .map(record_from_item)
                    .transpose()?;
                // This very takeover, sent again after its answer was lost, finds its own lease.
                if now
                    .as_ref()
                    .and_then(IdempotencyRecord::lease)
                    .is_some_and(|held| held.token == lease.token)
                {
                    return Ok(ResumeOutcome::Resumed);
                }
                Ok(ResumeOutcome::KeyMoved(now))
            }
        }
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
        let record_item = self.record_end(record, lease, end)?;
        if !release {
            return Ok(self
                .write_transition(
                    "finish_operation",
                    payment,
                    transition,
                    OrderWrite::Follow,
                    None,
                    |_| Ok(vec![(Op::Record, record_item.clone())]),
                )
                .await?
                .settled());
        }
        debug_assert_eq!(transition, &Transition::Unchanged);
        let items = vec![
            update_item(
                &self.tables.payments,
                &payment_pk(&payment.payment_id),
                "REMOVE #op_kind, #op_amount, #op_record, #op_seq, #op_from",
                "#status = :read_status AND #op_record = :record",
                &["status", OP_KIND, OP_AMOUNT, OP_RECORD, OP_SEQ, OP_FROM],
                vec![
                    (":read_status", s(payment.status.as_str())),
                    (":record", s(record.as_str())),
                ],
            )?,
            record_item,
        ];
        match self.transact("release_operation", items).await {
            Ok(()) => {
                let mut after = payment.clone();
                after.operation = None;
                Ok(SettleOutcome::Settled(Box::new(after)))
            }
            Err(TxFailure::Store(error)) => Err(error),
            Err(TxFailure::Cancelled(reasons)) if reasons.iter().any(|r| r.condition_failed()) => {
                Ok(SettleOutcome::Moved)
            }
            Err(TxFailure::Cancelled(reasons)) => Err(StoreError::Corrupt {
                key: payment.payment_id.clone(),
                reason: format!(
                    "release_operation cancelled without a failed condition: {reasons:?}"
                ),
            }),
        }
    }
}
