//! The task cell: one allocation per spawn holding the state word, the task's owner (what the
//! layers above keep in it: for the runtime, its home and its node in the tree), the result
//! slot its [`Handle`](super::Handle) reads, and the future; plus the hand-written `RawWaker`
//! vtable that wakes it.
//!
//! The cell knows nothing of pools, workers or the supervision tree: it is generic over what it
//! needs from them ([`Owner`]).
//!
//! A cell is shared by reference-counted pointers, all [`TaskRef`]s underneath: the task set's
//! entry ([`Task`]), at most one queued [`Runnable`], the handle, the task's own contexts, its
//! parent's child entry, and any number of wakers. The cell is freed when the last of them
//! goes; its future may be gone long before.
//!
//! # The state word
//!
//! [`super::state`] keeps the word and names its transitions (`start_poll`, `end_poll`,
//! `complete`, `wake`, `clear`); each returns what its caller must do, and this file only
//! acts on those outcomes.
//!
//! Invariants:
//! - `SCHEDULED` is set exactly while one [`Runnable`] for the cell exists; only the thread
//!   that moved the word out of `IDLE` (a waker or the poller) creates it.
//! - The future is pinned from its first poll: it is dropped in place (`drop_in_place`), never
//!   moved out, on every path (finish, abort, refusal, teardown, a panicking destructor).
//! - The future is touched only by the thread that holds `RUNNING`, or by the thread that moved
//!   the word into `COMPLETE` from a state without `RUNNING`. Those two are exclusive, which is
//!   what makes the `UnsafeCell` accesses sound. The owner and the result slot are shared
//!   (immutable, or behind locks and atomics) and never part of that exclusive access.
//! - Once `COMPLETE` is set it never clears: wakes are then no-ops and a queued runnable is
//!   simply released when it is taken.
//! - No allocation happens on poll or wake: a waker is a reference count on the cell, and the
//!   waker a poll hands out is borrowed from the runnable's reference.
//! - A supervised future finishes in this order: the future is dropped (a destructor panic is
//!   contained), the owner ends the task (its subtree is closed), and only then is the result
//!   published.
//! - The reference count is hand-kept rather than an `Arc`'s, so that a cell is born with the
//!   references it hands out (no atomic operation for them): `allocate` sets the count and
//!   returns a [`Born`] that hands out exactly that many, releasing those it never hands out.
//! - A cell's owner type is recorded in its vtable, and [`TaskRef::owner`] checks it before it
//!   hands out the owner, so reading an owner as the wrong type is a panic, never a bad cast.

use super::Owner;
use super::join::{Ended, JoinSlot};
use super::state::{Clear, EndPoll, StartPoll, State, Wake};
use crate::Error;
use crate::panic::Panics;
#[cfg(not(tsan))]
use crate::sync::fence;
use crate::sync::{AtomicUsize, UnsafeCell};
use std::any::TypeId;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

/// What a poll of a runnable led to, for the worker that ran it.
pub(crate) enum Polled {
    /// The future finished (or was cleared during the poll) and is gone; the task leaves the
    /// set.
    Done(TaskRef),
    /// The future is waiting for a wake.
    Idle,
    /// The future was woken during its poll: the returned runnable goes behind queued work.
    Requeue(Runnable),
    /// The runnable's task had already completed; nothing was polled.
    Stale,
}

/// Type-erased operations on a cell, one static table per future and owner type.
struct Vtable {
    poll: unsafe fn(NonNull<Header>, &mut Context<'_>) -> Poll<()>,
    drop_future: unsafe fn(NonNull<Header>),
    cancel: unsafe fn(NonNull<Header>),
    abort: unsafe fn(NonNull<Header>),
    clone: unsafe fn(NonNull<Header>),
    release: unsafe fn(NonNull<Header>),
    /// Delivers a runnable a wake made ([`Owner::schedule`]).
    schedule: fn(Runnable),
    /// The type of the cell's owner, checked by [`TaskRef::owner`].
    owner: TypeId,
}

/// The part of a cell every pointer can see without knowing the future's or owner's type.
#[repr(C)]
pub(crate) struct Header {
    state: State,
    /// References to the cell (task set, runnable, handle, contexts, parent entry, wakers).
    refs: AtomicUsize,
    vtable: &'static Vtable,
    /// Index of the task's entry in the task set; written once, under the set's lock, before
    /// the first runnable exists.
    pub(crate) slot: std::sync::atomic::AtomicUsize,
}

/// The header and the owner: the prefix of every cell with owner `O`, whatever its future, so
/// a header pointer of such a cell is also a pointer to its `Head<O>`.
#[repr(C)]
struct Head<O> {
    header: Header,
    owner: O,
}

/// A cell: the head first (so a pointer to the cell is a pointer to its header), then the
/// result slot (shared), then the future (exclusive to its poller).
#[repr(C)]
struct Cell<F: Future, O> {
    head: Head<O>,
    supervision: Option<JoinSlot<F::Output>>,
    future: UnsafeCell<Option<F>>,
}

impl<F, O> Cell<F, O>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    O: Owner,
{
    const VTABLE: Vtable = Vtable {
        poll: Self::poll,
        drop_future: Self::drop_future,
        cancel: Self::cancel,
        abort: Self::abort,
        clone: Self::clone,
        release: Self::release,
        schedule: O::schedule,
        owner: TypeId::of::<O>(),
    };

