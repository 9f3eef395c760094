//! Side-by-side benchmarks; see `src/bin/`.
