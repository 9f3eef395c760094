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
//!   abort from the root reaches every node still in use; dead entries are pruned whenever the child list would
//!   grow, so a long-lived parent that spawns millions of short tasks keeps a bounded list.

use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// Something to close when its node is aborted (a task's completion slot).
pub(crate) trait Abort: Send + Sync {
    fn abort(&self);
}

#[derive(Default)]
struct Node {
    aborted: bool,
    children: Vec<Weak<Tree>>,
    aborter: Option<Arc<dyn Abort>>,
}

/// A node of the supervision tree.
#[derive(Default)]
pub struct Tree {
    node: Mutex<Node>,
    /// Children keep their parent alive (parents hold children weakly), so a subtree stays
    /// reachable from the root for as long as any of its nodes is in use.
    _parent: Option<Arc<Tree>>,
}

impl Tree {
    /// A new root node.
    pub(crate) fn root() -> Arc<Tree> {
        Arc::new(Tree::default())
    }

    /// A new child of `parent`, and whether `parent` was already aborted (in which case the
    /// child is born aborted).
    pub(crate) fn child(parent: &Arc<Tree>) -> (Arc<Tree>, bool) {
        let child = Arc::new(Tree {
            node: Mutex::default(),
            _parent: Some(parent.clone()),
        });
        let mut node = parent.node.lock();
        if node.aborted {
            drop(node);
            child.node.lock().aborted = true;
            return (child, true);
        }
        if node.children.len() == node.children.capacity() {
            node.children.retain(|child| child.strong_count() > 0);
        }
        node.children.push(Arc::downgrade(&child));
        (child, false)
    }

    /// Installs what closes this node's task. Returns false, leaving the aborter unset, when
    /// the node is already aborted.
    pub(crate) fn set_aborter(&self, aborter: Arc<dyn Abort>) -> bool {
        let mut node = self.node.lock();
        if node.aborted {
            return false;
        }
        node.aborter = Some(aborter);
        true
    }

    /// Whether this node has been aborted.
    pub(crate) fn is_aborted(&self) -> bool {
        self.node.lock().aborted
    }

    /// Aborts this node and every descendant, then runs their aborters deepest first.
    pub(crate) fn abort(&self) {
        let mut aborters = Vec::new();
        let mut pending: Vec<Arc<Tree>> = Vec::new();
        self.mark(&mut aborters, &mut pending);
        while let Some(next) = pending.pop() {
            next.mark(&mut aborters, &mut pending);
        }
        // Children were marked after their parents, so reversing runs descendants first.
        for aborter in aborters.into_iter().rev() {
            aborter.abort();
        }
    }

    /// Closes the subtree of a task that finished by itself: its own aborter is dropped (the
    /// task publishes its own result), its descendants are aborted.
    pub(crate) fn finish(&self) {
        let aborter = self.node.lock().aborter.take();
        drop(aborter);
        self.abort();
    }

    fn mark(&self, aborters: &mut Vec<Arc<dyn Abort>>, pending: &mut Vec<Arc<Tree>>) {
        let (children, aborter) = {
            let mut node = self.node.lock();
            if node.aborted {
                return;
            }
            node.aborted = true;
            (std::mem::take(&mut node.children), node.aborter.take())
        };
        aborters.extend(aborter);
        pending.extend(children.iter().filter_map(Weak::upgrade));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex as Log;

    struct Record(&'static str, Arc<Log<Vec<&'static str>>>);
    impl Abort for Record {
        fn abort(&self) {
            self.1.lock().push(self.0);
        }
    }

    #[test]
    fn abort_cascades_and_runs_descendants_first() {
        let log = Arc::new(Log::new(Vec::new()));
        let root = Tree::root();
        let (child, aborted) = Tree::child(&root);
        assert!(!aborted);
        let (grandchild, _) = Tree::child(&child);
        assert!(root.set_aborter(Arc::new(Record("root", log.clone()))));
        assert!(child.set_aborter(Arc::new(Record("child", log.clone()))));
        assert!(grandchild.set_aborter(Arc::new(Record("grandchild", log.clone()))));

        root.abort();
        assert!(child.is_aborted() && grandchild.is_aborted());
        assert_eq!(*log.lock(), ["grandchild", "child", "root"]);

        // A second abort runs nothing again; children of aborted nodes are born aborted.
        root.abort();
        assert_eq!(log.lock().len(), 3);
        let (late, aborted) = Tree::child(&child);
        assert!(aborted && late.is_aborted());
        assert!(!late.set_aborter(Arc::new(Record("late", log.clone()))));
    }

    #[test]
    fn finish_closes_descendants_without_its_own_aborter() {
        let log = Arc::new(Log::new(Vec::new()));
        let task = Tree::root();
        let (retained, _) = Tree::child(&task);
        assert!(task.set_aborter(Arc::new(Record("task", log.clone()))));
        assert!(retained.set_aborter(Arc::new(Record("retained", log.clone()))));
        task.finish();
        assert!(retained.is_aborted());
        assert_eq!(*log.lock(), ["retained"]);
    }

    #[test]
    fn dead_children_are_pruned_as_the_list_grows() {
        let root = Tree::root();
        for _ in 0..10_000 {
            drop(Tree::child(&root));
        }
        assert!(root.node.lock().children.len() < 64);
    }
}
