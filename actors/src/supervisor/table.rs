//! What a supervisor shows of its children while it runs: OTP's `which_children` and
//! `count_children` on every supervisor ref, and the tree of a whole runtime's supervisors
//! ([`supervision_tree`]), which prints like `pstree`.
//!
//! Invariants:
//! - Every supervisor has one [`Node`], shared by its loop (which writes it) and its refs
//!   (which read it): its life (id and end), its label and shape, and a table of its
//!   children in start order: each one's id, label, kind, restart type, the node of a
//!   nested supervisor, and what its slot updates as it runs through an [`Observer`]
//!   (running, restarting or stopped, and its restarts so far). A slot keeps its own copy of
//!   the status and takes the table's lock only when it changes: a dynamic child's start
//!   allocates nothing for the table and locks it once.
//! - A static supervisor's table lists every child it was given, done for good or not (OTP
//!   lists those as `undefined`); a dynamic one's lists the children admitted and not yet
//!   done for good (and holds the admission bookkeeping: `start_child` checks its bound
//!   under the same lock).
//! - A reading takes one table's lock at a time, never a slot's and a table's together:
//!   what it returns is each child as it was at some instant during the call, not one
//!   instant for the whole tree.
//! - The runtime's roots are the top-level supervisors, held weakly: a supervisor leaves the
//!   tree when it ends, and its entry when its last ref and its loop are gone.

use super::{Restart, Strategy, SupervisorLife};
use crate::sync::Mutex;
use crate::{ActorId, ExitReason};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Weak};

/// What a supervisor's child is (OTP's child type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildKind {
    /// An actor.
    Worker,
    /// A supervisor, dynamic supervisor or pool nested under it.
    Supervisor,
}

/// Where a child is in its life, as its supervisor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildStatus {
    /// An incarnation runs (or is starting).
    Running,
    /// It ended and is to be started again (now, or after a backoff).
    Restarting,
    /// Not running, and not to be restarted by itself: it is done for good, or its
    /// supervisor is not running (a nested one being restarted).
    Stopped,
}

/// One child of a supervisor: an entry of [`SupervisorRef::which_children`]
/// (and of the dynamic supervisor's and pool's).
///
/// [`SupervisorRef::which_children`]: super::SupervisorRef::which_children
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildInfo {
    /// Its id (a nested supervisor's own).
    pub id: ActorId,
    /// Its label: the actor's, or the nested supervisor's.
    pub label: &'static str,
    /// An actor or a supervisor.
    pub kind: ChildKind,
    /// When it is restarted.
    pub restart: Restart,
    /// Running, restarting or stopped.
    pub status: ChildStatus,
    /// How many times it was restarted so far.
    pub restarts: u64,
}

/// How many children a supervisor has, by kind (OTP's `count_children`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildCounts {
    /// Every child it lists (see `which_children`).
    pub specs: usize,
    /// Those running now.
    pub active: usize,
    /// Those that are supervisors.
    pub supervisors: usize,
    /// Those that are actors.
    pub workers: usize,
}

/// What kind of supervisor a node of the tree is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A static [`Supervisor`](super::Supervisor) with its strategy.
    Static(Strategy),
    /// A [`DynamicSupervisor`](super::DynamicSupervisor).
    Dynamic,
    /// A [`Pool`](crate::Pool)'s supervisor.
    Pool,
}

/// A child in its supervisor's table.
pub(super) struct Entry {
    /// Its id, which also gives its label.
    pub(super) id: ActorId,
    pub(super) restart: Restart,
    pub(super) status: ChildStatus,
    pub(super) restarts: u64,
    /// A nested supervisor's own node.
    pub(super) nested: Option<Arc<Node>>,
}

/// A slot's hold on its entry: its supervisor's node and its key there.
pub(super) struct Observer {
    node: Arc<Node>,
    key: u64,
}

impl Observer {
    pub(super) fn new(node: &Arc<Node>, key: u64) -> Self {
        Observer {
            node: node.clone(),
            key,
        }
    }

    /// Changes the entry, if it is still in the table.
    pub(super) fn update(&self, change: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self.node.table.lock().children.get_mut(&self.key) {
            change(entry);
        }
    }
}

impl Entry {
    fn info(&self) -> ChildInfo {
        ChildInfo {
            id: self.id,
            label: self.id.label(),
            kind: if self.nested.is_some() {
                ChildKind::Supervisor
            } else {
                ChildKind::Worker
            },
            restart: self.restart,
            status: self.status,
            restarts: self.restarts,
        }
    }
}

