//! The documentation's configuration against the code: every TOML example in the README
//! and `docs/` parses, and the reference block in `docs/configuration.md` and the topic
//! config table hold exactly the built-in defaults, with no key left out.

use std::path::{Path, PathBuf};

use super::*;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every Markdown file users read: the README and `docs/`.
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![workspace().join("README.md")];
    let docs = std::fs::read_dir(workspace().join("docs")).expect("docs/ is readable");
    for entry in docs {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            paths.push(path);
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// The fenced blocks of one language in a Markdown text.
fn blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(lang)) if lang.trim() == language => current = Some(String::new()),
            (Some(block), Some(_)) => {
                found.push(std::mem::take(block));
                current = None;
            }
            (Some(block), None) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed ``` block");
    found
}

/// The field names of a flat struct, read off its `Debug` output.
fn field_names(debug: &str) -> Vec<String> {
    let mut names = Vec::new();
    let (mut depth, mut in_string, mut word) = (0, false, String::new());
    for c in debug.chars() {
        if in_string {
            in_string = c != '"';
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            ':' if depth == 1 && !word.is_empty() => names.push(std::mem::take(&mut word)),
            c if depth == 1 && (c.is_alphanumeric() || c == '_') => {
                word.push(c);
                continue;
            }
            _ => {}
        }
        word.clear();
    }
    names
}

#[test]
fn every_documented_toml_example_is_a_valid_config() {
    let mut checked = 0;
    for (path, text) in documents() {
        for block in blocks(&text, "toml") {
            if let Err(e) = toml::from_str::<FileConfig>(&block) {
                panic!(
                    "a TOML example in {} is not a valid config: {e}\n{block}",
                    path.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} TOML examples found");
}

const REFERENCE_MARK: &str = "# Every key and its default.";

#[test]
fn the_documented_defaults_are_the_built_in_ones_and_name_every_key() {
    let text = std::fs::read_to_string(workspace().join("docs/configuration.md")).unwrap();
    let reference: Vec<String> = blocks(&text, "toml")
        .into_iter()
        .filter(|b| b.starts_with(REFERENCE_MARK))
        .collect();
    assert_eq!(
        reference.len(),
        1,
        "docs/configuration.md needs one block starting with '{REFERENCE_MARK}'"
    );
    let block = &reference[0];
    let parsed: FileConfig = toml::from_str(block).unwrap();

    assert_eq!(parsed.log, LogSection::default(), "[log]");
    assert_eq!(parsed.cluster, ClusterSection::default(), "[cluster]");
    assert_eq!(parsed.groups, GroupsSection::default(), "[groups]");
    assert_eq!(
        parsed.transactions,
        TransactionsSection::default(),
        "[transactions]"
    );
    assert_eq!(parsed.tiering, TieringSection::default(), "[tiering]");
    assert_eq!(parsed.quotas, QuotasSection::default(), "[quotas]");
    assert_eq!(
        parsed.authorization,
        AuthorizationSection::default(),
        "[authorization]"
    );
    let store = shale_tiering::S3Options {
        request_timeout_ms: Some(shale_tiering::S3Options::DEFAULT_REQUEST_TIMEOUT_MS),
        max_retries: Some(shale_tiering::S3Options::DEFAULT_MAX_RETRIES),
        ..Default::default()
    };
    assert!(
        parsed.object_store == store,
        "[object_store]: {:?}",
        parsed.object_store
    );

    // Every key is named, set or in a comment (keys without a default are commented).
    let sections = [
        ("log", format!("{:?}", LogSection::default())),
        ("cluster", format!("{:?}", ClusterSection::default())),
        ("groups", format!("{:?}", GroupsSection::default())),
        (
            "transactions",
            format!("{:?}", TransactionsSection::default()),
        ),
        ("tiering", format!("{:?}", TieringSection::default())),
        ("quotas", format!("{:?}", QuotasSection::default())),
        (
            "authorization",
            format!("{:?}", AuthorizationSection::default()),
        ),
        (
            "object_store",
            format!("{:?}", shale_tiering::S3Options::default()),
        ),
    ];
    for (section, debug) in sections {
        let names = field_names(&debug);
        assert!(
            !names.is_empty(),
            "[{section}]: no fields read from {debug}"
        );
        let start = block
            .find(&format!("[{section}]"))
            .unwrap_or_else(|| panic!("[{section}] is not documented"));
        let end = block[start + 1..]
            .find("\n[")
            .map_or(block.len(), |i| start + 1 + i);
        let body = &block[start..end];
        for name in names {
            let named = body
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == name);
            assert!(
                named,
                "[{section}] {name} is not in docs/configuration.md's defaults"
            );
        }
    }
}

#[test]
fn the_topic_config_table_gives_every_key_its_built_in_default() {
    let text = std::fs::read_to_string(workspace().join("docs/configuration.md")).unwrap();
    let defaults = TopicConfig::default();
    let mut documented = Vec::new();
    let table = text
        .split("## Topic configs")
        .nth(1)
        .expect("docs/configuration.md has a 'Topic configs' section");
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let keys: Vec<&str> = cells[0]
            .trim_start_matches("| ")
            .split(", ")
            .map(|k| k.trim_matches('`'))
            .collect();
        let values: Vec<&str> = match keys.len() {
            1 => vec![cells[1]],
            _ => cells[1].split(", ").collect(),
        };
        assert_eq!(keys.len(), values.len(), "row: {row}");
        for (key, value) in keys.into_iter().zip(values) {
            let value = value.split([' ', ';']).next().unwrap().trim_matches('`');
            let built_in = defaults
                .get(key)
                .unwrap_or_else(|| panic!("'{key}' is documented but not a topic config"));
            assert_eq!(value, built_in, "the documented default of {key}");
            documented.push(key.to_string());
        }
    }
    for key in crate::topic::KEYS {
        assert!(
            documented.iter().any(|d| d == key),
            "topic config {key} is missing from docs/configuration.md"
        );
    }
}
