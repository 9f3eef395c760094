//! Ctrl-C (SIGINT) and SIGTERM as a runtime stop: a blocking task waits on a self-pipe that
//! the signal handler writes to (`write` is async-signal-safe), then calls `stop`. After the
//! first signal the default handlers are back, so a second Ctrl-C ends a stuck shutdown.

use runtime::Spawner as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The pipe's write end, for the handler.
static WRITE_END: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    // SAFETY: `__errno_location` is the thread's errno; the handler restores what it found,
    // so the interrupted code never sees this `write`'s errno.
    let errno = unsafe { *libc::__errno_location() };
    let fd = WRITE_END.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: `write` is async-signal-safe; the buffer is a valid byte. The write end is
        // non-blocking: a full pipe (a signal is already pending) drops this byte.
        unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Releases the waiting task when dropped, so a program that ends without a signal (an
/// error, a panic, or simply finishing) does not leave it blocked, which would hold the
/// runtime's shutdown. Keep it alive for as long as signals should stop the runtime.
pub struct Interrupts(());

impl Drop for Interrupts {
    fn drop(&mut self) {
        on_signal(0);
    }
}

/// Stops `context`'s runtime (value 0, `grace` for its tasks to finish) on the first SIGINT
/// or SIGTERM. Installs the handlers; call once.
pub fn stop_on_interrupt(
    context: &runtime::Context,
    grace: Duration,
) -> std::io::Result<Interrupts> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `pipe2` just made both descriptors, and nothing else owns the read end.
    let read_end = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    // SAFETY: `fds[1]` is open; F_SETFL with O_NONBLOCK changes only its blocking mode.
    if unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    WRITE_END.store(fds[1], Ordering::Relaxed);
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only calls `write` and touches errno, both async-signal-safe.
        let previous =
            unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
        if previous == libc::SIG_ERR {
            return Err(std::io::Error::last_os_error());
        }
    }
    let stopper = context.clone();
    drop(context.clone().shared(true).spawn(move |_| async move {
        let mut byte = 0u8;
        // Blocking is what this task's placement is for.
        // SAFETY: `byte` is one writable byte; the descriptor is open while `read_end` lives.
        unsafe { libc::read(read_end.as_raw_fd(), (&raw mut byte).cast(), 1) };
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: restoring the default disposition has no preconditions.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
        let _ = stopper.stop(0, Some(grace)).await;
    }));
    Ok(Interrupts(()))
}
