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
//!   task detaches from its parent when it ends ([`end`], or with its worker's batch, below)
//!   and a scope when it is dropped,
//!   so a long-lived parent keeps a list as long as its live children, and an abort from the
//!   root reaches every node still in use.
//! - On a pool worker polling a batch of tasks ([`LeaveBatch`]), a task that ends leaves its
//!   parent's list when the batch ends, not at once: the batch holds a counted reference to the
//!   task (so the parent's entry never names a freed cell) and the parent, and applies the
//!   leaves under one lock per parent. A spawner on one core and tasks ending on another then
//!   pass the parent's lock and list between the cores once a batch instead of once a task.
//!   An entry still listed for an ended task is harmless: a cascade finds its node closed.

use crate::pool::Home;
use crate::sharded::thread_number;
use crate::slab::Slab;
use crate::sync::Mutex;
use crate::task::{Execution, TaskPtr, TaskRef};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A child entry: scopes weakly (a dropped scope leaves), tasks by address. A task entry
/// holds no count: every adopted task leaves its parent (in [`end`], or when the batch that
/// held its leave applies it, that leave holding a count until then) before its cell can be
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

/// The scope nodes made under one node by label, held weakly. The first is kept inline: most
/// nodes that make one make only one (a task opening `child(label)`).
struct SharedScopes<S: 'static> {
    first: Option<(&'static str, Weak<ScopeNode<S>>)>,
    rest: Vec<(&'static str, Weak<ScopeNode<S>>)>,
}

impl<S: 'static> Default for SharedScopes<S> {
    fn default() -> Self {
        Self {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<S: 'static> SharedScopes<S> {
    fn iter(&self) -> impl Iterator<Item = &(&'static str, Weak<ScopeNode<S>>)> {
        self.first.iter().chain(&self.rest)
    }

    /// Drops the entries of scopes no longer alive.
    fn forget_dropped(&mut self) {
        if self
            .first
            .as_ref()
            .is_some_and(|(_, node)| node.strong_count() == 0)
        {
            self.first = None;
        }
        self.rest.retain(|(_, node)| node.strong_count() > 0);
    }

    fn push(&mut self, label: &'static str, node: Weak<ScopeNode<S>>) {
        if self.first.is_none() {
            self.first = Some((label, node));
        } else {
            self.rest.push((label, node));
        }
    }
}

/// A node's children, in one allocation with the scopes shared by label.
struct Family<S: 'static> {
    children: Slab<Child<S>>,
    /// The scope nodes `ScopeNode::shared_child` made here, by label, held weakly: alive while
    /// a context or task under them is.
    shared: SharedScopes<S>,
}

impl<S: 'static> Default for Family<S> {
    fn default() -> Self {
        Self {
            children: Slab::default(),
            shared: SharedScopes::default(),
        }
    }
}

/// What every node carries.
pub(crate) struct NodeCore<S: 'static> {
    /// Readable without the lock (spawn checks it every call); written under it.
    closed: AtomicBool,
    /// This node's slot among its parent's children, and the number of the thread that adopted it
    /// ([`SlotWord`]): written by that thread before the node is shared, read when it leaves.
    slot: AtomicU64,
    links: Mutex<Links<S>>,
    /// The label of contexts on this node; `None` only for the bare cells of unit tests.
    scope: Option<Arc<S>>,
}