    /// # Safety
    /// `header` points into a live `Cell<F, O>`.
    unsafe fn from_header<'a>(header: NonNull<Header>) -> &'a Cell<F, O> {
        // SAFETY: `header` is the first field of `Head<O>`, itself the first field of a
        // `#[repr(C)]` `Cell<F, O>`, so the cast gives back the cell, alive while the caller's
        // count is.
        unsafe { header.cast::<Cell<F, O>>().as_ref() }
    }

    /// Drops the future where it lies, containing a destructor panic. Returns whether the
    /// drop was clean.
    ///
    /// # Safety
    /// The caller has exclusive access to the future (module invariants).
    unsafe fn dispose(cell: &Cell<F, O>) -> bool {
        // SAFETY: exclusive access per the caller's contract.
        Panics::contain(|| cell.future.with_mut(|slot| unsafe { drop_in_place(slot) })).is_some()
    }

    /// # Safety
    /// The caller holds `RUNNING` (see the module invariants).
    unsafe fn poll(header: NonNull<Header>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: the caller's count keeps the cell alive.
        let cell = unsafe { Self::from_header(header) };
        let Some(supervision) = &cell.supervision else {
            // SAFETY: holding RUNNING makes this thread the only one touching `future`, and
            // the cell never moves while referenced, so pinning holds.
            return cell.future.with_mut(|slot| match unsafe { &mut *slot } {
                Some(future) => unsafe { Pin::new_unchecked(future) }.poll(cx).map(drop),
                None => Poll::Ready(()),
            });
        };
        let owner = &cell.head.owner;
        // This cell's own reference, borrowed for the owner's calls below (no count changes).
        let this = ManuallyDrop::new(TaskRef { header });
        if owner.is_aborted() {
            // Aborted (or its parent closed): drop the future and leave the tree.
            // SAFETY: RUNNING, see above.
            unsafe { Self::dispose(cell) };
            owner.end(&this);
            return Poll::Ready(());
        }
        // SAFETY: RUNNING, see above. The future is never moved while it is `Some`; it is
        // dropped in place.
        let polled = cell.future.with_mut(|slot| {
            let future = unsafe { &mut *slot }.as_mut()?;
            let pinned = unsafe { Pin::new_unchecked(future) };
            Some(catch_unwind(AssertUnwindSafe(|| pinned.poll(cx))))
        });
        let Some(polled) = polled else {
            return Poll::Ready(());
        };
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                // SAFETY: RUNNING, see above.
                let clean = unsafe { Self::dispose(cell) };
                owner.end(&this);
                let result = if clean {
                    Ok(output)
                } else {
                    Err(Ended::Closed)
                };
                supervision.publish(result, || owner.published());
                Poll::Ready(())
            }
            Err(payload) => {
                // SAFETY: RUNNING, see above.
                unsafe { Self::dispose(cell) };
                owner.end(&this);
                supervision.publish(Err(Ended::Exited), || owner.published());
                owner.panicked(payload);
                Poll::Ready(())
            }
        }
    }

    /// Drops the future of a task cleared before it finished. A supervised task's subtree and
    /// handle are closed first, so every metric is finished before the destructor runs.
    ///
    /// # Safety
    /// The caller has exclusive access to the future (module invariants).
    unsafe fn drop_future(header: NonNull<Header>) {
        // SAFETY: the caller's count keeps the cell alive.
        let cell = unsafe { Self::from_header(header) };
        if cell.supervision.is_some()
            // SAFETY: exclusive access per the caller's contract.
            && cell.future.with(|slot| unsafe { (*slot).is_some() })
        {
            let this = ManuallyDrop::new(TaskRef { header });
            cell.head.owner.abort(&this);
            cell.head.owner.end(&this);
        }
        // SAFETY: exclusive access per the caller's contract.
        cell.future.with_mut(|slot| unsafe { drop_in_place(slot) });
    }

    /// # Safety
    /// `header` points into a live `Cell<F, O>`.
    unsafe fn cancel(header: NonNull<Header>) {
        // SAFETY: the caller's count keeps the cell alive.
        let cell = unsafe { Self::from_header(header) };
        if let Some(supervision) = &cell.supervision
            && supervision.abort(|| cell.head.owner.published())
        {
            // The next poll drops the future (or teardown does).
            wake_by_ref(header);
        }
    }

    /// # Safety
    /// `header` points into a live `Cell<F, O>` on which the caller owns a count.
    unsafe fn abort(header: NonNull<Header>) {
        // SAFETY: the caller's count keeps the cell alive.
        let cell = unsafe { Self::from_header(header) };
        let this = ManuallyDrop::new(TaskRef { header });
        cell.head.owner.abort(&this);
    }

    /// # Safety
    /// `header` points into a live, boxed `Cell<F, O>` on which the caller owns a count.
    unsafe fn clone(header: NonNull<Header>) {
        // SAFETY: the caller owns one count, so the allocation is alive. Relaxed suffices: a
        // new reference can only be made from an existing one (as in `Arc::clone`).
        let previous = unsafe { header.as_ref() }
            .refs
            .fetch_add(1, Ordering::Relaxed);
        assert!(previous < usize::MAX / 2, "task reference count overflow");
    }

    /// # Safety
    /// As for `clone`; the caller gives up the count it owns.
    unsafe fn release(header: NonNull<Header>) {
        // SAFETY: the caller owns one count, so the allocation is alive until we release it.
        if unsafe { header.as_ref() }
            .refs
            .fetch_sub(1, Ordering::Release)
            != 1
        {
            return;
        }
        // The last reference: every other holder's accesses happen before this drop (the
        // Release decrements above pair with this Acquire fence, as in `Arc::drop`).
        #[cfg(not(tsan))]
        fence(Ordering::Acquire);
        // ThreadSanitizer does not model a standalone fence, and would report the free as
        // racing the last poller's accesses: built for it (`--cfg tsan`, see TESTING.md), the
        // same edge is an acquire load of the count, as `std`'s `Arc` does under the
        // sanitizer.
        #[cfg(tsan)]
        // SAFETY: the last reference: the allocation is alive until the drop below.
        unsafe { header.as_ref() }.refs.load(Ordering::Acquire);
        // Under loom, an access to the future slot here makes the models check that the free
        // happens after every poller's accesses (loom does not track the `Box` itself).
        #[cfg(loom)]
        // SAFETY: the last reference: nobody else touches the cell.
        unsafe { header.cast::<Cell<F, O>>().as_ref() }
            .future
            .with_mut(|_| ());
        // SAFETY: the cell was allocated by `Box::new` in `allocate` and nobody else holds it.
        drop(unsafe { Box::from_raw(header.cast::<Cell<F, O>>().as_ptr()) });
    }
}

