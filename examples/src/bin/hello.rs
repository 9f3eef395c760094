//! Spawns a small supervised tree, sleeps, and prints what the runtime measured.

use runtime::prelude::*;
use runtime::{Config, Runner};
use std::time::Duration;

fn main() {
    let total = Runner::new(Config::default()).start(|context| async move {
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
        total
    });
    println!("sum of squares 1..=4 computed by 4 supervised tasks: {total}");
}
