//! The check behind every crate's `tests/layers.rs`: a crate's `ARCHITECTURE.md` holds a table
//! of layers and a list of known back-edges, and its source is checked against them:
//! - no module may reach a module of a higher layer than its own (the layers are read from the
//!   document, so the document and the check cannot drift),
//! - the modules form no import cycle, between files (a module and its own children are one
//!   module) or between the table's entries,
//! - and the document's "Known back-edges" list names the edges that still break those rules:
//!   a new one fails, and so does one that is listed but no longer breaks a rule (the list only
//!   shrinks).
//!
//! Every `crate::`, `super::` and child-relative path in the crate's `src` (tests and test-only
//! items left out) is resolved to the module it names. The resolution is textual, which is
//! enough for the house style: imports are `use` trees or paths written out in code, and
//! re-exports (`crate::Context`) are followed to the module that defines them. A method called
//! on a value of a type from above, without naming a path, is not an edge it sees.
//!
//! A module belongs to the longest entry of the table that is a prefix of its path:
//! `buffer/paged/writer` is in `buffer/paged` if that is listed, else in `buffer`.
//!
//! The document's format: a Markdown table whose rows start with the layer number and list the
//! layer's modules, comma-separated, in the second cell; and under a heading containing "Known
//! back-edges", one list item per edge written `` - `from -> to` `` (file-level module names,
//! `lib` for the crate root).

#![warn(missing_docs, missing_debug_implementations)]

mod document;
mod graph;
mod paths;
mod source;

use document::architecture;
use graph::{between_files, between_units, cycles, in_cycles, unit, upward};
use paths::{children, name, paths, reexports, resolve};
use source::{without_comments, without_test_code};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path below the crate root (`[]` is `lib.rs`).
pub(crate) type Module = Vec<String>;

/// A crate to check: its directory (which holds `src` and `ARCHITECTURE.md`) and the names of
/// the modules that exist only for tests.
#[derive(Debug, Clone)]
pub struct Crate {
    directory: PathBuf,
    test_only: Vec<String>,
}

impl Crate {
    /// The crate in `directory` (pass `env!("CARGO_MANIFEST_DIR")`). Modules named `tests`, at
    /// any depth, are test-only.
    pub fn new(directory: impl Into<PathBuf>) -> Self {
        Self {
            directory: directory.into(),
            test_only: vec!["tests".into()],
        }
    }

    /// Adds names of modules that exist only for tests (declared under a test cfg by their
    /// parent): a module of one of these names, at any depth, is left out of the graph.
    pub fn test_only(mut self, modules: &[&str]) -> Self {
        self.test_only
            .extend(modules.iter().map(|module| module.to_string()));
        self
    }

    /// Fails, naming them, on imports toward a higher layer that the document does not list.
    pub fn assert_imports_point_down(&self) {
        let graph = self.graph();
        let (layers, listed) = self.architecture();
        let new: Vec<_> = upward(&graph, &layers)
            .difference(&listed)
            .cloned()
            .collect();
        assert!(
            new.is_empty(),
            "imports against the layering of {} (move the item down, or pass what is needed \
             from above): {new:?}",
            self.document().display()
        );
    }

    /// Fails, naming them, on import cycles between files or between the table's entries that
    /// no listed back-edge explains.
    pub fn assert_no_cycle(&self) {
        let graph = self.graph();
        let (layers, listed) = self.architecture();
        let files: Vec<Vec<String>> = cycles(&between_files(&graph, &listed))
            .iter()
            .map(|cycle| cycle.iter().map(name).collect())
            .collect();
        assert!(
            files.is_empty(),
            "import cycles among the crate's files: {files:?}"
        );
        let units = cycles(&between_units(&graph, &layers, &listed));
        assert!(
            units.is_empty(),
            "import cycles among the modules of {}: {units:?}",
            self.document().display()
        );
    }

    /// Fails, naming them, on listed back-edges that no longer point up or close a cycle.
    pub fn assert_back_edges_still_break_a_rule(&self) {
        let graph = self.graph();
        let (layers, listed) = self.architecture();
        let nothing = BTreeSet::new();
        let mut debt = upward(&graph, &layers);
        debt.extend(
            in_cycles(&between_files(&graph, &nothing))
                .into_iter()
                .map(|(from, to)| (name(&from), name(&to))),
        );
        let unit_cycles = in_cycles(&between_units(&graph, &layers, &nothing));
        for (from, targets) in &graph {
            for to in targets {
                if unit_cycles.contains(&(unit(from, &layers), unit(to, &layers))) {
                    debt.insert((name(from), name(to)));
                }
            }
        }
        let gone: Vec<_> = listed.difference(&debt).collect();
        assert!(
            gone.is_empty(),
            "back-edges listed in {} that no longer point up or close a cycle: strike them \
             from the list: {gone:?}",
            self.document().display()
        );
    }

    fn document(&self) -> PathBuf {
        self.directory.join("ARCHITECTURE.md")
    }

    /// The import graph, file-level module to the modules it names (its own items left out).
    fn graph(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let modules = self.modules();
        let reexports = reexports(&modules);
        let mut graph = BTreeMap::new();
        for (module, text) in &modules {
            let children = children(module, &modules);
            let mut targets = BTreeSet::new();
            for path in paths(module, &children, text) {
                let target = resolve(&path, &modules, &reexports);
                if &target != module {
                    targets.insert(target);
                }
            }
            graph.insert(module.clone(), targets);
        }
        graph
    }

    /// The layer table: top module to layer number, and the listed back-edges.
    fn architecture(&self) -> (BTreeMap<String, usize>, BTreeSet<(String, String)>) {
        let text = std::fs::read_to_string(self.document())
            .unwrap_or_else(|error| panic!("read {}: {error}", self.document().display()));
        architecture(&text)
    }

