//! Every accepted form of `#[runtime::test]`, next to the attributes it keeps working with.

#[runtime::test]
async fn plain() {}

#[runtime::test]
async fn with_context(_context: runtime::Context) {}

#[runtime::test]
async fn returning_a_result(_context: runtime::Context) -> Result<(), String> {
    Ok(())
}

#[runtime::test(timeout = "10s", worker_threads = 2, catch_panics = false)]
#[should_panic(expected = "boom")]
async fn should_panic_with_options() {
    panic!("boom");
}

#[runtime::test(timeout = "500ms")]
#[ignore = "shows that #[ignore] is kept"]
async fn ignored() {}

#[runtime::test(deterministic)]
async fn deterministic_seed_zero(_context: runtime::Context) {}

#[runtime::test(deterministic, seed = 3)]
async fn deterministic_one_seed() {}

#[runtime::test(deterministic, seeds = 0..=4, timeout = "1m", catch_panics = true)]
async fn deterministic_seeds_with_options(_context: runtime::Context) -> Result<(), String> {
    Ok(())
}

fn main() {}
