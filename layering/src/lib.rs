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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path below the crate root (`[]` is `lib.rs`).
type Module = Vec<String>;

/// A crate to check: its directory (which holds `src` and `ARCHITECTURE.md`) and the top-level
/// modules that exist only for tests.
#[derive(Debug, Clone)]
pub struct Crate {
    directory: PathBuf,
    test_only: Vec<String>,
}

impl Crate {
    /// The crate in `directory` (pass `env!("CARGO_MANIFEST_DIR")`). Modules named `tests` are
    /// test-only.
    pub fn new(directory: impl Into<PathBuf>) -> Self {
        Self {
            directory: directory.into(),
            test_only: vec!["tests".into()],
        }
    }

    /// Adds top-level modules that exist only for tests (compiled under `cfg(test)` by their
    /// parent), left out of the graph.
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

/// The text with `//` comments (doc comments included) and string literals blanked out.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal holding a quote would start a string above.
            '\'' if chars.peek() == Some(&'"') => {
                chars.next();
                out.push_str("' '");
            }
            _ => out.push(c),
        }
    }
    out
}

/// Where the next attribute that marks an item as test-only starts in `text`, and its length:
/// `#[cfg(test)]`, or `#[cfg(all(test, ..))]` with any other conditions.
fn next_test_only(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(found) = text[from..].find("#[cfg(") {
        let at = from + found;
        let mut depth = 0usize;
        let mut end = None;
        for (offset, byte) in text.as_bytes()[at + 1..].iter().enumerate() {
            match byte {
                b'[' | b'(' => depth += 1,
                b']' | b')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(at + 1 + offset + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end?;
        let condition: String = text[at + "#[cfg(".len()..end - 2]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if condition == "test" || condition.starts_with("all(test,") {
            return Some((at, end - at));
        }
        from = end;
    }
    None
}

/// The text without the items marked test-only (a `use`, or a `mod .. { .. }` block).
fn without_test_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, length)) = next_test_only(rest) {
        out.push_str(&rest[..at]);
        let item = &rest[at + length..];
        rest = &item[item_end(item)..];
    }
    out.push_str(rest);
    out
}

/// Where the item at the start of `text` ends: after its first `;` or `,` outside brackets
/// (a `use`, a field, a variant), or after the `}` that closes its first body, or before a
/// `}` that closes what encloses it.
fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'(' | b'[' => depth += 1,
            b'<' => depth += 1,
            // `->` and `=>` are arrows, not the end of generics.
            b'>' if at > 0 && matches!(bytes[at - 1], b'-' | b'=') => {}
            b')' | b']' | b'>' => depth = depth.saturating_sub(1),
            b';' | b',' if depth == 0 => return at + 1,
            b'{' if depth == 0 => {
                let mut braces = 0usize;
                for (offset, &byte) in bytes[at..].iter().enumerate() {
                    match byte {
                        b'{' => braces += 1,
                        b'}' => {
                            braces -= 1;
                            if braces == 0 {
                                return at + offset + 1;
                            }
                        }
                        _ => {}
                    }
                }
                return bytes.len();
            }
            b'}' if depth == 0 => return at,
            _ => {}
        }
        at += 1;
    }
    bytes.len()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a file's text names: each `use` tree expanded, and every other `crate::`,
/// `super::` or `self::` path written in code. Each path is absolute (from the crate root).
fn paths(module: &Module, children: &BTreeSet<String>, text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let tokens = tokenize(text);
    let mut index = 0;
    while index < tokens.len() {
        if tokens[index] == "use" {
            let mut end = index + 1;
            while end < tokens.len() && tokens[end] != ";" {
                end += 1;
            }
            expand(
                module,
                children,
                &tokens[index + 1..end],
                &mut Vec::new(),
                &mut found,
            );
            index = end;
            continue;
        }
        if matches!(tokens[index].as_str(), "crate" | "super" | "self")
            && tokens.get(index + 1).is_some_and(|token| token == "::")
            && (index == 0 || tokens[index - 1] != "::")
        {
            let mut path = Vec::new();
            let mut at = index;
            while at < tokens.len() && tokens[at].chars().all(is_ident) {
                path.push(tokens[at].clone());
                if tokens.get(at + 1).is_some_and(|token| token == "::") {
                    at += 2;
                } else {
                    break;
                }
            }
            if let Some(path) = absolute(module, &path, children) {
                found.push(path);
            }
            index = at + 1;
            continue;
        }
        index += 1;
    }
    found
}

/// Identifiers, `::`, and single punctuation characters.
fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if is_ident(c) {
            let mut ident = c.to_string();
            while let Some(&next) = chars.peek() {
                if !is_ident(next) {
                    break;
                }
                ident.push(next);
                chars.next();
            }
            tokens.push(ident);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            tokens.push("::".into());
        } else if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    tokens
}

