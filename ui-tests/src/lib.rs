//! trybuild cases for every macro error the project emits.
//!
//! Filled by the macros issue, together with the macros themselves. It holds no case yet.
