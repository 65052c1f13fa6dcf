//! The command line: `--help` names every option, a wrong flag is refused with the usage.

use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_payonce-sim"))
        .args(args)
        .output()
        .expect("run payonce-sim")
}

#[test]
fn help_names_every_option_and_a_wrong_flag_gets_the_usage() {
    let help = sim(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    for option in [
        "--seeds",
        "--start",
        "--seed",
        "--trace",
        "--psp",
        "--clients",
        "--faults",
        "--mutation",
        "--expect-violation",
        "--keep-going",
    ] {
        assert!(text.contains(option), "{option} missing from:\n{text}");
    }

    let wrong = sim(&["--seedz", "3"]);
    assert_eq!(wrong.status.code(), Some(2));
    let text = String::from_utf8(wrong.stderr).unwrap();
    assert!(
        text.contains("unknown flag --seedz") && text.contains("usage:"),
        "{text}"
    );
}