/// A supervisor's children as its loop and its refs share them; a dynamic supervisor's
/// admission bookkeeping too.
#[derive(Default)]
pub(super) struct Table {
    /// In start order.
    pub(super) children: BTreeMap<u64, Entry>,
    /// A dynamic supervisor's children admitted by `start_child`, not yet in `children`.
    pub(super) admitting: usize,
    /// The next key: never reused.
    pub(super) next_key: u64,
    /// The supervisor ended for good: nothing is admitted any more.
    pub(super) closed: bool,
}

/// A supervisor as its refs and the tree see it.
pub(crate) struct Node {
    pub(super) life: Arc<SupervisorLife>,
    pub(super) label: &'static str,
    pub(super) shape: Shape,
    pub(super) table: Mutex<Table>,
}

impl Node {
    pub(super) fn new(label: &'static str, shape: Shape) -> Arc<Self> {
        Arc::new(Node {
            life: SupervisorLife::new(label),
            label,
            shape,
            table: Mutex::new(Table::default()),
        })
    }

    /// The children now, in start order.
    pub(super) fn which_children(&self) -> Vec<ChildInfo> {
        self.table
            .lock()
            .children
            .values()
            .map(Entry::info)
            .collect()
    }

    /// The children now, counted by kind.
    pub(super) fn count_children(&self) -> ChildCounts {
        let mut counts = ChildCounts::default();
        for child in self.which_children() {
            counts.specs += 1;
            counts.active += usize::from(child.status == ChildStatus::Running);
            match child.kind {
                ChildKind::Worker => counts.workers += 1,
                ChildKind::Supervisor => counts.supervisors += 1,
            }
        }
        counts
    }

    /// This supervisor and everything under it, as it is now; `child` is how its parent
    /// sees it.
    fn tree(&self, child: Option<ChildInfo>) -> TreeNode {
        let entries: Vec<(ChildInfo, Option<Arc<Node>>)> = {
            let table = self.table.lock();
            table
                .children
                .values()
                .map(|entry| (entry.info(), entry.nested.clone()))
                .collect()
        };
        let children = entries
            .into_iter()
            .map(|(info, nested)| match nested {
                Some(nested) => nested.tree(Some(info)),
                None => TreeNode {
                    id: info.id,
                    label: info.label,
                    shape: None,
                    child: Some(info),
                    ended: None,
                    children: Vec::new(),
                },
            })
            .collect();
        TreeNode {
            id: self.life.id(),
            label: self.label,
            shape: Some(self.shape),
            child,
            ended: self.life.ended(),
            children,
        }
    }
}

/// The supervision tree from a handler.
impl<A: crate::Actor> crate::Context<A> {
    /// The runtime's supervision tree now: see [`supervision_tree`](supervision_tree()).
    pub fn supervision_tree(&self) -> SupervisionTree {
        supervision_tree(self.runtime())
    }
}

/// The top-level supervisors of one runtime.
#[derive(Default)]
struct Roots(Mutex<Vec<Weak<Node>>>);

fn roots(context: &runtime::Context) -> Arc<Roots> {
    context.extension(|_| Roots::default())
}

/// Adds a top-level supervisor to its runtime's tree.
pub(super) fn add_root(context: &runtime::Context, node: &Arc<Node>) {
    let roots = roots(context);
    let mut roots = roots.0.lock();
    // Those that went leave here, so the list stays as long as the supervisors alive.
    roots.retain(|root| root.upgrade().is_some_and(|root| !root.life.has_ended()));
    roots.push(Arc::downgrade(node));
}

/// The runtime's supervision tree now: every top-level supervisor that has not ended, in the
/// order they were spawned, with everything under it (see [`SupervisionTree`]).
pub fn supervision_tree(context: &runtime::Context) -> SupervisionTree {
    let nodes: Vec<Arc<Node>> = roots(context)
        .0
        .lock()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|root| !root.life.has_ended())
        .collect();
    SupervisionTree {
        roots: nodes.iter().map(|node| node.tree(None)).collect(),
    }
}

/// The supervisors of a runtime and their children, from
/// [`supervision_tree`](supervision_tree()) (or `Context::supervision_tree` in a handler).
/// Displayed like `pstree`; the alternate form (`{:#}`) lists every child, the plain one at
/// most [`SupervisionTree::SHOWN`] per supervisor and a count of the rest. Actors spawned
/// on their own, outside any supervisor, are not in it: `actor_running` counts them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisionTree {
    /// The top-level supervisors, in the order they were spawned.
    pub roots: Vec<TreeNode>,
}

