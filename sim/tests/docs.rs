//! The documents say what the code has: the planted holes in docs/fault-model.md (and how many
//! there are, wherever a document counts them), and the PSPs the README's sandbox line names.

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

#[test]
fn every_count_of_the_planted_holes_is_the_codes() {
    const WORDS: [&str; 21] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    let documents = [
        "README.md",
        "ARCHITECTURE.md",
        "docs/fault-model.md",
        "docs/testing.md",
        "docs/soak.md",
    ];
    let mut counts = 0;
    for path in documents {
        let text = read(path).replace('\n', " ");
        let words: Vec<&str> = text.split_whitespace().collect();
        for at in words.windows(3) {
            if at[1] != "planted" || !at[2].starts_with("hole") {
                continue;
            }
            let said = at[0]
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            let number = said
                .parse::<usize>()
                .ok()
                .or_else(|| WORDS.iter().position(|w| *w == said));
            if let Some(number) = number {
                counts += 1;
                assert_eq!(
                    number,
                    PLANTED_HOLES.len(),
                    "{path}: \"{} planted holes\"",
                    at[0]
                );
            }
        }
    }
    assert!(
        counts >= 2,
        "the documents count the planted holes in {counts} places"
    );
}