/// One counted reference to a cell.
pub(crate) struct TaskRef {
    header: NonNull<Header>,
}

// SAFETY: a `TaskRef` only reaches the cell through atomics, locks and the state machine; the
// future inside is `Send` and the owner `Send + Sync`.
unsafe impl Send for TaskRef {}
// SAFETY: as above; shared access never touches the future without the state machine.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    fn header(&self) -> &Header {
        // SAFETY: this reference owns a count, so the cell is alive.
        unsafe { self.header.as_ref() }
    }

    /// Whether two references name the same cell.
    pub(crate) fn same(&self, other: &TaskRef) -> bool {
        self.header == other.header
    }

    /// The header, for set bookkeeping.
    pub(crate) fn header_ref(&self) -> &Header {
        self.header()
    }

    /// The owner the cell was made with, for the layer that made it.
    ///
    /// # Panics
    /// If the cell's owner is not an `O`: a bug of the caller, never a bad read.
    pub(crate) fn owner<O: 'static>(&self) -> &O {
        assert!(
            self.header().vtable.owner == TypeId::of::<O>(),
            "a task's owner is read as the type it was made with"
        );
        // SAFETY: the vtable is `Cell<F, O>::VTABLE` for this very `O` (checked above), so the
        // cell is a `#[repr(C)]` `Cell<F, O>` whose first field is a `Head<O>`, at the header's
        // address. Our count keeps it alive for the returned borrow.
        unsafe { &self.header.cast::<Head<O>>().as_ref().owner }
    }

    /// The cell's address, for identity checks.
    pub(crate) fn identity(&self) -> *const () {
        self.header.as_ptr().cast_const().cast()
    }

    /// The cell's address without a count.
    pub(crate) fn ptr(&self) -> TaskPtr {
        TaskPtr(self.header)
    }

    /// Closes the task's handle with `Closed` (unless a result was published) and wakes the
    /// task so that its future is dropped: this task alone, what an abort of the tree runs
    /// for each task it closes.
    pub(crate) fn cancel(&self) {
        // SAFETY: we own a count; the vtable matches the cell.
        unsafe { (self.header().vtable.cancel)(self.header) }
    }

    /// Aborts the task and everything it spawned, through its owner (see [`Owner::abort`]).
    pub(crate) fn abort(&self) {
        // SAFETY: we own a count; the vtable matches the cell.
        unsafe { (self.header().vtable.abort)(self.header) }
    }
}

