//! The `payonce-fake-psp` binary: flags, the start-up line, and a working server behind it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::support::client;

/// Kills the child on drop so a failing assertion does not leave it running.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_prints_its_url_and_serves() {
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_payonce-fake-psp"))
            .args(["--addr", "127.0.0.1:0", "--api-key", "sk_test_from_flag"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("binary starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout piped");
    // Reading one line blocks; do it off the runtime's worker.
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader task")
    .expect("a start-up line");
    let base_url = line
        .trim_end()
        .strip_prefix("fake PSP listening on ")
        .expect("announces its URL")
        .to_owned();
    assert!(base_url.starts_with("http://127.0.0.1:"), "{base_url}");

    let response = client()
        .get(format!("{base_url}/v1/payment_intents/pi_missing"))
        .bearer_auth("sk_test_from_flag")
        .send()
        .await
        .expect("answered");
    assert_eq!(
        response.status().as_u16(),
        404,
        "the flag's API key is accepted"
    );
}

/// `--help` prints the usage on stdout and succeeds; an unknown flag is refused with exit
/// status 2, naming it on stderr.
#[test]
fn binary_answers_help_and_rejects_unknown_flags() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_payonce-fake-psp"))
            .args(args)
            .output()
            .expect("binary runs")
    };
    for flag in ["--help", "-h"] {
        let help = run(&[flag]);
        assert!(help.status.success(), "{help:?}");
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(
            text.contains("Usage: payonce-fake-psp [OPTIONS]")
                && text.contains("--provider <PROVIDER>")
                && text.contains("--webhook-secret"),
            "{text}"
        );
    }
    let bogus = run(&["--bogus", "x"]);
    assert_eq!(bogus.status.code(), Some(2), "{bogus:?}");
    let text = String::from_utf8_lossy(&bogus.stderr);
    assert!(text.contains("unexpected argument '--bogus'"), "{text}");
    let face = run(&["--provider", "visa"]);
    assert_eq!(face.status.code(), Some(2), "{face:?}");
    assert!(
        String::from_utf8_lossy(&face.stderr).contains("invalid value 'visa' for '--provider"),
        "{face:?}"
    );
}