/// Expands one `use` tree (`prefix` holds the segments above it).
fn expand(
    module: &Module,
    children: &BTreeSet<String>,
    tree: &[String],
    prefix: &mut Vec<String>,
    found: &mut Vec<Vec<String>>,
) {
    let mut index = 0;
    let depth = prefix.len();
    while index < tree.len() {
        let token = &tree[index];
        if token == "{" {
            // Split the group at its top-level commas.
            let mut level = 0;
            let mut start = index + 1;
            let mut at = index;
            while at < tree.len() {
                match tree[at].as_str() {
                    "{" => level += 1,
                    "}" => {
                        level -= 1;
                        if level == 0 {
                            expand(module, children, &tree[start..at], prefix, found);
                            break;
                        }
                    }
                    "," if level == 1 => {
                        expand(module, children, &tree[start..at], prefix, found);
                        start = at + 1;
                    }
                    _ => {}
                }
                at += 1;
            }
            prefix.truncate(depth);
            return;
        }
        if token == "as" || token == "*" || token == "," {
            break;
        }
        if token != "::" {
            prefix.push(token.clone());
        }
        index += 1;
    }
    if !prefix.is_empty()
        && let Some(path) = absolute(module, prefix, children)
    {
        found.push(path);
    }
    prefix.truncate(depth);
}

/// `path` from the crate root, or `None` for a path into another crate. A path that starts
/// with the name of one of `module`'s own submodules (`use cell::Task;` in `task/mod.rs`) is
/// relative to `module`.
fn absolute(module: &Module, path: &[String], children: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut base: Vec<String>;
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some(first) if children.contains(first) => {
            base = module.clone();
        }
        Some("crate") => {
            base = Vec::new();
            rest = &rest[1..];
        }
        Some("super") | Some("self") => {
            base = module.clone();
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module a path names: its longest prefix that is a module, unless what follows that
/// prefix is an item the module re-exports (`pub use`, `pub(crate) use`), which is followed
/// to the module that defines it.
fn resolve(
    path: &[String],
    modules: &BTreeMap<Module, String>,
    reexports: &BTreeMap<(Module, String), Vec<String>>,
) -> Module {
    let mut path = path.to_vec();
    // A bounded number of hops: re-exports of re-exports, never a loop.
    for _ in 0..8 {
        let length = (0..=path.len())
            .rev()
            .find(|length| modules.contains_key(&path[..*length]))
            .unwrap_or(0);
        let module = path[..length].to_vec();
        match path
            .get(length)
            .and_then(|item| reexports.get(&(module.clone(), item.clone())))
        {
            Some(target) if target != &path[..target.len().min(path.len())] => {
                path = target.clone();
            }
            _ => return module,
        }
    }
    panic!("re-exports of {} go round", path.join("::"))
}

/// Every module's re-exports (`pub use`, `pub(crate) use`, `pub(super) use`): the module and
/// the item's name to the path it re-exports.
fn reexports(modules: &BTreeMap<Module, String>) -> BTreeMap<(Module, String), Vec<String>> {
    let mut map = BTreeMap::new();
    for (module, text) in modules {
        let children = children(module, modules);
        let tokens = tokenize(text);
        for (index, token) in tokens.iter().enumerate() {
            let public = index > 0
                && (tokens[index - 1] == "pub"
                    || (tokens[index - 1] == ")"
                        && index >= 4
                        && tokens[index - 4] == "pub"
                        && tokens[index - 3] == "("));
            if token != "use" || !public {
                continue;
            }
            let mut end = index + 1;
            while end < tokens.len() && tokens[end] != ";" {
                end += 1;
            }
            let mut found = Vec::new();
            expand(
                module,
                &children,
                &tokens[index + 1..end],
                &mut Vec::new(),
                &mut found,
            );
            for path in found {
                // A path to the module's own item (`pub use crate::Blob as _` in the root's
                // inline prelude) re-exports nothing.
                if let Some(item) = path.last()
                    && path[..path.len() - 1] != module[..]
                {
                    map.insert((module.clone(), item.clone()), path.clone());
                }
            }
        }
    }
    map
}

/// The names of `module`'s own submodules.
fn children(module: &Module, modules: &BTreeMap<Module, String>) -> BTreeSet<String> {
    modules
        .keys()
        .filter(|other| other.len() == module.len() + 1 && other.starts_with(module))
        .filter_map(|other| other.last().cloned())
        .collect()
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "lib".into()
    } else {
        module.join("/")
    }
}

/// The layer table of an `ARCHITECTURE.md`: top module to layer number, and the listed
/// back-edges (`from -> to`, file-level module names).
fn architecture(text: &str) -> (BTreeMap<String, usize>, BTreeSet<(String, String)>) {
    let mut layers = BTreeMap::new();
    let mut back_edges = BTreeSet::new();
    let mut in_back_edges = false;
    for line in text.lines() {
        if line.starts_with('#') {
            in_back_edges = line.contains("Known back-edges");
        }
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !in_back_edges
            && line.starts_with('|')
            && cells.len() >= 3
            && let Ok(layer) = cells[0].parse::<usize>()
        {
            for module in cells[1].split(',') {
                let module = module.trim().trim_matches('`');
                assert!(
                    layers.insert(module.to_string(), layer).is_none(),
                    "{module} is in two layers of the table"
                );
            }
        }
        if in_back_edges && let Some(edge) = line.trim().strip_prefix("- `") {
            let edge = edge.split('`').next().unwrap_or_default();
            let (from, to) = edge
                .split_once(" -> ")
                .unwrap_or_else(|| panic!("a back-edge is written `from -> to`, not `{edge}`"));
            back_edges.insert((from.to_string(), to.to_string()));
        }
    }
    (layers, back_edges)
}

/// The entry of the layer table a module belongs to: the longest listed prefix of its path
/// (`buffer/paged/writer` is in `buffer/paged` if that is listed, else in `buffer`).
fn unit(module: &Module, layers: &BTreeMap<String, usize>) -> String {
    (0..=module.len())
        .rev()
        .map(|length| name(&module[..length].to_vec()))
        .find(|prefix| layers.contains_key(prefix))
        .unwrap_or_else(|| {
            panic!(
                "module {} has no layer in ARCHITECTURE.md's table",
                name(module)
            )
        })
}

/// The edges toward a higher layer.
fn upward(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    layers: &BTreeMap<String, usize>,
) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for (from, targets) in graph {
        let from_layer = layers[&unit(from, layers)];
        for to in targets {
            if layers[&unit(to, layers)] > from_layer {
                found.insert((name(from), name(to)));
            }
        }
    }
    found
}