impl Clone for TaskRef {
    fn clone(&self) -> Self {
        // SAFETY: we own a count, so cloning one more is sound.
        unsafe { (self.header().vtable.clone)(self.header) };
        Self {
            header: self.header,
        }
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        let release = self.header().vtable.release;
        // SAFETY: this reference owned one count and is going away.
        unsafe { release(self.header) }
    }
}

/// A cell's address without a count: what a supervision parent keeps for a child task.
#[derive(Clone, Copy)]
pub(crate) struct TaskPtr(NonNull<Header>);

// SAFETY: a `TaskPtr` is only an address; turning it into a reference is `unsafe` and checked
// by its caller (see `counted`).
unsafe impl Send for TaskPtr {}
// SAFETY: as above.
unsafe impl Sync for TaskPtr {}

impl TaskPtr {
    /// A counted reference to the cell.
    ///
    /// # Safety
    /// The cell must still be alive; the caller knows some other reference keeps it so.
    pub(crate) unsafe fn counted(self) -> TaskRef {
        // SAFETY: alive per the caller's contract; the vtable matches the cell.
        unsafe { (self.0.as_ref().vtable.clone)(self.0) };
        TaskRef { header: self.0 }
    }

    /// The cell's address, for identity checks.
    pub(crate) fn identity(self) -> *const () {
        self.0.as_ptr().cast_const().cast()
    }
}

/// The task set's handle on a cell: the owner of the future's lifetime.
#[derive(Clone)]
pub(crate) struct Task(pub(crate) TaskRef);

/// A permission to poll a task once, held by exactly one queue at a time.
pub(crate) struct Runnable(TaskRef);

/// A supervised cell waiting for its future (see [`Task::prepare`]). It holds the four
/// references the cell was born with; dropped before [`install`](Prepared::install) (a factory
/// panicked), it has its owner abort and end the task and releases the ones it still holds.
pub(crate) struct Prepared<F, O>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    O: Owner,
{
    cell: NonNull<Cell<F, O>>,
    born: Born,
    context_taken: bool,
}

impl<F, O> Prepared<F, O>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    O: Owner,
{
    /// The reference the task's context holds.
    pub(crate) fn for_context(&mut self) -> TaskRef {
        assert!(!self.context_taken, "the context reference is taken once");
        self.context_taken = true;
        self.born.take()
    }

    /// Stores the future and hands out the set's reference, the first runnable and the handle's.
    #[inline]
    pub(crate) fn install(mut self, future: F) -> (Task, Runnable, JoinRef<F::Output>) {
        assert!(self.context_taken, "the context takes its reference first");
        let cell = self.cell;
        let (task, runnable, for_handle) = (self.born.take(), self.born.take(), self.born.take());
        assert!(
            self.born.is_empty(),
            "every reference the cell was born with is handed out"
        );
        // Nothing is left to release: the references are all out, and the cell is installed.
        std::mem::forget(self);
        // SAFETY: nobody reaches the future before the runnable is delivered or the task is in
        // the set, and neither has happened yet: this write is exclusive.
        unsafe { cell.as_ref().future.with_mut(|slot| *slot = Some(future)) };
        // SAFETY: the cell is alive (we hold counts) and supervised.
        let slot = unsafe { NonNull::from(cell.as_ref().supervision.as_ref().expect("set")) };
        // SAFETY: `slot` points into the cell, which the handle's `TaskRef` keeps alive.
        let join = unsafe { JoinRef::new(for_handle, slot) };
        (Task(task), Runnable(runnable), join)
    }
}

impl<F, O> Drop for Prepared<F, O>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    O: Owner,
{
    fn drop(&mut self) {
        // The factory panicked: have the owner abort the task (its subtree and handle close)
        // and end it. The references still held are released when `born` drops, after this.
        let task = self.born.take();
        // SAFETY: the cell is alive while `task` is.
        let owner = unsafe { &self.cell.as_ref().head.owner };
        owner.abort(&task);
        owner.end(&task);
    }
}

/// Allocates a cell born with `references` counts, and hands them out as a [`Born`], so that
/// creating the references costs no atomic operation.
fn allocate<F, O>(
    future: Option<F>,
    supervision: Option<JoinSlot<F::Output>>,
    owner: O,
    references: usize,
) -> (NonNull<Cell<F, O>>, Born)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    O: Owner,
{
    let cell = Box::new(Cell {
        head: Head {
            header: Header {
                state: State::scheduled(),
                refs: AtomicUsize::new(references),
                vtable: &Cell::<F, O>::VTABLE,
                slot: std::sync::atomic::AtomicUsize::new(usize::MAX),
            },
            owner,
        },
        supervision,
        future: UnsafeCell::new(future),
    });
    let cell = NonNull::from(Box::leak(cell));
    let born = Born {
        header: cell.cast::<Header>(),
        left: references,
    };
    (cell, born)
}

