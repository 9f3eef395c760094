//! The supervision tree. Its nodes are of two kinds: scopes ([`ScopeNode`]: the runner's root and
//! every [`child`](crate::Spawner::child) context) and tasks (a [`TaskNode`], kept inside the
//! task cell as its owner, so a spawn allocates nothing for supervision). Both carry a
//! [`NodeCore`]: a closed flag and the links to their parent and children.
//!
//! The tree is generic over its label `S`, what every node carries for the layers above (for
//! the runtime, the context's label path): the tree only stores it and hands it out.
//!
//! Invariants:
//! - `closed` only goes from false to true, set under the links' lock. A node created or
//!   adopted under a closed parent starts closed, so a context retained by a finished task can
//!   never spawn again.
//! - [`NodeRef::abort`] closes the whole subtree and then aborts every task it closed, deepest
//!   first, so a task's descendants are closed before its own handle resolves.
//!   [`end`] does the same for a task that ended by itself, without aborting the task.
//! - No lock is held while a task is aborted: aborting wakes tasks and finishes metrics, which
//!   may run arbitrary code.
//! - Children hold their parent strongly and parents hold scopes weakly and tasks strongly; a
//!   task detaches from its parent when it ends ([`end`]) and a scope when it is dropped,
//!   so a long-lived parent keeps a list as long as its live children, and an abort from the
//!   root reaches every node still in use.

use crate::pool::Home;
use crate::slab::Slab;
use crate::sync::Mutex;
use crate::task::{Execution, TaskPtr, TaskRef};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// A child entry: scopes weakly (a dropped scope leaves), tasks by address. A task entry
/// holds no count: every adopted task leaves its parent (in [`end`]) before its cell can be
/// freed, and an entry is only turned into a counted reference under the parent's lock, which
/// that leaving needs too, so an entry never outlives its cell.
enum Child<S: 'static> {
    Scope(Weak<ScopeNode<S>>),
    Task(TaskPtr),
}

/// A reference to a node of either kind.
pub(crate) enum NodeRef<S: 'static> {
    Scope(Arc<ScopeNode<S>>),
    Task(TaskRef),
}

impl<S: 'static> Clone for NodeRef<S> {
    fn clone(&self) -> Self {
        match self {
            NodeRef::Scope(scope) => NodeRef::Scope(scope.clone()),
            NodeRef::Task(task) => NodeRef::Task(task.clone()),
        }
    }
}

struct Links<S: 'static> {
    /// Allocated with the first child or shared scope: most tasks never have one, and their
    /// cells stay small.
    family: Option<Box<Family<S>>>,
    /// The parent; dropped when the node ends.
    parent: Option<NodeRef<S>>,
}

impl<S: 'static> Default for Links<S> {
    fn default() -> Self {
        Self {
            family: None,
            parent: None,
        }
    }
}

/// A node's children, in one allocation with the scopes shared by label.
struct Family<S: 'static> {
    children: Slab<Child<S>>,
    /// The scope nodes `ScopeNode::shared_child` made here, by label, held weakly: alive while
    /// a context or task under them is.
    shared: Vec<(&'static str, Weak<ScopeNode<S>>)>,
}

impl<S: 'static> Default for Family<S> {
    fn default() -> Self {
        Self {
            children: Slab::default(),
            shared: Vec::new(),
        }
    }
}

/// What every node carries.
pub(crate) struct NodeCore<S: 'static> {
    /// Readable without the lock (spawn checks it every call); written under it.
    closed: AtomicBool,
    /// This node's slot among its parent's children: written by the thread that adopts the
    /// node before the node is shared, read when it leaves.
    slot: AtomicUsize,
    links: Mutex<Links<S>>,
    /// The label of contexts on this node; `None` only for the bare cells of unit tests.
    scope: Option<Arc<S>>,
}

impl<S: 'static> Default for NodeCore<S> {
    fn default() -> Self {
        Self {
            closed: AtomicBool::new(false),
            slot: AtomicUsize::new(0),
            links: Mutex::new(Links::default()),
            scope: None,
        }
    }
}

/// A task's node: what a task spawned through a context keeps in its cell as its owner (see
/// [`crate::task::Owner`], implemented where the pieces are tied together, in `context`): its
/// place in the tree, its home, and its placement (for its running metric).
pub(crate) struct TaskNode<S: 'static> {
    pub(crate) core: NodeCore<S>,
    pub(crate) home: Home,
    pub(crate) execution: Execution,
}