    /// Every `.rs` file below `src` but the test-only modules, by module path, with comments,
    /// strings and test-only items blanked out.
    fn modules(&self) -> BTreeMap<Module, String> {
        let root = self.directory.join("src");
        let mut files = Vec::new();
        walk(&root, &mut files);
        let mut modules = BTreeMap::new();
        for file in files {
            let relative = file.strip_prefix(&root).expect("below the root");
            let mut module: Module = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            if module.iter().any(|part| self.test_only.contains(part)) {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("read a source file");
            modules.insert(module, without_test_code(&without_comments(&text)));
        }
        modules
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source directory") {
        let path = entry.expect("read a directory entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resolver_finds_grouped_relative_and_reexported_imports() {
        let module: Module = vec!["worker".into(), "turn".into()];
        let text = "use super::park::Spinner; use crate::{pool::{Pool, CAPACITY}, task::Polled}; \
                    fn f() { crate::time::now(); self::x(); }";
        let found: BTreeSet<String> = paths(&module, &BTreeSet::new(), text)
            .iter()
            .map(|path| path.join("::"))
            .collect();
        for expected in [
            "worker::park::Spinner",
            "pool::Pool",
            "pool::CAPACITY",
            "task::Polled",
            "time::now",
            "worker::turn::x",
        ] {
            assert!(found.contains(expected), "{expected} not in {found:?}");
        }
        let field = without_test_code(
            "struct S {\n    #[cfg(test)]\n    hook: Option<Map<u8, u8>>,\n    kept: u8,\n}\nimpl S { fn f() { crate::kept::x(); } }",
        );
        assert!(
            field.contains("kept: u8") && field.contains("crate::kept"),
            "{field}"
        );
        assert!(!field.contains("hook"), "{field}");
        let function = without_test_code(
            "#[cfg(test)]\nfn t(a: u8, b: u8) -> u8 { crate::t::x() }\nfn g() {}",
        );
        assert!(
            !function.contains("crate::t") && function.contains("fn g"),
            "{function}"
        );
        let stripped = without_test_code(&without_comments(
            "use a::b; // crate::hidden\n#[cfg(test)]\nmod tests { use crate::x; }\n#[cfg(test)]\nuse crate::y;\nfn g() {}",
        ));
        assert!(!stripped.contains("crate::"), "{stripped}");
        assert!(stripped.contains("fn g"));
    }

    #[test]
    fn test_only_attributes_with_more_conditions_are_recognized() {
        let stripped = without_test_code(
            "#[cfg(all(test, actors_loom))]\nmod models { use crate::modelled; }\n#[cfg(not(test))]\nuse crate::kept;\n#[cfg(feature = \"x\")]\nuse crate::also;",
        );
        assert!(!stripped.contains("crate::modelled"), "{stripped}");
        assert!(
            stripped.contains("crate::kept") && stripped.contains("crate::also"),
            "{stripped}"
        );
    }

    #[test]
    fn the_table_and_the_back_edges_are_read_from_the_document() {
        let (layers, edges) = architecture(
            "| layer | modules | owns |\n|---|---|---|\n| 0 | `sync`, `mailbox` | x |\n| 1 | `remote/node` | y |\n\n## Known back-edges\n\n- `mailbox -> remote/node`: why\n",
        );
        assert_eq!(layers["sync"], 0);
        assert_eq!(layers["remote/node"], 1);
        assert!(edges.contains(&("mailbox".to_string(), "remote/node".to_string())));
    }

    /// A test-only statement with a `<` that closes nothing does not swallow the code after
    /// it; block comments and raw strings hide what they hold.
    #[test]
    fn unbalanced_angles_comments_and_raw_strings_hide_no_code() {
        let stripped = without_test_code(&without_comments(
            "fn f() {\n    #[cfg(test)]\n    debug_assert!(a < b);\n    crate::high::call();\n}\nfn g() { crate::after::x(); }",
        ));
        assert!(stripped.contains("crate::high::call"), "{stripped}");
        assert!(stripped.contains("crate::after::x"), "{stripped}");
        let stripped = without_test_code(&without_comments(
            "/* a comment /* nested */ with #[cfg(test)] inside */ pub fn f() { crate::high::x() }\nconst S: &str = r#\"quote \" crate::hidden::y \"#; fn g() { crate::seen::z() }",
        ));
        assert!(stripped.contains("crate::high::x"), "{stripped}");
        assert!(!stripped.contains("crate::hidden"), "{stripped}");
        assert!(stripped.contains("crate::seen::z"), "{stripped}");
    }

    /// Paths written in code that start with a child module or a name a `use` brought in
    /// are edges too.
    #[test]
    fn child_and_imported_names_in_code_are_followed() {
        let module: Module = vec!["buffer".into()];
        let children: BTreeSet<String> = ["paged".to_string()].into();
        let text = "use crate::remote; use crate::tree::{self, Node}; use crate::storage::Blob as _; fn f() { paged::Writer::new(); remote::node::x(); tree::leaf::y(); Blob::open(); std::mem::drop(1); Self::g(); }";
        let found: BTreeSet<String> = paths(&module, &children, text)
            .iter()
            .map(|path| path.join("::"))
            .collect();
        for expected in [
            "buffer::paged::Writer::new",
            "remote::node::x",
            "remote",
            "tree::leaf::y",
        ] {
            assert!(found.contains(expected), "{expected} not in {found:?}");
        }
        assert!(!found.contains("storage::Blob::open"), "{found:?}");
        assert!(!found.iter().any(|path| path.contains("mem")), "{found:?}");
    }
}
