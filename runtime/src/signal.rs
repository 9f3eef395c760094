//! Process signals as futures: [`Context::signal`](crate::Context::signal) resolves when the
//! process receives SIGINT ([`Signal::Interrupt`]) or SIGTERM ([`Signal::Terminate`]).
//!
//! How a delivery travels, and why nothing is lost:
//! - The first wait for a kind installs its handler (`sigaction`, `SA_RESTART`) for the rest of
//!   the process's life: from then on that signal no longer ends the process on its own, as
//!   with tokio's `signal::ctrl_c`. The handler does only what is async-signal-safe: it bumps
//!   the kind's delivery count (a lock-free atomic) and writes one byte to a non-blocking
//!   self-pipe (a full pipe drops the byte: one is already pending, and it wakes everyone).
//! - One thread per process (`runtime-signals`, started with the first handler) blocks on the
//!   pipe and, for every byte it reads, wakes every registered waiter of every kind.
//! - A wait remembers the kind's count when it was made and is ready once the count moved
//!   past it. It registers its waker before it checks the count: a delivery after the check
//!   bumps the count before its byte, so the thread's wake, which drains the waiters after
//!   reading that byte, finds the waker. A wait made before a delivery sees it even if it is
//!   first polled after; one made after does not.
//!
//! The machinery is the process's, not a runner's: waits of several runners (or of one made
//! outside any runner) share it, and it does not hold a runner's shutdown.

use crate::Error;
use crate::sync::Mutex;
use std::future::Future;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll, Waker};

/// A process signal a program can wait for with [`Context::signal`](crate::Context::signal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Signal {
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
    /// SIGTERM: what `kill`, systemd and container runtimes send to stop a process.
    Terminate,
}

impl Signal {
    const ALL: [Signal; 2] = [Signal::Interrupt, Signal::Terminate];

    fn index(self) -> usize {
        match self {
            Signal::Interrupt => 0,
            Signal::Terminate => 1,
        }
    }

    fn number(self) -> libc::c_int {
        match self {
            Signal::Interrupt => libc::SIGINT,
            Signal::Terminate => libc::SIGTERM,
        }
    }
}

/// Deliveries per kind, bumped by the handler.
static DELIVERED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// The self-pipe's write end for the handler; -1 until the pipe exists.
static WRITE_END: AtomicI32 = AtomicI32::new(-1);

/// What the process's waits share: the waiters, and which handlers are installed.
struct Shared {
    state: Mutex<State>,
    /// The process that made the pipe and the thread: a child forked without exec inherits
    /// the pipe but not the thread, so its waits are refused rather than left hanging.
    pid: u32,
}

#[derive(Default)]
struct State {
    installed: [bool; 2],
    next_id: u64,
    waiters: Vec<(u64, Waker)>,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// The shared state, with the pipe and its thread made on first use. A failure (out of
/// descriptors or threads) is returned and not kept: the next wait tries again.
fn shared() -> Result<&'static Shared, String> {
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let shared = match SHARED.get() {
        Some(shared) => shared,
        None => {
            let _starting = STARTING
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match SHARED.get() {
                Some(shared) => shared,
                None => {
                    let started = start()?;
                    SHARED.get_or_init(|| started)
                }
            }
        }
    };
    if shared.pid != std::process::id() {
        return Err(
            "this process was forked from the one that watches signals, and inherits none of \
             its watching: wait for signals only in the process that runs the runtime"
                .into(),
        );
    }
    Ok(shared)
}

fn start() -> Result<Shared, String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot make the signal pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `pipe2` just made both descriptors and nothing else owns them.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: a descriptor we own; F_SETFL with O_NONBLOCK changes only its blocking mode.
    if unsafe { libc::fcntl(write_end.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
        return Err(format!(
            "cannot make the signal pipe non-blocking: {}",
            std::io::Error::last_os_error()
        ));
    }
    std::thread::Builder::new()
        .name("runtime-signals".into())
        .spawn(move || watch(read_end))
        .map_err(|error| format!("cannot start the signal thread: {error}"))?;
    // The write end lives for the rest of the process: the handler may write at any time.
    WRITE_END.store(
        std::mem::ManuallyDrop::new(write_end).as_raw_fd(),
        Ordering::SeqCst,
    );
    Ok(Shared {
        state: Mutex::new(State::default()),
        pid: std::process::id(),
    })
}