impl<S: 'static> TaskNode<S> {
    /// The node of a task spawned under `parent` with `execution`, delivered to `home` (not
    /// adopted yet).
    pub(crate) fn under(parent: &NodeRef<S>, home: Home, execution: Execution) -> Self {
        Self {
            core: NodeCore::under(parent.clone(), parent.scope().clone()),
            home,
            execution,
        }
    }

    /// The owner of a bare task of the unit tests: delivered to `home`, in no tree.
    #[cfg(test)]
    pub(crate) fn unsupervised(home: Home) -> Self {
        Self {
            core: NodeCore::default(),
            home,
            execution: Execution::default(),
        }
    }

    /// The node kept in `task`'s cell.
    fn of(task: &TaskRef) -> &NodeCore<S> {
        &task.owner::<TaskNode<S>>().core
    }
}

impl<S: 'static> NodeCore<S> {
    /// The label of this node (every node of a runner has one).
    pub(crate) fn scope(&self) -> &Arc<S> {
        self.scope
            .as_ref()
            .expect("every node of a runner has a scope")
    }

    /// A node for `scope` under `parent` (not adopted yet).
    pub(crate) fn under(parent: NodeRef<S>, scope: Arc<S>) -> Self {
        Self {
            closed: AtomicBool::new(false),
            slot: AtomicUsize::new(usize::MAX),
            links: Mutex::new(Links {
                parent: Some(parent),
                ..Links::default()
            }),
            scope: Some(scope),
        }
    }

    /// Whether the node is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Adds `child`; hands it back if this node is closed.
    fn adopt(&self, child: Child<S>) -> Result<usize, Child<S>> {
        let mut links = self.links.lock();
        if self.is_closed() {
            return Err(child);
        }
        Ok(links
            .family
            .get_or_insert_with(Box::default)
            .children
            .insert(child))
    }

    /// Removes the child at `slot` if it is still the node at `identity`.
    fn release(&self, slot: usize, identity: *const ()) {
        let mut links = self.links.lock();
        if let Some(family) = links.family.as_mut() {
            family
                .children
                .remove_if(slot, |child| child.identity() == identity);
        }
    }

    /// Closes this node; hands out its live children, or `None` if it already was closed.
    fn close(&self) -> Option<Vec<NodeRef<S>>> {
        let mut links = self.links.lock();
        if self.is_closed() {
            return None;
        }
        self.closed.store(true, Ordering::Release);
        Some(Self::take_children(&mut links))
    }

    /// Empties the child list into counted references; called with the lock held, which is
    /// what keeps task entries alive while they are counted (see [`Child`]).
    fn take_children(links: &mut Links<S>) -> Vec<NodeRef<S>> {
        let Some(family) = links.family.as_mut() else {
            return Vec::new();
        };
        family
            .children
            .drain()
            .filter_map(|child| match child {
                Child::Scope(scope) => scope.upgrade().map(NodeRef::Scope),
                // SAFETY: the entry is still in the list, so its task has not left, so its
                // cell is alive; we hold the lock the task needs to leave.
                Child::Task(task) => Some(NodeRef::Task(unsafe { task.counted() })),
            })
            .collect()
    }

    /// Leaves the parent: gives the slot back and drops the link.
    fn leave(&self, parent: Option<NodeRef<S>>, identity: *const ()) {
        if let Some(parent) = parent {
            parent
                .core()
                .release(self.slot.load(Ordering::Relaxed), identity);
        }
    }
}

impl<S: 'static> Child<S> {
    fn identity(&self) -> *const () {
        match self {
            Child::Scope(scope) => scope.as_ptr().cast(),
            Child::Task(task) => task.identity(),
        }
    }
}

impl<S: 'static> NodeRef<S> {
    fn core(&self) -> &NodeCore<S> {
        match self {
            NodeRef::Scope(scope) => &scope.core,
            NodeRef::Task(task) => TaskNode::<S>::of(task),
        }
    }

    /// The label of contexts on this node.
    pub(crate) fn scope(&self) -> &Arc<S> {
        self.core().scope()
    }

    /// Whether this node is closed: spawning through it is refused.
    pub(crate) fn is_aborted(&self) -> bool {
        self.core().is_closed()
    }

    /// Closes this node and its subtree, then aborts every task closed, deepest first.
    pub(crate) fn abort(&self) {
        close_subtree(self.clone(), true);
    }

    /// Makes `task` (created [`under`](NodeCore::under) this node) a child of this node. A
    /// closed parent refuses, and the task is closed and aborted instead (it never runs).
    pub(crate) fn adopt_task(&self, task: &TaskRef) {
        match self.core().adopt(Child::Task(task.ptr())) {
            Ok(slot) => TaskNode::<S>::of(task).slot.store(slot, Ordering::Relaxed),
            Err(_) => NodeRef::<S>::Task(task.clone()).abort(),
        }
    }
}