/// The references a cell was born with (the count `allocate` set), not yet handed out. Made
/// only by `allocate`, so `left` never exceeds the counts the cell holds for it: each `take`
/// hands one out as a [`TaskRef`], and those never taken are released when this drops.
struct Born {
    header: NonNull<Header>,
    left: usize,
}

impl Born {
    /// One of the references, as a `TaskRef` that owns its count.
    #[inline]
    fn take(&mut self) -> TaskRef {
        assert!(
            self.left > 0,
            "a cell hands out only the references it was born with"
        );
        self.left -= 1;
        TaskRef {
            header: self.header,
        }
    }

    /// Whether every reference has been handed out.
    #[inline]
    fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl Drop for Born {
    fn drop(&mut self) {
        while !self.is_empty() {
            drop(self.take());
        }
    }
}

/// Drops the future in `slot` at its address (where it was pinned) and leaves `None` behind,
/// also when its destructor panics: the slot is vacated on unwind too, so the destructor never
/// runs twice and nothing ever moves the pinned value.
///
/// # Safety
/// The caller has exclusive access to `slot` for the duration of the call.
unsafe fn drop_in_place<F>(slot: *mut Option<F>) {
    /// Writes `None` over a slot whose value has been dropped (or is being dropped and
    /// unwinding), without dropping the old value again.
    struct Vacate<F>(*mut Option<F>);
    impl<F> Drop for Vacate<F> {
        fn drop(&mut self) {
            // SAFETY: exclusive access (the caller's contract); the value in the slot has been
            // dropped in place, so overwriting it without a drop is what must happen.
            unsafe { std::ptr::write(self.0, None) };
        }
    }
    // SAFETY: exclusive access per the caller's contract; the raw pointer to the contents is
    // taken without making a reference that outlives the drop.
    let future: *mut F = match unsafe { &mut *slot } {
        Some(future) => future,
        None => return,
    };
    let _vacate = Vacate(slot);
    // SAFETY: `future` points at a live, pinned value that nobody else touches; after this
    // call only `_vacate` writes the slot, and it never reads or drops the old value.
    unsafe { std::ptr::drop_in_place(future) };
}

impl Task {
    /// Allocates an unsupervised cell for `future` kept by `owner` (which delivers its
    /// runnables), already `SCHEDULED`, and returns the set's reference with the first
    /// runnable. The caller inserts the task before it delivers the runnable.
    #[cfg(test)]
    pub(crate) fn new<F, O>(future: F, owner: O) -> (Task, Runnable)
    where
        F: Future<Output = ()> + Send + 'static,
        O: Owner,
    {
        let (_, mut born) = allocate(Some(future), None, owner, 2);
        (Task(born.take()), Runnable(born.take()))
    }

    /// Allocates a supervised cell for a future of type `F` that does not exist yet: the
    /// factory that makes it needs the task's context, which refers to the cell. `owner` is
    /// kept in the cell for the layers above and called at the points of the task's life (see
    /// [`Owner`]).
    pub(crate) fn prepare<F, O>(owner: O) -> Prepared<F, O>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
        O: Owner,
    {
        // Four references: the task's context, then the set's, the first runnable and the
        // handle's (see `install`).
        let (cell, born) = allocate::<F, O>(None, Some(JoinSlot::new()), owner, 4);
        Prepared {
            cell,
            born,
            context_taken: false,
        }
    }

    /// Clears the task for teardown or refusal: an idle or queued future is dropped here and
    /// now; a future that is being polled is left to its poller, which drops it when the poll
    /// returns. Returns whether this call dropped the future.
    pub(crate) fn clear(&self) -> bool {
        let header = self.0.header();
        match header.state.clear() {
            Clear::DropFuture => {
                // SAFETY: the word moved into COMPLETE from a state without RUNNING, so no
                // poller exists and none can start: we own the future.
                unsafe { (header.vtable.drop_future)(self.0.header) };
                true
            }
            Clear::LeftToPoller | Clear::AlreadyComplete => false,
        }
    }

    /// Whether teardown or completion has cleared the task.
    #[cfg(test)]
    pub(crate) fn is_cleared(&self) -> bool {
        self.0.header().state.is_cleared()
    }
}

impl Runnable {
    /// The task this runnable polls.
    #[cfg(test)]
    pub(crate) fn task_ref(&self) -> &TaskRef {
        &self.0
    }

    /// The owner of this runnable's task (see [`TaskRef::owner`]): what
    /// [`Owner::schedule`] reads to deliver it.
    pub(crate) fn owner<O: 'static>(&self) -> &O {
        self.0.owner()
    }

