//! The paths a file names, each resolved to the module it reaches: `use` trees expanded,
//! `crate::`, `super::`, `self::` and child-relative paths made absolute, re-exports followed
//! to the module that defines the item.

use crate::Module;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a file's text names: each `use` tree expanded, and every path written in code
/// that starts with `crate::`, `super::` or `self::`, with one of the module's own children
/// (`paged::Writer::new()` in `buffer/mod.rs`), or with a name a `use` of this file brought in
/// (`use crate::remote; .. remote::node::x()`, read as `crate::remote::node::x`). Each path is
/// absolute (from the crate root). The names of a `use` that renames anything (`use a::b as
/// c`, `use a::B as _`) are not followed in code.
pub(crate) fn paths(module: &Module, children: &BTreeSet<String>, text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let tokens = tokenize(text);
    // First the `use` trees, which also give the names they bring in.
    let mut imported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut index = 0;
    while index < tokens.len() {
        if tokens[index] == "use" {
            let mut end = index + 1;
            while end < tokens.len() && tokens[end] != ";" {
                end += 1;
            }
            let first = found.len();
            let tree = &tokens[index + 1..end];
            expand(module, children, tree, &mut Vec::new(), &mut found);
            // A statement that renames (`as`) brings in names this reading does not follow.
            if !tree.iter().any(|token| token == "as") {
                for path in &found[first..] {
                    // `use a::{self, ..}` brings in `a`.
                    let path = match path.split_last() {
                        Some((last, rest)) if last == "self" => rest,
                        _ => &path[..],
                    };
                    if let Some(last) = path.last() {
                        imported.insert(last.clone(), path.to_vec());
                    }
                }
            }
            index = end;
        }
        index += 1;
    }
    // Then the paths written in code.
    let mut index = 0;
    while index < tokens.len() {
        if tokens[index] == "use" {
            while index < tokens.len() && tokens[index] != ";" {
                index += 1;
            }
            continue;
        }
        let token = tokens[index].as_str();
        let starts_a_path = tokens.get(index + 1).is_some_and(|next| next == "::")
            && (index == 0 || tokens[index - 1] != "::")
            && (matches!(token, "crate" | "super" | "self")
                || children.contains(token)
                || imported.contains_key(token));
        if !starts_a_path {
            index += 1;
            continue;
        }
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
        let absolute = match imported.get(token) {
            Some(base)
                if !children.contains(token) && !matches!(token, "crate" | "super" | "self") =>
            {
                let mut full = base.clone();
                full.extend(path[1..].iter().cloned());
                Some(full)
            }
            _ => absolute(module, &path, children),
        };
        if let Some(path) = absolute {
            found.push(path);
        }
        index = at + 1;
    }
    found
}

/// Identifiers, `::`, and single punctuation characters.
pub(crate) fn tokenize(text: &str) -> Vec<String> {
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
pub(crate) fn expand(
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
pub(crate) fn absolute(
    module: &Module,
    path: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
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
pub(crate) fn resolve(
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
pub(crate) fn reexports(
    modules: &BTreeMap<Module, String>,
) -> BTreeMap<(Module, String), Vec<String>> {
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
pub(crate) fn children(module: &Module, modules: &BTreeMap<Module, String>) -> BTreeSet<String> {
    modules
        .keys()
        .filter(|other| other.len() == module.len() + 1 && other.starts_with(module))
        .filter_map(|other| other.last().cloned())
        .collect()
}

pub(crate) fn name(module: &Module) -> String {
    if module.is_empty() {
        "lib".into()
    } else {
        module.join("/")
    }
}