/// Closes `root`'s subtree and aborts every task it closed, deepest first.
fn close_subtree<S: 'static>(root: NodeRef<S>, abort_root: bool) {
    let Some(children) = root.core().close() else {
        return;
    };
    let mut aborted: Vec<TaskRef> = Vec::new();
    if abort_root && let NodeRef::Task(task) = &root {
        aborted.push(task.clone());
    }
    cascade(children, aborted);
}

/// Closes the subtrees of `children` and aborts the tasks closed, deepest first, after the
/// tasks already in `aborted` (which are their ancestors).
fn cascade<S: 'static>(children: Vec<NodeRef<S>>, mut aborted: Vec<TaskRef>) {
    let mut pending = children;
    while let Some(node) = pending.pop() {
        if let Some(children) = node.core().close() {
            if let NodeRef::Task(task) = &node {
                aborted.push(task.clone());
            }
            pending.extend(children);
        }
    }
    // Children were closed after their parents, so reversing aborts descendants first.
    for task in aborted.into_iter().rev() {
        task.cancel();
    }
}

/// A task ended (finished, panicked, aborted, or cleared: it will not be polled again): its
/// node closes, its descendants are closed and aborted (the task publishes its own result),
/// and it leaves its parent. One lock on the task's node for the common case. `core` is
/// `task`'s node, passed by its owner, which holds it.
pub(crate) fn end<S: 'static>(core: &NodeCore<S>, task: &TaskRef) {
    let (children, parent) = {
        let mut links = core.links.lock();
        let childless = links
            .family
            .as_ref()
            .is_none_or(|family| family.children.is_empty());
        let children = if core.is_closed() || childless {
            None
        } else {
            Some(NodeCore::take_children(&mut links))
        };
        core.closed.store(true, Ordering::Release);
        (children, links.parent.take())
    };
    if let Some(children) = children {
        cascade(children, Vec::new());
    }
    core.leave(parent, task.identity());
}

impl<S: 'static> ScopeNode<S> {
    /// A scope node for `label` under `parent`, shared by every call with that label while it
    /// lives (the first call makes it with `scope`), and whether it is closed: what every
    /// `child` context stands on, so that spawning many tasks under one label makes no node
    /// per task. A closed parent (whose cascade may not have reached its children yet) gets a
    /// node born closed instead of the shared one, so a context of a finished task never
    /// spawns again.
    pub(crate) fn shared_child(
        parent: &NodeRef<S>,
        label: &'static str,
        scope: impl FnOnce() -> Arc<S>,
    ) -> (NodeRef<S>, bool) {
        {
            let links = parent.core().links.lock();
            if !parent.core().is_closed()
                && let Some(node) = Self::find_shared(&links, label)
            {
                let closed = node.core.is_closed();
                return (NodeRef::Scope(node), closed);
            }
        }
        let (node, closed) = ScopeNode::child(parent, scope());
        let NodeRef::Scope(fresh) = &node else {
            unreachable!("ScopeNode::child makes scope nodes")
        };
        if closed {
            return (node, true);
        }
        // Another call may have made one meanwhile: the first stored is shared, and a node
        // made in vain is dropped once the lock is released (dropping it takes the lock).
        let first = {
            let mut links = parent.core().links.lock();
            let first = Self::find_shared(&links, label);
            if first.is_none() {
                let shared = &mut links.family.get_or_insert_with(Box::default).shared;
                shared.retain(|(_, node)| node.strong_count() > 0);
                shared.push((label, Arc::downgrade(fresh)));
            }
            first
        };
        match first {
            Some(first) => {
                let closed = first.core.is_closed();
                drop(node);
                (NodeRef::Scope(first), closed)
            }
            None => (node, false),
        }
    }

    /// The live shared node of `label` among `links`, if any.
    fn find_shared(links: &Links<S>, label: &'static str) -> Option<Arc<ScopeNode<S>>> {
        links
            .family
            .as_ref()?
            .shared
            .iter()
            .find(|(existing, _)| *existing == label)
            .and_then(|(_, node)| node.upgrade())
    }
}

/// A scope node: the runner's root or a `child` context.
pub struct ScopeNode<S: 'static> {
    core: NodeCore<S>,
}

