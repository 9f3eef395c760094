//! `#[runtime::test]` as users write it: the accepted forms, its options, and its timeout.

use runtime::prelude::*;
use runtime::{Context, Error};
use std::time::Duration;

/// A test without a context still runs on the runtime: runtime futures work in its body.
#[runtime::test]
async fn runs_on_the_runtime_without_a_context() {
    runtime::reschedule().await;
}

/// The root context spawns supervised tasks whose results the test awaits.
#[runtime::test]
async fn receives_the_root_context(context: Context) {
    let task = context.clone().spawn(|context| async move {
        context.sleep(Duration::from_millis(1)).await;
        21
    });
    assert_eq!(task.await, Ok(21));
}

/// A test may return `Result`; `?` works in its body as written.
#[runtime::test]
async fn returns_a_result(context: runtime::Context) -> Result<(), Error> {
    let value = context.spawn(|_| async { 2 }).await?;
    assert_eq!(value, 2);
    Ok(())
}

/// Options apply: with `catch_panics = true` a task panic only closes its handle.
#[runtime::test(catch_panics = true, worker_threads = 3)]
async fn options_configure_the_runner(context: Context) {
    let failed = context.spawn(|_| async { panic!("a task failure the test expects") });
    assert_eq!(failed.await, Err(Error::Exited));
}

/// A body still running at its timeout fails the test with a message naming the timeout.
#[runtime::test(timeout = "50ms")]
#[should_panic(expected = "test timed out after 50ms")]
async fn a_body_past_its_timeout_fails(context: Context) {
    context.sleep(Duration::from_secs(3600)).await;
}

/// A body that finishes before its timeout passes.
#[runtime::test(timeout = "10s")]
async fn a_body_within_its_timeout_passes(context: Context) {
    context.sleep(Duration::from_millis(1)).await;
}

/// `#[should_panic]` works without a timeout: the body's panic fails the runner, and the test
/// sees it with its original message.
#[runtime::test]
#[should_panic(expected = "the body fails on purpose")]
async fn a_failing_body_fails_the_test() {
    panic!("the body fails on purpose");
}

fn base_config() -> runtime::Config {
    runtime::Config::default().with_global_queue_interval(7)
}

/// `config` builds the base config and the other options apply on top.
#[runtime::test(config = base_config, worker_threads = 1, catch_panics = true)]
async fn a_config_function_and_options_combine(context: Context) {
    let failed = context.spawn(|_| async { panic!("caught by the option") });
    assert_eq!(failed.await, Err(Error::Exited));
}

/// A body may start with inner attributes.
#[runtime::test]
async fn inner_attributes_stay_in_the_body() {
    #![allow(unused_variables)]
    let unused = 1;
}
