//! The import graph judged against the layers: edges toward a higher layer, the graphs
//! between files and between the table's entries, and their cycles.

use crate::Module;
use crate::paths::name;
use std::collections::{BTreeMap, BTreeSet};

/// The entry of the layer table a module belongs to: the longest listed prefix of its path
/// (`buffer/paged/writer` is in `buffer/paged` if that is listed, else in `buffer`).
pub(crate) fn unit(module: &Module, layers: &BTreeMap<String, usize>) -> String {
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
pub(crate) fn upward(
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
pub(crate) fn between_files(
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
pub(crate) fn between_units(
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
pub(crate) fn in_cycles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> BTreeSet<(N, N)> {
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
pub(crate) fn cycles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
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
