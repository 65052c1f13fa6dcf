//! Captures what the code under test logs (as JSON lines), for alarm assertions.
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
    /// Installs a JSON subscriber (every level) writing into the returned capture, as this
    /// thread's default until the guard is dropped.
    pub fn install() -> (Self, CaptureGuard) {
        let capture = Self::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(capture.clone())
            .finish();
        let guard = CaptureGuard {
            _default: tracing::subscriber::set_default(subscriber),
        };
        (capture, guard)
    }

    /// Every event logged so far, parsed.
    pub fn events(&self) -> Vec<Value> {
        let bytes = self.lines.lock().expect("log lock").clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The events carrying `alarm = <alarm>`.
    pub fn alarms(&self, alarm: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|event| event["fields"]["alarm"] == alarm)
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
