//! The command line: `--help` names every option and succeeds; a wrong flag is refused with
//! exit status 2, naming it, and the usage.

use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_payonce-sim"))
        .args(args)
        .output()
        .expect("run payonce-sim")
}

#[test]
fn help_names_every_option_and_a_wrong_flag_gets_the_usage() {
    for flag in ["--help", "-h"] {
        let help = sim(&[flag]);
        assert!(help.status.success(), "{help:?}");
        let text = String::from_utf8(help.stdout).unwrap();
        assert!(text.contains("Usage: payonce-sim [OPTIONS]"), "{text}");
        for option in [
            "--seeds",
            "--start",
            "--seed",
            "--trace",
            "--planted-holes",
            "--psp",
            "--clients",
            "--faults",
            "--overlap",
            "--mutation",
            "--expect-violation",
            "--keep-going",
            "--jobs",
        ] {
            assert!(text.contains(option), "{option} missing from:\n{text}");
        }
    }

    let wrong = sim(&["--seedz", "3"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(wrong.stdout.is_empty());
    let text = String::from_utf8(wrong.stderr).unwrap();
    assert!(
        text.contains("unexpected argument '--seedz'") && text.contains("Usage: payonce-sim"),
        "{text}"
    );

    let bogus = sim(&["--bogus"]);
    assert_eq!(bogus.status.code(), Some(2));
    let text = String::from_utf8(bogus.stderr).unwrap();
    assert!(text.contains("'--bogus'"), "{text}");

    let zero = sim(&["--seeds", "1", "--jobs", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    let text = String::from_utf8(zero.stderr).unwrap();
    assert!(text.contains("--jobs must be at least 1"), "{text}");
}