    /// Delivers the runnable to its home from wherever the caller is (see
    /// [`Owner::schedule`]).
    pub(crate) fn spawn(self) {
        let schedule = self.0.header().vtable.schedule;
        schedule(self);
    }

    /// Polls the task once on the current thread.
    pub(crate) fn run(self) -> Polled {
        let header = self.0.header();
        match header.state.start_poll() {
            StartPoll::Run => {}
            StartPoll::Stale => return Polled::Stale,
        }

        // The waker handed to the poll borrows this runnable's count: no allocation and no
        // reference-count traffic unless the future clones it.
        let waker = ManuallyDrop::new(
            // SAFETY: the vtable functions below uphold the `RawWaker` contract; the data
            // pointer is a live header for as long as `self` lives, which outlasts the poll.
            unsafe { Waker::from_raw(RawWaker::new(self.0.header.as_ptr().cast(), &WAKER_VTABLE)) },
        );
        let mut cx = Context::from_waker(&waker);
        // SAFETY: we hold RUNNING.
        let result = unsafe { (header.vtable.poll)(self.0.header, &mut cx) };

        if result.is_ready() {
            // SAFETY: still RUNNING, so we own the future; drop whatever is left of it.
            unsafe { (header.vtable.drop_future)(self.0.header) };
            header.state.complete();
            return Polled::Done(self.0);
        }
        match header.state.end_poll() {
            EndPoll::Cancelled => {
                // SAFETY: teardown left the future to us (the poller): the word was
                // RUNNING|CANCELLED and is now COMPLETE, so nobody else touches it.
                unsafe { (header.vtable.drop_future)(self.0.header) };
                Polled::Done(self.0)
            }
            EndPoll::Requeue => Polled::Requeue(self),
            EndPoll::Idle => Polled::Idle,
        }
    }
}

/// Wakes the task behind `header`: the transition out of IDLE creates a runnable and schedules
/// it; a wake during a poll only marks NOTIFIED.
fn wake_by_ref(header: NonNull<Header>) {
    // SAFETY: the waker owns (or borrows) a count, so the header is alive.
    let head = unsafe { header.as_ref() };
    match head.state.wake() {
        Wake::Schedule => {
            // SAFETY: we hold a count; the new runnable owns a fresh one.
            unsafe { (head.vtable.clone)(header) };
            Runnable(TaskRef { header }).spawn();
        }
        Wake::Done => {}
    }
}

static WAKER_VTABLE: RawWakerVTable =
    RawWakerVTable::new(waker_clone, waker_wake, waker_wake_by_ref, waker_drop);

fn header_of(data: *const ()) -> NonNull<Header> {
    NonNull::new(data.cast_mut().cast::<Header>()).expect("a task waker's data is never null")
}

unsafe fn waker_clone(data: *const ()) -> RawWaker {
    let header = header_of(data);
    // SAFETY: the waker being cloned holds a count, so the cell is alive.
    unsafe { (header.as_ref().vtable.clone)(header) };
    RawWaker::new(data, &WAKER_VTABLE)
}

unsafe fn waker_wake(data: *const ()) {
    let header = header_of(data);
    wake_by_ref(header);
    // SAFETY: `wake` consumes the waker's count.
    unsafe { (header.as_ref().vtable.release)(header) };
}

unsafe fn waker_wake_by_ref(data: *const ()) {
    wake_by_ref(header_of(data));
}

unsafe fn waker_drop(data: *const ()) {
    let header = header_of(data);
    // SAFETY: dropping a waker gives up its count.
    unsafe { (header.as_ref().vtable.release)(header) };
}

/// A counted reference to a task's cell together with its join slot: what a
/// [`Handle`](super::Handle) holds. Made only by the cell, from a slot inside the cell it counts.
pub(crate) struct JoinRef<T> {
    task: TaskRef,
    slot: NonNull<JoinSlot<T>>,
}

// SAFETY: a `JoinRef` is a `TaskRef` (`Send + Sync`) and, in effect, a `&JoinSlot<T>` that
// the `TaskRef` keeps alive (the slot is dropped only when the cell is freed), through which
// its holder takes the result on whatever thread it polls: sound exactly when the slot is
// `Sync` (`T: Send`), which the bound states.
unsafe impl<T> Send for JoinRef<T> where JoinSlot<T>: Sync {}
// SAFETY: as above: `&JoinRef` only asks whether the result was published (an atomic load);
// taking the result needs `&mut`.
unsafe impl<T> Sync for JoinRef<T> where JoinSlot<T>: Sync {}

impl<T> JoinRef<T> {
    /// # Safety
    /// `slot` points into the cell `task` references.
    pub(crate) unsafe fn new(task: TaskRef, slot: NonNull<JoinSlot<T>>) -> Self {
        Self { task, slot }
    }

    fn slot(&self) -> &JoinSlot<T> {
        // SAFETY: the pointer targets the cell our `TaskRef` keeps alive (see `new`).
        unsafe { self.slot.as_ref() }
    }

