//! Captures what the code under test logs, through the functions' own subscriber
//! (`payonce::logging::subscriber`) at TRACE: the lines a Lambda would write, flat JSON with the
//! event's fields at the top level, for alarm and redaction assertions.
//!
//! The capture is the thread's default subscriber while its guard lives: use it in a
//! current-thread test (`#[tokio::test]`), where every task of the test runs on that thread.

use serde_json::Value;
use std::io::Write;
use std::sync::{Arc, Mutex};
use tracing_subscriber::fmt::MakeWriter;

/// The captured log lines.
#[derive(Clone, Default)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<u8>>>,
}

/// Keeps the capture installed on this thread until dropped.
pub struct CaptureGuard {
    _default: tracing::subscriber::DefaultGuard,
}

impl LogCapture {
    /// Installs the functions' subscriber at TRACE (third-party crates capped as in Lambda)
    /// writing into the returned capture, as this thread's default until the guard is dropped.
    pub fn install() -> (Self, CaptureGuard) {
        let capture = Self::default();
        let subscriber = payonce::logging::subscriber(
            tracing_subscriber::filter::LevelFilter::TRACE,
            capture.clone(),
        );
        let guard = CaptureGuard {
            _default: tracing::subscriber::set_default(subscriber),
        };
        (capture, guard)
    }

    /// Every line written so far, as written.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.lines.lock().expect("log lock").clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Every event logged so far, parsed (a line that is not JSON is skipped: see
    /// [`LogCapture::lines`]).
    pub fn events(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The events carrying `alarm = <alarm>` (the field a metric filter reads as `$.alarm`).
    pub fn alarms(&self, alarm: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|event| event[payonce::logging::ALARM_FIELD] == alarm)
            .collect()
    }
}

/// One write target per event.
pub struct CaptureWriter {
    lines: Arc<Mutex<Vec<u8>>>,
}

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lines.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = CaptureWriter;
    fn make_writer(&'a self) -> Self::Writer {
        CaptureWriter {
            lines: self.lines.clone(),
        }
    }
}
