//! Input that the runtime refuses with an error rather than a panic: `Runner::try_start` on an
//! invalid config or a storage directory in use, `Config::try_validate`, and
//! `Spawner::try_child` on an invalid label. Each of these panicked before.

use runtime::prelude::*;
use runtime::{Config, Error, Runner};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[test]
fn try_start_refuses_an_invalid_config_before_calling_the_root_or_creating_anything() {
    let parent = std::env::temp_dir().join(format!(
        "runtime-refusals-{}-{}",
        std::process::id(),
        line!()
    ));
    let directory = parent.join("storage");
    let config = Config::new()
        .with_worker_threads(0)
        .with_storage_directory(&directory);
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let outcome = Runner::new(config).try_start(move |_| {
        flag.store(true, Ordering::SeqCst);
        async {}
    });
    let Err(Error::ConfigInvalid(why)) = &outcome else {
        panic!("an invalid config is refused: {outcome:?}");
    };
    assert!(
        why.contains("worker_threads is 0") && why.contains("allowed is 1..="),
        "names the field, the value and what is allowed: {why}"
    );
    assert!(!called.load(Ordering::SeqCst), "the root was not built");
    assert!(!parent.exists(), "nothing was created, not even the parent");
}

#[test]
fn try_validate_names_the_field_and_what_is_allowed() {
    let mut config = Config::new().with_global_queue_interval(0);
    let error = config.try_validate().unwrap_err();
    assert_eq!(
        error,
        Error::ConfigInvalid("global_queue_interval is 0, allowed is 1 or more".into())
    );
    assert!(
        error
            .to_string()
            .starts_with("invalid runtime configuration: ")
    );
    let mut fine = Config::new();
    assert_eq!(fine.try_validate(), Ok(()));
}

#[test]
fn try_start_refuses_a_storage_directory_in_use_and_the_first_runner_goes_on() {
    let directory = std::env::temp_dir().join(format!(
        "runtime-refusals-{}-{}",
        std::process::id(),
        line!()
    ));
    let config = Config::new()
        .with_worker_threads(1)
        .with_storage_directory(&directory);
    let nested_config = config.clone();
    let output = Runner::new(config).start(|context| async move {
        let nested = std::thread::spawn(move || {
            Runner::new(nested_config)
                .try_start(|_| async { unreachable!("the second runner never starts") })
        })
        .join()
        .expect("the refusal is an error, not a panic");
        let Err(Error::StartFailed(why)) = &nested else {
            panic!("a directory in use is refused: {nested:?}");
        };
        assert!(why.contains("in use by another runner"), "{why}");
        context.clone().spawn(|_| async { 5 }).await
    });
    assert_eq!(output, Ok(5));
    assert!(
        !directory.exists(),
        "created and left empty by the first runner: removed"
    );
}

#[test]
fn try_start_gives_the_roots_output() {
    let output = Runner::new(Config::new().with_worker_threads(1))
        .try_start(|context| async move { context.spawn(|_| async { 3 }).await });
    assert_eq!(output, Ok(Ok(3)));
}

#[test]
fn try_child_refuses_an_invalid_label_with_an_error_that_names_it() {
    Runner::new(Config::new().with_worker_threads(1)).start(|context| async move {
        for bad in ["", "with space", "dash-ed", "ünï"] {
            let refused = context.try_child(bad).map(|_| ());
            assert_eq!(refused, Err(Error::LabelInvalid(bad.to_string())));
            let message = refused.unwrap_err().to_string();
            assert!(
                message.contains(&format!("{bad:?}")) && message.contains("ASCII letters"),
                "names the label and what is allowed: {message}"
            );
        }
        let child = context.try_child("good_1").expect("a valid label");
        assert_eq!(child.spawn(|_| async { 1 }).await, Ok(1));
    });
}

#[test]
fn try_start_refuses_a_thread_that_already_runs_a_worker() {
    let output = Runner::new(Config::new().with_worker_threads(1)).start(|_| async {
        let directory = std::env::temp_dir().join(format!(
            "runtime-refusals-{}-{}",
            std::process::id(),
            line!()
        ));
        let nested = Runner::new(Config::new().with_storage_directory(&directory))
            .try_start(|_| async { unreachable!("the nested runner never starts") });
        let Err(Error::StartFailed(why)) = &nested else {
            panic!("a runner inside a runner's root is refused: {nested:?}");
        };
        assert!(why.contains("already runs a runtime worker"), "{why}");
        assert!(!directory.exists(), "nothing was created");
        7
    });
    assert_eq!(output, 7);
}