    /// Takes the task's result if it was published, else registers `waker` for it.
    pub(crate) fn poll(&mut self, waker: &Waker) -> Poll<Result<T, Error>> {
        // SAFETY: a cell makes one `JoinRef` (in `Prepared::install`) and `JoinRef` is not
        // `Clone`, so this is the slot's only handle, polling through `&mut`.
        unsafe { self.slot().poll_result(waker) }
    }

    /// Whether the task's result was published (it may have been taken since).
    pub(crate) fn is_published(&self) -> bool {
        self.slot().is_published()
    }

    pub(crate) fn task(&self) -> &TaskRef {
        &self.task
    }
}

impl<T> Drop for JoinRef<T> {
    /// Drops the waker the handle left in the slot, if no publish took it: it holds a count on
    /// the waiting task's cell, which must not live as long as this one.
    fn drop(&mut self) {
        // SAFETY: the slot's only handle, going (see `poll`); the count it still holds keeps
        // the cell alive for the call.
        unsafe { self.slot().forget_waker() }
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    struct CountDrops(Arc<AtomicUsize>);
    impl Drop for CountDrops {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Whether teardown has cleared `task`.
    pub(crate) fn cancelled(task: &Task) -> bool {
        task.is_cleared()
    }

    #[test]
    fn clearing_an_idle_task_drops_its_future_once_and_stales_its_runnable() {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = CountDrops(drops.clone());
        let (task, runnable) = Task::new(
            async move {
                let _guard = guard;
            },
            (),
        );
        assert!(task.clear());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(!task.clear(), "a second clear finds the task complete");
        assert!(matches!(runnable.run(), Polled::Stale));
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(cancelled(&task));
    }

    #[test]
    fn a_finished_future_is_dropped_by_its_poller() {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = CountDrops(drops.clone());
        let (task, runnable) = Task::new(
            async move {
                let _guard = guard;
            },
            (),
        );
        assert!(matches!(runnable.run(), Polled::Done(_)));
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert!(!task.clear());
    }

    #[test]
    fn the_cell_is_freed_with_its_last_reference() {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = CountDrops(drops.clone());
        let (task, runnable) = Task::new(
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            },
            (),
        );
        drop(runnable);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(task);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the last reference drops the future"
        );
    }
}

/// Loom models of the state word and the reference count: every interleaving of a poll with
/// wakes, clears and reference drops from other threads ends with the future dropped exactly
/// once, at most one runnable at a time, no wake lost, and the cell freed once its last
/// reference goes. Unsupervised cells whose owner queues the runnables a wake makes keep the
/// models to the cell itself.
#[cfg(all(test, loom))]
mod models {
    use super::*;
    use crate::panic::Payload;
    use loom::sync::Mutex;
    use loom::sync::atomic::AtomicUsize;
    use loom::thread;
    use std::sync::Arc;

    /// Collects the runnables wakes create.
    #[derive(Default)]
    struct Queue(Mutex<Vec<Runnable>>);

    /// The models' owner: a wake queues the runnable in the shared queue.
    struct Queued(Arc<Queue>);

    impl Owner for Queued {
        fn schedule(runnable: Runnable) {
            let queue = runnable.owner::<Queued>().0.clone();
            queue.0.lock().unwrap().push(runnable);
        }

        fn is_aborted(&self) -> bool {
            false
        }

        fn end(&self, _task: &TaskRef) {}

        fn abort(&self, _task: &TaskRef) {}

        fn published(&self) {}

        fn panicked(&self, _payload: Payload) {}
    }