impl<S: 'static> ScopeNode<S> {
    /// A new root node for `scope`.
    pub(crate) fn root(scope: Arc<S>) -> NodeRef<S> {
        NodeRef::Scope(Arc::new(ScopeNode {
            core: NodeCore {
                scope: Some(scope),
                ..NodeCore::default()
            },
        }))
    }

    /// A new node for `label_path` under `parent`, and whether `parent` was already closed (in
    /// which case the node is born closed).
    pub(crate) fn child(parent: &NodeRef<S>, label_path: Arc<S>) -> (NodeRef<S>, bool) {
        let scope = Arc::new(ScopeNode {
            core: NodeCore::under(parent.clone(), label_path),
        });
        match parent.core().adopt(Child::Scope(Arc::downgrade(&scope))) {
            Ok(slot) => {
                scope.core.slot.store(slot, Ordering::Relaxed);
                (NodeRef::Scope(scope), false)
            }
            Err(_) => {
                scope.core.close();
                (NodeRef::Scope(scope), true)
            }
        }
    }
}

impl<S: 'static> Drop for ScopeNode<S> {
    fn drop(&mut self) {
        // Give the slot back, so that a parent keeps a list as long as its live children.
        let parent = self.core.links.get_mut().parent.take();
        self.core
            .leave(parent, (self as *const ScopeNode<S>).cast());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;
    use crate::{Config, Runner, SpinnerConfig};

    fn config() -> Config {
        Config::new()
            .with_worker_threads(1)
            .with_idle_spinner(SpinnerConfig::disabled())
    }

    #[test]
    fn closing_a_scope_closes_its_descendants() {
        Runner::new(config()).start(|context| async move {
            let scope = context.child("scope");
            let child = scope.child("child");
            let grandchild = child.child("grandchild");
            scope.tree.abort();
            assert!(child.tree.is_aborted() && grandchild.tree.is_aborted());
            assert!(!context.tree.is_aborted(), "an abort does not climb");
            let late = child.child("late");
            assert!(
                late.tree.is_aborted(),
                "children of closed scopes are born closed"
            );
        });
    }

    /// Child contexts of one label under one parent are one node while anything under it
    /// lives (a spawn from `context.child(label)` in a loop allocates no node), and are closed
    /// with their parent like any child.
    #[test]
    fn children_of_one_label_share_a_node_while_it_lives() {
        Runner::new(config()).start(|context| async move {
            let node = |context: &crate::Context| match &context.tree {
                NodeRef::Scope(node) => Arc::as_ptr(node),
                NodeRef::Task(_) => unreachable!("child contexts stand on scope nodes"),
            };
            let parent = context.child("parent");
            let first = parent.child("actor");
            let second = parent.child("actor");
            assert_eq!(node(&first), node(&second));
            assert_ne!(node(&first), node(&parent.child("other")));
            assert_eq!(first.__label(), "parent_actor");
            let (gate, wait) = futures::channel::oneshot::channel::<()>();
            let task = second.spawn(move |_| async move {
                let _ = wait.await;
            });
            let before = node(&first);
            drop(first);
            // The task keeps the node alive: a third call finds it.
            assert_eq!(node(&parent.child("actor")), before);
            parent.tree.abort();
            assert!(matches!(task.await, Err(crate::Error::Closed)));
            drop(gate);
            assert!(parent.child("actor").tree.is_aborted());
        });
    }

    /// A child asked of a closed parent whose cascade has not reached its children yet is born
    /// closed: it is not the parent's live shared child of that label, which is still open.
    #[test]
    fn a_closed_parent_shares_no_child() {
        Runner::new(config()).start(|context| async move {
            let parent = context.child("parent");
            let kept = parent.child("shared");
            // Close the parent alone, as a cascade does before it reaches the children.
            let NodeRef::Scope(node) = &parent.tree else {
                unreachable!("child contexts stand on scope nodes")
            };
            let children = node.core.close().expect("the parent was open");
            assert!(
                !kept.tree.is_aborted(),
                "the cascade has not reached it yet"
            );
            let late = parent.child("shared");
            assert!(
                late.tree.is_aborted(),
                "a child of a closed parent is born closed"
            );
            assert!(matches!(
                late.spawn(|_| async {}).await,
                Err(crate::Error::Closed)
            ));
            cascade(children, Vec::new());
            assert!(kept.tree.is_aborted());
        });
    }

    #[test]
    fn dropped_scopes_and_ended_tasks_give_their_slot_back() {
        Runner::new(config()).start(|context| async move {
            let scope = context.child("scope");
            for _ in 0..1_000 {
                drop(scope.child("short"));
                scope.clone().spawn(|_| async {}).await.unwrap();
            }
            let NodeRef::Scope(node) = &scope.tree else {
                unreachable!("child contexts stand on scope nodes")
            };
            let links = node.core.links.lock();
            let children = &links
                .family
                .as_ref()
                .expect("children were adopted")
                .children;
            assert!(children.is_empty(), "nothing stays adopted");
            let slots = children.capacity();
            assert!(slots <= 2, "slots are reused: {slots}");
        });
    }
}
