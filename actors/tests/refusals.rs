//! Labels given at run time are refused with an error that names them, never a panic: a pool
//! (whose `spawn` returns a `Result`) and both supervisors' `try_spawn`.

use actors::prelude::*;
use actors::supervisor::{DynamicSupervisor, Strategy, Supervisor};
use actors::{Error, Pool};

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) -> u8 {
        1
    }
}

fn label_invalid(label: &str) -> Error {
    Error::from(runtime::Error::LabelInvalid(label.to_string()))
}

#[runtime::test(timeout = "20s")]
async fn a_pool_with_an_invalid_label_is_refused(context: runtime::Context) {
    let refused = Pool::new("bad label", 2, || Worker).spawn(&context).await;
    let error = refused.map(|_| ()).unwrap_err();
    assert_eq!(error, label_invalid("bad label"));
    assert!(
        error.to_string().contains("\"bad label\""),
        "the message names the label: {error}"
    );
    let pool: WorkerPoolRef = Pool::new("good_label", 2, || Worker)
        .spawn(&context)
        .await
        .expect("a valid label")
        .into();
    assert_eq!(pool.ping().await, Ok(1));
}

#[runtime::test(timeout = "20s")]
async fn supervisors_with_an_invalid_label_are_refused_by_try_spawn(context: runtime::Context) {
    let refused = Supervisor::new("bad-label", Strategy::OneForOne).try_spawn(&context);
    assert_eq!(refused.map(|_| ()).unwrap_err(), label_invalid("bad-label"));
    let refused = DynamicSupervisor::new("").try_spawn(&context);
    assert_eq!(refused.map(|_| ()).unwrap_err(), label_invalid(""));

    let mut outer = Supervisor::new("outer", Strategy::OneForOne);
    let mut middle = Supervisor::new("middle", Strategy::OneForOne);
    middle.supervisor(
        Supervisor::new("inner label", Strategy::OneForOne),
        actors::supervisor::Restart::Permanent,
        std::time::Duration::from_secs(1),
    );
    outer.supervisor(
        middle,
        actors::supervisor::Restart::Permanent,
        std::time::Duration::from_secs(1),
    );
    let refused = outer.try_spawn(&context);
    assert_eq!(
        refused.map(|_| ()).unwrap_err(),
        label_invalid("inner label"),
        "a nested supervisor's label, at any depth, is checked before anything starts"
    );

    let mut supervisor = Supervisor::new("workers", Strategy::OneForOne);
    let worker = supervisor.child(actors::supervisor::ChildSpec::new(|| Worker));
    let _supervisor = supervisor.try_spawn(&context).expect("a valid label");
    assert_eq!(worker.ping().await, Ok(1));
    let sessions = DynamicSupervisor::new("sessions")
        .try_spawn(&context)
        .expect("a valid label");
    assert_eq!(sessions.count(), 0);
}

/// A pool size past `MAX_POOL_SIZE` (a computed size gone wrong) is refused like a size of
/// zero, at spawn and at resize, instead of overflowing or starting billions of actors.
#[runtime::test(timeout = "20s")]
async fn a_pool_size_past_the_maximum_is_refused(context: runtime::Context) {
    let huge = usize::MAX / 2;
    let refused = Pool::new("huge", huge, || Worker).spawn(&context).await;
    assert_eq!(
        refused.map(|_| ()).unwrap_err(),
        Error::InvalidPoolSize {
            pool: "huge",
            size: huge
        }
    );
    let pool = Pool::new("small", 1, || Worker)
        .spawn(&context)
        .await
        .unwrap();
    let too_many = actors::pool::MAX_POOL_SIZE + 1;
    let error = pool.resize(too_many).await.unwrap_err();
    assert_eq!(
        error,
        Error::InvalidPoolSize {
            pool: "small",
            size: too_many
        }
    );
    assert!(error.to_string().contains("1 to 65536"), "{error}");
    assert_eq!(pool.size(), 1);
}
