//! Spawns a small supervised tree, sleeps, and prints what the runtime measured.

use runtime::Context;
use runtime::prelude::*;
use std::time::Duration;

#[runtime::main(worker_threads = 2)]
async fn main(context: Context) {
    let workers = context.child("workers");
    let handles: Vec<_> = (1..=4u64)
        .map(|n| {
            workers.clone().spawn(move |context| async move {
                context.sleep(Duration::from_millis(10 * n)).await;
                n * n
            })
        })
        .collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("the task finishes");
    }
    print!("{}", context.encode());
    examples::say!("sum of squares 1..=4 computed by 4 supervised tasks: {total}");
}