impl<S: 'static> Default for NodeCore<S> {
    fn default() -> Self {
        Self {
            closed: AtomicBool::new(false),
            slot: AtomicU64::new(0),
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
    /// The task's number in its deterministic run (spawn order, from 1), what the run's
    /// auditor records of it; 0 outside one.
    #[cfg(feature = "deterministic")]
    pub(crate) simulated_id: u64,
}

impl<S: 'static> TaskNode<S> {
    /// The node of a task spawned under `parent` with `execution`, delivered to `home` (not
    /// adopted yet).
    pub(crate) fn under(parent: &NodeRef<S>, home: Home, execution: Execution) -> Self {
        Self {
            core: NodeCore::under(parent.clone(), parent.scope().clone()),
            home,
            execution,
            #[cfg(feature = "deterministic")]
            simulated_id: crate::simulation::with_current(|simulation| simulation.next_task())
                .unwrap_or(0),
        }
    }

    /// The owner of a bare task of the unit tests: delivered to `home`, in no tree.
    #[cfg(test)]
    pub(crate) fn unsupervised(home: Home) -> Self {
        Self {
            core: NodeCore::default(),
            home,
            execution: Execution::default(),
            #[cfg(feature = "deterministic")]
            simulated_id: 0,
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
            slot: AtomicU64::new(SlotWord::UNADOPTED),
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
                // SAFETY: the entry is still in the list, so its task has not left (or its
                // leave is held by a batch, which holds a count), so its cell is alive; we
                // hold the lock the leave needs.
                Child::Task(task) => Some(NodeRef::Task(unsafe { task.counted() })),
            })
            .collect()
    }

    /// Leaves the parent: gives the slot back and drops the link.
    fn leave(&self, parent: Option<NodeRef<S>>, identity: *const ()) {
        if let Some(parent) = parent {
            parent
                .core()
                .release(SlotWord::slot(self.slot.load(Ordering::Relaxed)), identity);
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
            Ok(slot) => TaskNode::<S>::of(task)
                .slot
                .store(SlotWord::adopted_here(slot), Ordering::Relaxed),
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
    let Some(parent) = parent else { return };
    let word = core.slot.load(Ordering::Relaxed);
    let slot = SlotWord::slot(word);
    // A task ending on the thread that adopted it finds its parent's list in this core's
    // cache: leaving at once is cheapest. One ending elsewhere leaves with its batch.
    let parent = if SlotWord::adopted_here_word(word) {
        Some(parent)
    } else {
        PendingLeave::defer(parent, slot, task)
    };
    if let Some(parent) = parent {
        parent.core().release(slot, task.identity());
    }
}

/// A node's slot word: its slot among its parent's children in the low [`SlotWord::BITS`]
/// bits, and above them the number of the thread that adopted it (`sharded::thread_number`) (zero for a scope node, which
/// leaves at once wherever it is dropped).
struct SlotWord;

impl SlotWord {
    const BITS: u32 = 40;
    const SLOTS: u64 = (1 << Self::BITS) - 1;
    /// The word of a node not adopted (yet): no slot names it.
    const UNADOPTED: u64 = Self::SLOTS;

    /// The word of a slot adopted by the calling thread.
    fn adopted_here(slot: usize) -> u64 {
        let slot = slot as u64;
        assert!(slot < Self::SLOTS, "a node with 2^40 children");
        slot | (u64::from(thread_number()) << Self::BITS)
    }

    /// The slot of a word.
    fn slot(word: u64) -> usize {
        (word & Self::SLOTS) as usize
    }

    /// Whether the word was adopted by the calling thread.
    fn adopted_here_word(word: u64) -> bool {
        word >> Self::BITS == u64::from(thread_number())
    }
}

/// Holds back the leaves of tasks that end on this thread until it is dropped (see the module
/// invariants). For a pool worker's batch of polls; not reentrant (a nested batch applies its
/// leaves with the outer one).
pub(crate) struct LeaveBatch {
    outer: bool,
}

thread_local! {
    /// Whether a [`LeaveBatch`] is open on this thread.
    static BATCHING: Cell<bool> = const { Cell::new(false) };
    /// The leaves held back by the open batch.
    static PENDING: RefCell<Vec<PendingLeave>> = const { RefCell::new(Vec::new()) };
}

impl LeaveBatch {
    /// Opens a batch on this thread.
    pub(crate) fn begin() -> Self {
        let outer = !BATCHING.with(|batching| batching.replace(true));
        Self { outer }
    }
}

impl Drop for LeaveBatch {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        /// Closes the batch however its flush ends: a destructor that panics below (an output
        /// nobody read, freed with its cell) must not leave every later batch on this thread
        /// looking nested, holding its leaves forever. Leaves still held then are applied by
        /// the next batch's flush, or by their own drops.
        struct Close;
        impl Drop for Close {
            fn drop(&mut self) {
                BATCHING.with(|batching| batching.set(false));
            }
        }
        let _close = Close;
        // Applied before the flag falls, so a leave deferred by a drop below is applied too;
        // unwinding included, so no entry outlives the references that guard it.
        loop {
            // Taken only when there is something to apply: the list keeps its allocation.
            let taken = PENDING.with(|pending| {
                let mut pending = pending.borrow_mut();
                (!pending.is_empty()).then(|| std::mem::take(&mut *pending))
            });
            let Some(mut pending) = taken else {
                break;
            };
            let mut start = 0;
            while start < pending.len() {
                let parent = pending[start].parent_identity();
                let len = pending[start..]
                    .iter()
                    .take_while(|leave| leave.parent_identity() == parent)
                    .count();
                let run = &mut pending[start..start + len];
                // SAFETY: every leave of `run` has the same parent, whose label type is the
                // one `run[0].release` was made for (see `PendingLeave::defer`).
                unsafe { (run[0].release)(run) };
                start += len;
            }
            // Dropping the references may free cells and scopes (a scope's drop leaves its
            // parent at once); no lock is held here.
            pending.clear();
            PENDING.with(|slot| {
                let mut slot = slot.borrow_mut();
                if slot.is_empty() {
                    // Keep the allocation for the next batch.
                    *slot = pending;
                }
            });
        }
    }
}