/// The graph between files, without the edges between a module and its own ancestors or
/// descendants (a `mod.rs` declaring and re-exporting its children, children using their
/// parent's items: one module's inside) and without the `excluded` edges.
fn between_files(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    excluded: &BTreeSet<(String, String)>,
) -> BTreeMap<Module, BTreeSet<Module>> {
    graph
        .iter()
        .map(|(from, targets)| {
            let targets = targets
                .iter()
                .filter(|to| !to.starts_with(from) && !from.starts_with(to))
                .filter(|to| !excluded.contains(&(name(from), name(to))))
                .cloned()
                .collect();
            (from.clone(), targets)
        })
        .collect()
}

/// The graph between the layer table's entries, without the `excluded` edges.
fn between_units(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    layers: &BTreeMap<String, usize>,
    excluded: &BTreeSet<(String, String)>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut units: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, targets) in graph {
        let entry = units.entry(unit(from, layers)).or_default();
        for to in targets {
            if !excluded.contains(&(name(from), name(to))) && unit(to, layers) != unit(from, layers)
            {
                entry.insert(unit(to, layers));
            }
        }
    }
    units
}

/// The edges that close a cycle: both ends in one strongly connected component.
fn in_cycles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> BTreeSet<(N, N)> {
    let mut found = BTreeSet::new();
    for component in cycles(graph) {
        let members: BTreeSet<&N> = component.iter().collect();
        for from in &component {
            for to in graph.get(from).into_iter().flatten() {
                if members.contains(to) {
                    found.insert((from.clone(), to.clone()));
                }
            }
        }
    }
    found
}

/// The strongly connected components with more than one member.
fn cycles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Kosaraju: finish order on the graph, then components on the reverse graph.
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for node in graph.keys() {
        let mut stack = vec![(node.clone(), false)];
        while let Some((node, done)) = stack.pop() {
            if done {
                order.push(node);
                continue;
            }
            if !seen.insert(node.clone()) {
                continue;
            }
            stack.push((node.clone(), true));
            for next in graph.get(&node).into_iter().flatten() {
                if !seen.contains(next) {
                    stack.push((next.clone(), false));
                }
            }
        }
    }
    let mut reverse: BTreeMap<N, BTreeSet<N>> = BTreeMap::new();
    for (from, targets) in graph {
        for to in targets {
            reverse.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut components = Vec::new();
    for node in order.into_iter().rev() {
        if assigned.contains(&node) {
            continue;
        }
        let mut component = Vec::new();
        let mut stack = vec![node];
        while let Some(node) = stack.pop() {
            if !assigned.insert(node.clone()) {
                continue;
            }
            for next in reverse.get(&node).into_iter().flatten() {
                if !assigned.contains(next) {
                    stack.push(next.clone());
                }
            }
            component.push(node);
        }
        if component.len() > 1 {
            component.sort();
            components.push(component);
        }
    }
    components
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
}
