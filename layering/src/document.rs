//! What an `ARCHITECTURE.md` says: its layer table and its list of known back-edges.

use std::collections::{BTreeMap, BTreeSet};

/// The layer table of an `ARCHITECTURE.md`: top module to layer number, and the listed
/// back-edges (`from -> to`, file-level module names).
pub(crate) fn architecture(text: &str) -> (BTreeMap<String, usize>, BTreeSet<(String, String)>) {
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