/// The signal thread: every byte read wakes every waiter, which checks its own kind's count.
fn watch(read_end: OwnedFd) {
    let mut bytes = [0u8; 64];
    loop {
        // SAFETY: a descriptor this thread owns, and a buffer of the length given.
        let read =
            unsafe { libc::read(read_end.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
        if read < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if read <= 0 {
            // The write end never closes; a failing read leaves waits pending, as without
            // signals.
            return;
        }
        // Set before any handler is installed, so before any byte can come.
        let Some(shared) = SHARED.get() else { continue };
        let waiters = std::mem::take(&mut shared.state.lock().waiters);
        for (_, waker) in waiters {
            waker.wake();
        }
    }
}

extern "C" fn on_signal(number: libc::c_int) {
    // SAFETY: `__errno_location` is this thread's errno; it is restored below, so the
    // interrupted code never sees the `write`'s.
    let errno = unsafe { *libc::__errno_location() };
    for kind in Signal::ALL {
        if kind.number() == number {
            DELIVERED[kind.index()].fetch_add(1, Ordering::SeqCst);
        }
    }
    let fd = WRITE_END.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: `write` is async-signal-safe; the buffer is one valid byte. The write end
        // is non-blocking and open for the rest of the process.
        unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Installs the handler for `kind` once per process.
fn install(shared: &Shared, kind: Signal) -> Result<(), String> {
    let mut state = shared.state.lock();
    if state.installed[kind.index()] {
        return Ok(());
    }
    // SAFETY: a zeroed `sigaction` is a valid starting point (no flags, empty mask); the
    // handler only touches atomics, errno and `write`, all async-signal-safe, and stays valid
    // for the process's life (a plain function).
    let installed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(kind.number(), &action, std::ptr::null_mut())
    };
    if installed != 0 {
        return Err(format!(
            "cannot install the handler of {kind:?}: {}",
            std::io::Error::last_os_error()
        ));
    }
    state.installed[kind.index()] = true;
    Ok(())
}

/// Resolves once the process receives its signal after the wait was made; made by
/// [`Context::signal`](crate::Context::signal). `Ok(())` on delivery;
/// [`Error::SignalsUnavailable`] at the first poll if the process could not watch signals
/// (out of descriptors or threads, or a child forked without exec), which says why. Cheap to
/// drop; may be polled from any thread.
#[must_use = "a signal wait does nothing unless polled"]
pub struct SignalWait {
    kind: Signal,
    outcome: Result<(&'static Shared, u64), String>,
    id: Option<u64>,
}

impl SignalWait {
    pub(crate) fn new(kind: Signal) -> Self {
        let outcome = shared().and_then(|shared| {
            install(shared, kind)?;
            Ok((shared, DELIVERED[kind.index()].load(Ordering::SeqCst)))
        });
        SignalWait {
            kind,
            outcome,
            id: None,
        }
    }
}

impl Future for SignalWait {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let (shared, seen) = match &self.outcome {
            Ok(watch) => *watch,
            Err(why) => return Poll::Ready(Err(Error::SignalsUnavailable(why.clone()))),
        };
        let count = &DELIVERED[self.kind.index()];
        let delivered = || count.load(Ordering::SeqCst) > seen;
        if delivered() {
            return Poll::Ready(Ok(()));
        }
        // Registered before the check below: see the module's documentation. A waker it
        // replaces is dropped after the lock is released (a waker's drop may run anything).
        let _replaced = {
            let mut state = shared.state.lock();
            let state = &mut *state;
            let existing = self
                .id
                .and_then(|id| state.waiters.iter_mut().find(|(other, _)| *other == id));
            match existing {
                Some((_, waker)) if waker.will_wake(cx.waker()) => None,
                Some((_, waker)) => Some(std::mem::replace(waker, cx.waker().clone())),
                None => {
                    state.next_id += 1;
                    let id = state.next_id;
                    state.waiters.push((id, cx.waker().clone()));
                    self.id = Some(id);
                    None
                }
            }
        };
        if delivered() {
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl Drop for SignalWait {
    fn drop(&mut self) {
        if let (Ok((shared, _)), Some(id)) = (&self.outcome, self.id) {
            // Taken out under the lock, dropped after it.
            let _removed = {
                let mut state = shared.state.lock();
                let at = state.waiters.iter().position(|(other, _)| *other == id);
                at.map(|at| state.waiters.swap_remove(at))
            };
        }
    }
}

impl std::fmt::Debug for SignalWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalWait")
            .field("kind", &self.kind)
            .field("seen", &self.outcome.as_ref().map(|(_, seen)| *seen))
            .finish_non_exhaustive()
    }
}
