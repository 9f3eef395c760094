//! The supervision tree: one node per task and per [`child`](crate::Spawner::child) context.
//!
//! Invariants:
//! - `aborted` only goes from false to true. A node created under an aborted parent starts
//!   aborted, so a context retained by a finished task can never spawn again.
//! - [`Tree::abort`] marks the whole subtree aborted and then runs the aborters of every node
//!   it marked, deepest first, so a task's descendants are closed before its own handle
//!   resolves.
//! - No lock is held while an aborter runs: aborters wake tasks and finish metrics, which may
//!   run arbitrary code.
//! - Parents hold their children weakly and children hold their parents strongly, so an
//!   abort from the root reaches every node still in use; a dropped child gives its slot
//!   back, so a long-lived parent that spawns millions of short tasks keeps a list as long as
//!   its live children.

use crate::task::cell::TaskRef;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// What closes a node's task when the node is aborted.
pub(crate) enum Aborter {
    /// The task's cell: its handle closes and the task is woken to drop its future.
    Task(TaskRef),
    /// A probe, for tests of the tree alone.
    #[cfg(test)]
    Probe(Box<dyn Fn() + Send + Sync>),
}

impl Aborter {
    fn abort(&self) {
        match self {
            Aborter::Task(task) => task.abort(),
            #[cfg(test)]
            Aborter::Probe(probe) => probe(),
        }
    }
}

impl From<TaskRef> for Aborter {
    fn from(task: TaskRef) -> Self {
        Aborter::Task(task)
    }
}

/// A node's children by slot.
type Children = Vec<Option<Weak<Tree>>>;

#[derive(Default)]
struct Node {
    aborted: bool,
    /// Live children by slot; a child frees its slot when it is dropped.
    children: Children,
    free: Vec<usize>,
    aborter: Option<Aborter>,
}

/// A node of the supervision tree.
pub struct Tree {
    node: Mutex<Node>,
    /// Children keep their parent alive (parents hold children weakly), so a subtree stays
    /// reachable from the root for as long as any of its nodes is in use.
    parent: Option<Arc<Tree>>,
    /// This node's slot among its parent's children; written and read under the parent's
    /// lock.
    slot: AtomicUsize,
    /// Mirrors `node.aborted` for lock-free reads (spawn checks it on every call). Set under
    /// the lock, after `node.aborted`.
    aborted: AtomicBool,
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Give the slot back, so a parent that outlives millions of short tasks keeps a list as
        // long as its live children, and their memory is freed at once.
        let Some(parent) = &self.parent else { return };
        let mut node = parent.node.lock();
        let slot = self.slot.load(Ordering::Relaxed);
        let ours = node
            .children
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|child| std::ptr::eq(child.as_ptr(), self));
        if ours {
            node.children[slot] = None;
            node.free.push(slot);
        }
    }
}

impl Tree {
    /// A new root node.
    pub(crate) fn root() -> Arc<Tree> {
        Arc::new(Tree {
            node: Mutex::default(),
            parent: None,
            slot: AtomicUsize::new(usize::MAX),
            aborted: AtomicBool::new(false),
        })
    }

    /// A new child of `parent`, and whether `parent` was already aborted (in which case the
    /// child is born aborted).
    pub(crate) fn child(parent: &Arc<Tree>) -> (Arc<Tree>, bool) {
        let child = Arc::new(Tree {
            node: Mutex::default(),
            parent: Some(parent.clone()),
            slot: AtomicUsize::new(usize::MAX),
            aborted: AtomicBool::new(false),
        });
        let mut node = parent.node.lock();
        if node.aborted {
            drop(node);
            child.node.lock().aborted = true;
            child.aborted.store(true, Ordering::Release);
            return (child, true);
        }
        let slot = match node.free.pop() {
            Some(slot) => slot,
            None => {
                node.children.push(None);
                node.children.len() - 1
            }
        };
        node.children[slot] = Some(Arc::downgrade(&child));
        child.slot.store(slot, Ordering::Relaxed);
        (child, false)
    }

