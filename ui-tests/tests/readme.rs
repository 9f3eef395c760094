//! Every ```` ```rust ```` block of the README compiles, and runs to its end unless marked
//! `no_run`: the README is the first thing a user copies from, so it is tested as it is
//! written, not through a copy.
//!
//! A block with its own `fn main` is a whole program. Any other block is a fragment: it is
//! the body of a `#[runtime::main] async fn main(context: runtime::Context) -> Result<(),
//! Box<dyn std::error::Error>>` with both preludes in scope, so its `?`s work on runtime and
//! actors errors alike. What a fragment leans on from the blocks before it (an actor it
//! calls, a ref it uses) is written in an HTML comment right above the block, which GitHub
//! does not show:
//!
//! ```text
//! <!-- test: setup
//! #[actor]
//! struct Counter { total: u64 }
//! -->
//! ```
//!
//! The comment's first line may say `no_run` (the block is compiled but not run: it waits
//! for a signal or needs a NATS server) and `setup` (the lines up to `-->` go before the
//! fragment). Nothing else is accepted, so a typo in a marker fails this test.

use std::path::{Path, PathBuf};

/// One rust block of the README.
struct Block {
    /// Its first line's number in the README (1-based), to name it.
    line: usize,
    code: String,
    setup: String,
    run: bool,
}

/// The README's rust blocks, with the test comments above them. A fence that starts like a
/// rust block but is not exactly one (rustdoc's `rust,no_run`, an indented fence) fails: it
/// would be left untested.
fn blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if line.trim_start().starts_with("```rust") && line.trim_end() != "```rust" {
            panic!(
                "README line {}: {line:?} would not be tested; write ```rust at the line's \
                 start, with a marker above it (`<!-- test: no_run -->`) where needed",
                index + 1
            );
        }
        if line.trim_end() != "```rust" {
            index += 1;
            continue;
        }
        let start = index;
        let (setup, run) = marker(&lines[..start], start);
        index += 1;
        let mut code = String::new();
        while index < lines.len() && lines[index].trim_end() != "```" {
            code.push_str(lines[index]);
            code.push('\n');
            index += 1;
        }
        assert!(
            index < lines.len(),
            "README line {}: an unclosed block",
            start + 1
        );
        blocks.push(Block {
            line: start + 2,
            code,
            setup,
            run,
        });
        index += 1;
    }
    blocks
}

/// The `<!-- test: .. -->` comment ending on the line right above a block (before `start`):
/// its setup lines and whether the block runs. It may be one line (`<!-- test: no_run -->`)
/// or open a block of setup lines that a line `-->` closes.
fn marker(before: &[&str], start: usize) -> (String, bool) {
    let Some(last) = before.last() else {
        return (String::new(), true);
    };
    if !last.trim_end().ends_with("-->") {
        return (String::new(), true);
    }
    let open = before
        .iter()
        .rposition(|line| line.starts_with("<!-- test:"))
        .unwrap_or_else(|| {
            panic!("README line {start}: a comment above a block that is not a test marker")
        });
    let first = before[open]["<!-- test:".len()..].trim_end();
    let first = first.strip_suffix("-->").unwrap_or(first);
    let words: Vec<&str> = first.split_whitespace().collect();
    for word in &words {
        assert!(
            ["setup", "no_run"].contains(word),
            "README line {}: unknown test marker {word:?} (allowed: setup, no_run)",
            open + 1
        );
    }
    let setup = if words.contains(&"setup") && open + 1 < before.len() - 1 {
        before[open + 1..before.len() - 1].join("\n")
    } else {
        String::new()
    };
    (setup, !words.contains(&"no_run"))
}

/// Whether a block is a whole program: a `main` at the top level (not one in a comment or an
/// inner item).
fn is_program(code: &str) -> bool {
    code.lines()
        .any(|line| line.starts_with("fn main(") || line.starts_with("async fn main("))
}

/// The program a block becomes.
///
/// A `#[runtime::test]` in a whole program is compiled as a plain `async fn` (its attribute
/// line dropped): a binary leaves `#[test]` functions out unchecked, and the attribute itself
/// is the ui-tests' to check.
fn program(block: &Block) -> String {
    let header = "#![allow(unused, dead_code)]\n";
    if is_program(&block.code) {
        let code: String = block
            .code
            .lines()
            .filter(|line| !line.trim_start().starts_with("#[runtime::test"))
            .map(|line| format!("{line}\n"))
            .collect();
        return if block.run {
            format!("{header}{code}")
        } else {
            format!("{header}mod program {{\n{code}\n}}\n\nfn main() {{}}\n")
        };
    }
    let body = format!(
        "async fn body(context: runtime::Context) -> Result<(), Box<dyn std::error::Error>> {{\n\
         {}\n{}\nOk(())\n}}\n",
        block.setup, block.code
    );
    let main = if block.run {
        "#[runtime::main]\nasync fn main(context: runtime::Context) -> Result<(), Box<dyn std::error::Error>> {\n    body(context).await\n}\n"
    } else {
        "fn main() {}\n"
    };
    format!("{header}use actors::prelude::*;\nuse runtime::prelude::*;\n\n{body}\n{main}")
}

#[test]
fn every_readme_block_compiles_and_runs() {
    let readme = include_str!("../../README.md");
    let blocks = blocks(readme);
    assert!(
        blocks.len() >= 10,
        "the README's blocks were found: {}",
        blocks.len()
    );
    let markers = readme.matches("<!-- test:").count();
    let used = blocks
        .iter()
        .filter(|block| !block.run || !block.setup.is_empty())
        .count();
    assert_eq!(
        markers, used,
        "every test marker is right above its block and says something"
    );
    let directory = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme");
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    let cases = trybuild::TestCases::new();
    for block in &blocks {
        let path: PathBuf = directory.join(format!("readme_line_{}.rs", block.line));
        std::fs::write(&path, program(block)).unwrap();
        cases.pass(&path);
    }
}
