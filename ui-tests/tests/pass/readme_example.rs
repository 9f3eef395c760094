//! The README's example, kept compiling (and running) here.

use runtime::prelude::*;
use std::time::Duration;

#[runtime::main(worker_threads = 2)]
async fn main(context: runtime::Context) -> Result<(), runtime::Error> {
    // The factory runs right here, on the caller; the task runs on the pool.
    let square = context.clone().spawn(|context| async move {
        context.sleep(Duration::from_millis(1)).await;
        6 * 6
    });
    println!("{}", square.await?);
    Ok(())
}

#[runtime::test(timeout = "10s")]
async fn spawned_tasks_report_their_output(context: runtime::Context) {
    assert_eq!(context.spawn(|_| async { 7 }).await, Ok(7));
}
