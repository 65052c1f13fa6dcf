//! The layers, checked from the source: which modules `domain` and `idempotency` may name.
//! (That the generic layer builds without the payment features is checked by
//! `scripts/check-features`; this catches a path to a module that happens to be compiled.)

use std::path::{Path, PathBuf};

/// Every `crate::<module>` the Rust file `path`, or any file under the folder `path`, names,
/// with the file it is in. Grouped imports (`use crate::{a, b::c}`) count each of their first
/// segments.
fn crate_paths(path: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut files: Vec<PathBuf> = if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .collect()
    } else {
        vec![path.to_owned()]
    };
    files.sort();
    for file in files {
        if file.is_dir() {
            found.extend(crate_paths(&file));
            continue;
        }
        if file.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        // Comments may link anywhere (`[`crate::config`]`): only code counts.
        let text: String = std::fs::read_to_string(&file)
            .expect("a source file")
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for (at, _) in text.match_indices("crate::") {
            // `$crate::` in a macro names the crate the macro is used in, not a module.
            if text[..at].ends_with('$') {
                continue;
            }
            let rest = &text[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .map(|part| part.trim().split("::").next().unwrap_or_default())
                    .collect(),
                None => vec![rest
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or_default()],
            };
            for name in names.into_iter().filter(|n| !n.is_empty()) {
                found.push((file.clone(), name.to_owned()));
            }
        }
    }
    found
}

fn source(module: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(module)
}

fn outside(module: &str, allowed: &[&str]) -> Vec<String> {
    crate_paths(&source(module))
        .into_iter()
        .filter(|(_, name)| !allowed.contains(&name.as_str()))
        .map(|(file, name)| format!("{}: crate::{name}", file.display()))
        .collect()
}

#[test]
fn the_domain_depends_on_nothing_but_itself() {
    assert_eq!(outside("domain", &["domain"]), Vec::<String>::new());
}

#[test]
fn idempotency_depends_on_nothing_payment_specific() {
    // The leaf modules it may use know no payment: ids, the clock, reading variables, the
    // planted-hole switches, problem+json and the request helpers of `http`, the error chain.
    let leaves = [
        "idempotency",
        "ids",
        "clock",
        "env",
        "mutations",
        "http",
        "error_chain",
    ];
    assert_eq!(outside("idempotency", &leaves), Vec::<String>::new());
    for leaf in ["ids.rs", "clock.rs", "env.rs", "mutations.rs"] {
        let named = outside(leaf, &[]);
        assert!(
            named.iter().all(|n| !n.contains("crate::domain")
                && !n.contains("crate::config")
                && !n.contains("crate::service")),
            "{leaf} names {named:?}"
        );
    }
}

#[test]
fn the_secrets_adapter_knows_no_secret_shape() {
    let named = outside("adapters/secrets.rs", &["adapters", "clock"]);
    assert!(
        named.iter().all(|n| !n.contains("crate::config")),
        "{named:?}"
    );
}

#[test]
fn the_scanner_sees_grouped_and_plain_paths() {
    let dir = std::env::temp_dir().join(format!("payonce-layering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.rs"),
        "//! [`crate::service`]\nuse crate::{domain::Payment, ids};\nfn f() { crate::config::x(); $crate::mac!(); }\n",
    )
    .unwrap();
    let names: Vec<String> = crate_paths(&dir).into_iter().map(|(_, n)| n).collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(names, ["domain", "ids", "config"]);
}
