//! The documents say what the code has: the planted holes in docs/fault-model.md, and the PSPs the
//! README's sandbox line names.

use payonce::config::PspKind;
use payonce_sim::PLANTED_HOLES;

fn read(path: &str) -> String {
    let path = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_fault_model_lists_every_planted_hole_with_its_psp_and_no_other() {
    let doc = read("docs/fault-model.md");
    let section = doc
        .split("\n## Planted holes\n")
        .nth(1)
        .expect("a Planted holes section");
    let listed: Vec<(String, String)> = section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let psp = cells.get(2)?;
            (name != "--mutation").then(|| (name.to_owned(), (*psp).to_owned()))
        })
        .collect();
    let in_code: Vec<(String, String)> = PLANTED_HOLES
        .iter()
        .map(|(mutation, psp)| (mutation.name().to_owned(), psp.name().to_owned()))
        .collect();
    assert_eq!(listed, in_code);
}

#[test]
fn the_readme_names_every_psp_the_sandbox_speaks() {
    let flag = format!("--psp {}", PspKind::ALL.map(PspKind::name).join("|"));
    assert!(read("README.md").contains(&flag), "README lacks `{flag}`");
}