    impl Queue {
        fn take(&self) -> Vec<Runnable> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    /// Counts its drops.
    struct Dropped(Arc<AtomicUsize>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A future that is pending until it has been polled `polls` times, calling `on_poll`
    /// with the waker at each poll, and counts its drop.
    fn future(
        drops: &Arc<AtomicUsize>,
        polls: usize,
        mut on_poll: impl FnMut(&Waker) + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let guard = Dropped(drops.clone());
        let mut polled = 0;
        std::future::poll_fn(move |cx| {
            let _keep = &guard;
            polled += 1;
            on_poll(cx.waker());
            if polled >= polls {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// Runs `runnable` and every runnable it leads to until the task is done; returns how many
    /// polls that took.
    fn run_to_completion(first: Runnable, queue: &Queue) -> usize {
        let mut next = vec![first];
        let mut polls = 0;
        while let Some(runnable) = next.pop() {
            match runnable.run() {
                Polled::Done(_) => return polls + 1,
                Polled::Requeue(again) => next.push(again),
                Polled::Idle => {}
                Polled::Stale => return polls,
            }
            polls += 1;
            next.extend(queue.take());
        }
        polls
    }

    /// A wake from another thread racing the poll that handed out the waker: the task is
    /// polled again exactly once (requeued by the poller, or scheduled by the wake), never
    /// lost and never queued twice.
    #[test]
    fn a_wake_racing_the_poll_is_never_lost_or_doubled() {
        crate::sync::model(|| {
            let queue = Arc::new(Queue::default());
            let drops = Arc::new(AtomicUsize::new(0));
            let waker_thread = Arc::new(Mutex::new(None));
            let spawned = waker_thread.clone();
            let (task, runnable) = Task::new(
                future(&drops, 2, {
                    let mut first = true;
                    move |waker| {
                        if std::mem::take(&mut first) {
                            let waker = waker.clone();
                            *spawned.lock().unwrap() = Some(thread::spawn(move || waker.wake()));
                        }
                    }
                }),
                Queued(queue.clone()),
            );
            let first = runnable.run();
            let handle = waker_thread.lock().unwrap().take().expect("spawned");
            handle.join().unwrap();
            let mut again: Vec<Runnable> = queue.take();
            if let Polled::Requeue(runnable) = first {
                again.push(runnable);
            } else {
                assert!(matches!(first, Polled::Idle));
            }
            assert_eq!(again.len(), 1, "exactly one runnable after one wake");
            let runnable = again.pop().unwrap();
            assert!(matches!(runnable.run(), Polled::Done(_)));
            assert_eq!(drops.load(Ordering::SeqCst), 1);
            assert!(queue.take().is_empty());
            drop(task);
            assert_eq!(Arc::strong_count(&queue), 1, "the cell is freed");
        });
    }

    /// Teardown's clear racing a poll that completes (or stays pending): the future is dropped
    /// exactly once, by the clear if it found the task idle or queued, by the poller otherwise.
    #[test]
    fn a_clear_racing_a_poll_drops_the_future_exactly_once() {
        for polls in [1, 2] {
            crate::sync::model(move || {
                let queue = Arc::new(Queue::default());
                let drops = Arc::new(AtomicUsize::new(0));
                let (task, runnable) =
                    Task::new(future(&drops, polls, |_| {}), Queued(queue.clone()));
                let clearer = {
                    let task = task.clone();
                    let drops = drops.clone();
                    thread::spawn(move || {
                        let cleared = task.clear();
                        if cleared {
                            assert_eq!(drops.load(Ordering::SeqCst), 1, "the clear dropped it");
                        }
                        cleared
                    })
                };
                let polled = runnable.run();
                let cleared = clearer.join().unwrap();
                assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
                match polled {
                    Polled::Stale => assert!(cleared, "only a clear stales the runnable"),
                    Polled::Done(_) => assert!(!cleared, "the poller dropped it"),
                    Polled::Idle => assert!(cleared, "a pending task idles until it is cleared"),
                    Polled::Requeue(_) => unreachable!("nothing woke the task"),
                }
                assert!(task.is_cleared());
                assert!(queue.take().is_empty(), "no runnable after the clear");
                drop(polled);
                drop(task);
                assert_eq!(Arc::strong_count(&queue), 1, "the cell is freed");
            });
        }
    }

    /// References dropped on other threads (the task set's entry, wakers cloned during the
    /// poll, one of them woken by value) racing the poller's completion: the future is dropped
    /// once and the cell freed exactly when the last reference goes, whichever thread that is.
    #[test]
    fn references_dropped_across_threads_free_the_cell_once() {
        crate::sync::model(|| {
            let queue = Arc::new(Queue::default());
            let drops = Arc::new(AtomicUsize::new(0));
            let wakers = Arc::new(Mutex::new(Vec::new()));
            let keep = wakers.clone();
            let (task, runnable) = Task::new(
                future(&drops, 2, {
                    let mut first = true;
                    move |waker| {
                        if std::mem::take(&mut first) {
                            let mut kept = keep.lock().unwrap();
                            kept.push(waker.clone());
                            kept.push(waker.clone());
                        }
                    }
                }),
                Queued(queue.clone()),
            );
            assert!(matches!(runnable.run(), Polled::Idle));
            let (first, second) = {
                let mut kept = wakers.lock().unwrap();
                (kept.pop().unwrap(), kept.pop().unwrap())
            };
            let waking = thread::spawn(move || first.wake());
            waking.join().unwrap();
            let woken = queue.take().pop().expect("woken");
            // The last poll and the other references' drops race: the last reference goes on
            // whichever thread is last.
            let dropping = thread::spawn(move || {
                let clone = second.clone();
                drop(second);
                drop(clone);
                drop(task);
            });
            let polls = run_to_completion(woken, &queue);
            dropping.join().unwrap();
            assert_eq!(polls, 1);
            assert_eq!(drops.load(Ordering::SeqCst), 1);
            assert_eq!(
                Arc::strong_count(&queue),
                1,
                "the last reference freed the cell"
            );
        });
    }
}