/// A supervisor or an actor in the [`SupervisionTree`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    /// Its id.
    pub id: ActorId,
    /// Its label.
    pub label: &'static str,
    /// What kind of supervisor it is; `None` for an actor.
    pub shape: Option<Shape>,
    /// How its parent sees it; `None` for a top-level supervisor.
    pub child: Option<ChildInfo>,
    /// A supervisor that ended for good, with its reason (a nested one its parent is done
    /// with, shown until its parent forgets it).
    pub ended: Option<ExitReason>,
    /// Its children, in start order.
    pub children: Vec<TreeNode>,
}

impl SupervisionTree {
    /// How many children of one supervisor the plain display lists before it counts the rest.
    pub const SHOWN: usize = 16;

    /// Every node, depth first, with its depth (0 for the top-level supervisors).
    pub fn walk(&self) -> Vec<(usize, &TreeNode)> {
        fn visit<'a>(node: &'a TreeNode, depth: usize, out: &mut Vec<(usize, &'a TreeNode)>) {
            out.push((depth, node));
            for child in &node.children {
                visit(child, depth + 1, out);
            }
        }
        let mut out = Vec::new();
        for root in &self.roots {
            visit(root, 0, &mut out);
        }
        out
    }

    /// The node with `id`, if it is in the tree.
    pub fn find(&self, id: ActorId) -> Option<&TreeNode> {
        self.walk()
            .into_iter()
            .map(|(_, node)| node)
            .find(|node| node.id == id)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Static(Strategy::OneForOne) => f.write_str("supervisor, one_for_one"),
            Shape::Static(Strategy::OneForAll) => f.write_str("supervisor, one_for_all"),
            Shape::Static(Strategy::RestForOne) => f.write_str("supervisor, rest_for_one"),
            Shape::Dynamic => f.write_str("dynamic supervisor"),
            Shape::Pool => f.write_str("pool"),
        }
    }
}

impl fmt::Display for TreeNode {
    /// One line: `id (kind, restart type, status, restarts)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.id)?;
        let mut parts: Vec<String> = Vec::new();
        if let Some(shape) = self.shape {
            parts.push(shape.to_string());
        }
        if let Some(child) = &self.child {
            parts.push(format!("{:?}", child.restart).to_lowercase());
            parts.push(format!("{:?}", child.status).to_lowercase());
            if child.restarts > 0 {
                let plural = if child.restarts == 1 { "" } else { "s" };
                parts.push(format!("{} restart{plural}", child.restarts));
            }
        }
        if let Some(reason) = &self.ended {
            parts.push(format!("ended: {reason}"));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Display for SupervisionTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all = f.alternate();
        writeln!(f, "runtime")?;
        print_children(f, &self.roots, "", all)
    }
}

/// Prints `children` under a node whose own line was prefixed so that theirs start with
/// `prefix`: `├─` for all but the last, `└─` for the last, and the rest counted past
/// [`SupervisionTree::SHOWN`] unless `all`.
fn print_children(
    f: &mut fmt::Formatter<'_>,
    children: &[TreeNode],
    prefix: &str,
    all: bool,
) -> fmt::Result {
    let shown = if all {
        children.len()
    } else {
        children.len().min(SupervisionTree::SHOWN)
    };
    let hidden = &children[shown..];
    for (index, child) in children[..shown].iter().enumerate() {
        let last = index + 1 == shown && hidden.is_empty();
        let (branch, under) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        writeln!(f, "{prefix}{branch}{child}")?;
        print_children(f, &child.children, &format!("{prefix}{under}"), all)?;
    }
    if !hidden.is_empty() {
        let mut labels: Vec<(&str, usize)> = Vec::new();
        for child in hidden {
            match labels.iter_mut().find(|(label, _)| *label == child.label) {
                Some((_, count)) => *count += 1,
                None => labels.push((child.label, 1)),
            }
        }
        let counted: Vec<String> = labels
            .iter()
            .map(|(label, count)| format!("{count} × {label}"))
            .collect();
        writeln!(
            f,
            "{prefix}└─ … {} more ({})",
            hidden.len(),
            counted.join(", ")
        )?;
    }
    Ok(())
}
