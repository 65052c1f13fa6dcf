//! The alarms the real services raise during a run, as an operator's metric filter would see them.
//!
//! payonce raises an alarm by logging an `error` event with an `alarm` field (the template turns
//! each name into a metric filter and an alarm). The simulation listens the same way: a tracing
//! subscriber, installed for the run's thread only, keeps every `error` event that names an
//! alarm, with the `payment_id` it names. The checker needs them to tell a payment that was
//! handed to an operator, as payonce promises, from one that is merely stuck.

use crate::world::SharedWorld;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The alarm reconcile raises for an attempt the PSP does not show and cannot prove unused.
pub const PAYMENT_UNPROVABLE: &str = "payment-unprovable";

/// An alarm raised: its name, and the payment id if the event named one.
type Raised = (String, Option<String>);

/// Every alarm raised so far. Clones share.
#[derive(Clone, Debug, Default)]
pub struct Alarms {
    raised: Arc<Mutex<BTreeSet<Raised>>>,
    /// Where each alarm is traced as it is raised, once the run's world exists.
    world: Arc<Mutex<Option<SharedWorld>>>,
}

impl Alarms {
    /// Traces every alarm raised from now on into `world`'s trace.
    pub fn trace_into(&self, world: &SharedWorld) {
        *self.world.lock().unwrap_or_else(PoisonError::into_inner) = Some(world.clone());
    }

    /// The payment ids `alarm` was raised for.
    pub fn payments(&self, alarm: &str) -> BTreeSet<String> {
        self.raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(name, _)| name == alarm)
            .filter_map(|(_, payment_id)| payment_id.clone())
            .collect()
    }

    /// The subscriber that records into these alarms; install it with
    /// `tracing::subscriber::set_default` for the run's thread.
    pub fn subscriber(&self) -> AlarmListener {
        AlarmListener {
            alarms: self.clone(),
        }
    }
}

/// A subscriber that sees only `error` events and keeps those naming an alarm. It records no
/// spans: every callsite but an `error` event's is disabled (its level hint is `ERROR`, so the
/// others cost a level comparison).
#[derive(Debug)]
pub struct AlarmListener {
    alarms: Alarms,
}

impl Subscriber for AlarmListener {
    /// `sometimes`: each run's listener is its thread's default, and seeds run on several
    /// threads at once. A `never` cached for the process by one thread's registration could
    /// hide an alarm from another's listener (see `payonce::logging`); each event asks
    /// [`Subscriber::enabled`] instead.
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && *metadata.level() == Level::ERROR
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::ERROR)
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        // Never called for a disabled span; an id is owed all the same.
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = AlarmFields::default();
        event.record(&mut fields);
        let Some(alarm) = fields.alarm else {
            return;
        };
        let world = self
            .alarms
            .world
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(world) = world {
            let subject = fields.payment_id.as_deref().or(fields.refund_id.as_deref());
            world.trace(format!("alarm {alarm} {}", subject.unwrap_or("-")));
        }
        self.alarms
            .raised
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((alarm, fields.payment_id));
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// The fields an alarm event is read for.
#[derive(Default)]
struct AlarmFields {
    alarm: Option<String>,
    payment_id: Option<String>,
    refund_id: Option<String>,
}

impl AlarmFields {
    fn keep(&mut self, field: &Field, value: String) {
        match field.name() {
            "alarm" => self.alarm = Some(value),
            "payment_id" => self.payment_id = Some(value),
            "refund_id" => self.refund_id = Some(value),
            _ => {}
        }
    }
}

impl Visit for AlarmFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` arrives here as Display wrapped in Debug; `?value` of a string is quoted.
        let text = format!("{value:?}");
        self.keep(field, text.trim_matches('"').to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_error_events_that_name_an_alarm_with_their_payment() {
        // GIVEN the listener installed on this thread
        let alarms = Alarms::default();
        let _guard = tracing::subscriber::set_default(alarms.subscriber());
        let payment_id = "pay_1";
        // WHEN payonce logs an alarm, an error without one, and a warning naming one
        tracing::error!(payment_id, alarm = PAYMENT_UNPROVABLE, "needs an operator");
        tracing::error!(payment_id = "pay_2", "no alarm here");
        tracing::warn!(
            payment_id = "pay_3",
            alarm = PAYMENT_UNPROVABLE,
            "not an error"
        );
        tracing::error!(payment_id = %"pay_4", alarm = "other-alarm", "another alarm");
        // THEN only the error events with an alarm are kept, each under its own name
        assert_eq!(
            alarms.payments(PAYMENT_UNPROVABLE),
            BTreeSet::from(["pay_1".to_owned()])
        );
        assert_eq!(
            alarms.payments("other-alarm"),
            BTreeSet::from(["pay_4".to_owned()])
        );
    }
}
