//! Runnable programs that show the framework: `cargo run -p examples --bin NAME`.
//!
//! `tour`, `kv`, `chat`, `echo` and `hello`. This library holds what they share: the `kv`
//! service (which `tour` runs in-process), its Redis protocol codec, a line reader for the
//! line protocols of the others, refusals of connections past a limit that never lose their
//! line, and the Ctrl-C handling that turns a signal into a runtime stop.

#![warn(missing_docs, missing_debug_implementations)]

pub mod interrupt;
pub mod kv;
pub mod limits;
pub mod lines;
pub mod refusal;
pub mod resp;

/// `println!` that shrugs off a closed stdout (`kv | head -2`): what the programs print is for
/// people, and a reader that went away is not a failure of the service.
#[macro_export]
macro_rules! say {
    () => {
        $crate::say!("")
    };
    ($($argument:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout(), $($argument)*);
    }};
}