    /// Installs what closes this node's task. Returns false, leaving the aborter unset, when
    /// the node is already aborted.
    pub(crate) fn set_aborter(&self, aborter: impl Into<Aborter>) -> bool {
        let mut node = self.node.lock();
        if node.aborted {
            return false;
        }
        node.aborter = Some(aborter.into());
        true
    }

    /// Whether this node has been aborted.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Aborts this node and every descendant, then runs their aborters deepest first.
    pub(crate) fn abort(&self) {
        self.close(true);
    }

    /// Closes the subtree of a task that finished by itself: its own aborter is dropped (the
    /// task publishes its own result), its descendants are aborted.
    pub(crate) fn finish(&self) {
        self.close(false);
    }

    /// Marks this node and its subtree aborted and runs the aborters collected, deepest first;
    /// this node's own aborter runs only if `abort_self`.
    fn close(&self, abort_self: bool) {
        let Some((aborter, children)) = self.mark_one() else {
            return;
        };
        let mut aborters = Vec::new();
        if abort_self {
            aborters.extend(aborter);
        }
        // The common case, a task that leaves no descendants, stops here after one lock.
        let mut pending: Vec<Arc<Tree>> = children
            .iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect();
        while let Some(next) = pending.pop() {
            if let Some((aborter, children)) = next.mark_one() {
                aborters.extend(aborter);
                pending.extend(children.iter().flatten().filter_map(Weak::upgrade));
            }
        }
        // Children were marked after their parents, so reversing runs descendants first.
        for aborter in aborters.into_iter().rev() {
            aborter.abort();
        }
    }

    /// Marks this node aborted and hands out its aborter and children; `None` if it already
    /// was.
    fn mark_one(&self) -> Option<(Option<Aborter>, Children)> {
        let mut node = self.node.lock();
        if node.aborted {
            return None;
        }
        node.aborted = true;
        self.aborted.store(true, Ordering::Release);
        node.free.clear();
        Some((node.aborter.take(), std::mem::take(&mut node.children)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex as Log;

    fn record(name: &'static str, log: Arc<Log<Vec<&'static str>>>) -> Aborter {
        Aborter::Probe(Box::new(move || log.lock().push(name)))
    }

    #[test]
    fn abort_cascades_and_runs_descendants_first() {
        let log = Arc::new(Log::new(Vec::new()));
        let root = Tree::root();
        let (child, aborted) = Tree::child(&root);
        assert!(!aborted);
        let (grandchild, _) = Tree::child(&child);
        assert!(root.set_aborter(record("root", log.clone())));
        assert!(child.set_aborter(record("child", log.clone())));
        assert!(grandchild.set_aborter(record("grandchild", log.clone())));

        root.abort();
        assert!(child.is_aborted() && grandchild.is_aborted());
        assert_eq!(*log.lock(), ["grandchild", "child", "root"]);

        // A second abort runs nothing again; children of aborted nodes are born aborted.
        root.abort();
        assert_eq!(log.lock().len(), 3);
        let (late, aborted) = Tree::child(&child);
        assert!(aborted && late.is_aborted());
        assert!(!late.set_aborter(record("late", log.clone())));
    }

    #[test]
    fn finish_closes_descendants_without_its_own_aborter() {
        let log = Arc::new(Log::new(Vec::new()));
        let task = Tree::root();
        let (retained, _) = Tree::child(&task);
        assert!(task.set_aborter(record("task", log.clone())));
        assert!(retained.set_aborter(record("retained", log.clone())));
        task.finish();
        assert!(retained.is_aborted());
        assert_eq!(*log.lock(), ["retained"]);
    }

    #[test]
    fn dropped_children_give_their_slot_back() {
        let root = Tree::root();
        for _ in 0..10_000 {
            drop(Tree::child(&root));
        }
        assert_eq!(root.node.lock().children.len(), 1, "one slot, reused");
        let kept = Tree::child(&root).0;
        let second = Tree::child(&root).0;
        drop(kept);
        assert_eq!(root.node.lock().free.len(), 1);
        root.abort();
        assert!(second.is_aborted());
    }
}