/// A parent held by a pending leave, its label type erased (the batch is one list per thread
/// for every label type).
enum ErasedParent {
    /// From `Arc::into_raw` of an `Arc<ScopeNode<S>>`; given back by `drop_scope`.
    Scope(*const ()),
    Task(TaskRef),
}

/// A task's leave of its parent, held back by a [`LeaveBatch`].
struct PendingLeave {
    parent: ErasedParent,
    slot: usize,
    /// The ended task: this count keeps its cell alive, and so the parent's entry valid.
    task: TaskRef,
    /// Whether the leave was applied; one dropped before is applied by its drop, so no entry
    /// outlives this count whatever ends the batch (a thread's exit included).
    applied: bool,
    /// Removes the leaves of a run with this parent from its list, under one lock, and marks
    /// them applied.
    release: unsafe fn(&mut [PendingLeave]),
    /// Gives back a `Scope` parent's count.
    drop_scope: unsafe fn(*const ()),
}

impl PendingLeave {
    /// Holds back `task`'s leave of `parent` if a batch is open on this thread; otherwise
    /// hands `parent` back for the caller to leave at once.
    fn defer<S: 'static>(parent: NodeRef<S>, slot: usize, task: &TaskRef) -> Option<NodeRef<S>> {
        if !BATCHING.with(Cell::get) {
            return Some(parent);
        }
        let parent = match parent {
            NodeRef::Scope(scope) => ErasedParent::Scope(Arc::into_raw(scope).cast()),
            NodeRef::Task(task) => ErasedParent::Task(task),
        };
        let leave = PendingLeave {
            parent,
            slot,
            task: task.clone(),
            applied: false,
            release: release_run::<S>,
            drop_scope: drop_scope::<S>,
        };
        PENDING.with(|pending| pending.borrow_mut().push(leave));
        None
    }

    fn parent_identity(&self) -> *const () {
        match &self.parent {
            ErasedParent::Scope(scope) => *scope,
            ErasedParent::Task(task) => task.identity(),
        }
    }
}

impl Drop for PendingLeave {
    fn drop(&mut self) {
        if !self.applied {
            let release = self.release;
            // SAFETY: a run of one, with its own parent and label type.
            unsafe { release(std::slice::from_mut(self)) };
        }
        if let ErasedParent::Scope(scope) = self.parent {
            // SAFETY: `scope` came from `Arc::into_raw` of the `Arc<ScopeNode<S>>` that
            // `drop_scope` was made for, and this is its only release.
            unsafe { (self.drop_scope)(scope) };
        }
    }
}

/// Removes every leave of `run` from the list of its parent, of label type `S`.
///
/// # Safety
/// Every leave of `run` has the same parent, and `S` is that parent's label type.
unsafe fn release_run<S: 'static>(run: &mut [PendingLeave]) {
    let Some(first) = run.first() else { return };
    let core: &NodeCore<S> = match &first.parent {
        // SAFETY: the pending leave holds a count of this `ScopeNode<S>` (caller's contract on
        // `S`), so it is alive.
        ErasedParent::Scope(scope) => &unsafe { &*scope.cast::<ScopeNode<S>>() }.core,
        ErasedParent::Task(task) => TaskNode::<S>::of(task),
    };
    let mut links = core.links.lock();
    if let Some(family) = links.family.as_mut() {
        for leave in run.iter() {
            let identity = leave.task.identity();
            family
                .children
                .remove_if(leave.slot, |child| child.identity() == identity);
        }
    }
    drop(links);
    for leave in run {
        leave.applied = true;
    }
}

/// Gives back a count of a `ScopeNode<S>` taken with `Arc::into_raw`.
///
/// # Safety
/// `scope` came from `Arc::into_raw` of an `Arc<ScopeNode<S>>`, and is given back once.
unsafe fn drop_scope<S: 'static>(scope: *const ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Arc::from_raw(scope.cast::<ScopeNode<S>>()) });
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
                shared.forget_dropped();
                shared.push(label, Arc::downgrade(fresh));
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
                // Tag zero: a scope leaves at once (its drop is not in a batch).
                scope.core.slot.store(slot as u64, Ordering::Relaxed);
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

    /// The children listed under a scope node.
    fn listed(scope: &crate::Context) -> usize {
        let NodeRef::Scope(node) = &scope.tree else {
            unreachable!("child contexts stand on scope nodes")
        };
        let links = node.core.links.lock();
        links
            .family
            .as_ref()
            .map_or(0, |family| family.children.len())
    }

    /// A task adopted on a foreign thread and ending on the worker leaves its parent when the
    /// worker's batch ends: a task later in the same batch still finds it listed, can abort
    /// the parent (the cascade finds the ended task closed and leaves its result alone), and
    /// the list is empty once the batch is over.
    #[test]
    fn a_leave_held_by_a_batch_survives_an_abort_of_its_parent_and_is_applied_at_its_end() {
        Runner::new(config()).start(|context| async move {
            let scope = context.child("scope");
            let (ended, aborter) = std::thread::scope(|threads| {
                threads
                    .spawn(|| {
                        // Spawned from a foreign thread: adopted there, queued globally, and
                        // taken by the worker in one share, `ended` first.
                        let ended = scope.clone().spawn(|_| async { 7 });
                        let aborter = context.clone().spawn({
                            let scope = scope.clone();
                            move |_| async move {
                                let still_listed = listed(&scope);
                                scope.tree.abort();
                                still_listed
                            }
                        });
                        (ended, aborter)
                    })
                    .join()
                    .unwrap()
            });
            assert_eq!(ended.await.unwrap(), 7, "the ended task keeps its result");
            assert_eq!(
                aborter.await.unwrap(),
                1,
                "the ended task is listed until its batch ends"
            );
            assert_eq!(listed(&scope), 0, "the held leave was applied");
        });
    }

    /// A destructor that panics while a batch applies its leaves (an output nobody took, freed
    /// with its cell) fails its runner, and leaves no batch open on the thread: a second
    /// runner there applies its leaves, and every cell of it is freed when it returns.
    #[test]
    fn a_panic_while_a_batch_applies_its_leaves_leaves_no_batch_open() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                if !std::thread::panicking() {
                    panic!("bomb in an unread output");
                }
            }
        }
        let first = std::panic::catch_unwind(|| {
            Runner::new(config()).start(|context| async move {
                let scope = context.child("scope");
                let handle = std::thread::scope(|threads| {
                    threads
                        .spawn(|| scope.clone().spawn(|_| async { Bomb }))
                        .join()
                        .unwrap()
                });
                drop(handle);
                futures::future::pending::<()>().await
            })
        });
        assert!(first.is_err(), "the bomb fails the first runner");
        let stuck = BATCHING.with(Cell::get);
        let pending = PENDING.with(|p| p.borrow().len());
        // A second runner on the same thread.
        let (listed_after, pool) = Runner::new(config()).start(|context| async move {
            let scope = context.child("scope");
            let ended = std::thread::scope(|threads| {
                threads
                    .spawn(|| scope.clone().spawn(|_| async { 7 }))
                    .join()
                    .unwrap()
            });
            assert_eq!(ended.await.unwrap(), 7);
            for _ in 0..10 {
                crate::reschedule().await;
            }
            (listed(&scope), context.runtime().pool.clone())
        });
        assert!(
            !stuck,
            "the failed flush closed its batch ({pending} leaves left)"
        );
        assert_eq!(
            listed_after, 0,
            "the second runner's batch applied its leave"
        );
        assert_eq!(
            Arc::weak_count(&pool),
            0,
            "every cell of the second runner was freed"
        );
        assert_eq!(PENDING.with(|pending| pending.borrow().len()), 0);
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
