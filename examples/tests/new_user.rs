//! The program a new user wrote from the README alone, which needed three workarounds before
//! the API composed: a supervised pool of four workers under a registry name, a reporter
//! driven by a timer that finds the pool by that name, and a RESP client of an in-process
//! `kv` over the TCP halves' `futures::io` traits. It is written as the README shows, with
//! `?` on runtime and actors errors alike in a function returning `actors::Error`, `Debug` on
//! the application's own state, and no helper of the examples' own.

use actors::prelude::*;
use actors::{Pool, Registry};
use futures::channel::oneshot;
use futures::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use std::time::Duration;

#[actor]
struct Worker {
    served: u64,
}

#[actor]
impl Worker {
    fn square(&mut self, n: u64) -> u64 {
        self.served += 1;
        n * n
    }
}

/// Every tick, finds the pool by its name and asks one member for a square; reports the
/// first three answers.
#[actor]
struct Reporter {
    answers: Vec<u64>,
    done: Option<oneshot::Sender<Vec<u64>>>,
}

#[actor]
impl Reporter {
    fn on_start(&mut self, ctx: &mut actors::Context<Self>) {
        ctx.run_every(Duration::from_millis(5), |_, ctx| {
            let registry = Registry::of(ctx.runtime());
            let me = ctx.actor_ref();
            if let Some(pool) = registry.lookup::<WorkerPoolRef>("workers") {
                // The ask runs beside the actor; its answer comes back as a message.
                drop(ctx.runtime().clone().spawn(move |_| async move {
                    if let Ok(square) = pool.square(3).timeout(Duration::from_secs(5)).await {
                        let _ = me.tell_record(square).await;
                    }
                }));
            }
        });
    }

    fn record(&mut self, square: u64) {
        self.answers.push(square);
        if self.answers.len() == 3
            && let Some(done) = self.done.take()
        {
            let _ = done.send(self.answers.clone());
        }
    }
}

/// What the application keeps: every handle prints with `{:?}`.
#[derive(Debug)]
struct App {
    context: runtime::Context,
    pool: WorkerPoolRef,
    reporter: ReporterRef,
}

/// The RESP exchange: a durable SET and a GET, written with `futures::io`, read line by line.
async fn set_and_get(
    context: &runtime::Context,
    address: std::net::SocketAddr,
) -> Result<String, Box<dyn std::error::Error>> {
    let (mut sink, mut stream) = context.dial(address).await?;
    sink.write_all(b"*3\r\n$3\r\nSET\r\n$8\r\ngreeting\r\n$5\r\nhello\r\n")
        .await?;
    sink.write_all(b"*2\r\n$3\r\nGET\r\n$8\r\ngreeting\r\n")
        .await?;
    sink.flush().await?;
    let mut replies = String::new();
    for _ in 0..3 {
        stream.read_line(&mut replies).await?;
    }
    Ok(replies)
}

/// The README's shape: `actors::Error` throughout, a runtime error carried by `?`.
async fn start(
    context: &runtime::Context,
    done: oneshot::Sender<Vec<u64>>,
) -> Result<App, actors::Error> {
    let pool: WorkerPoolRef = Pool::new("workers", 4, || Worker { served: 0 })
        .spawn(context)
        .await?
        .into();
    Registry::of(context).register("workers", &pool)?;
    // A runtime error (here, none) goes through `?` into `actors::Error`.
    let listener = context
        .bind("127.0.0.1:0".parse().expect("an address"))
        .await?;
    drop(listener);
    let reporter = Reporter {
        answers: Vec::new(),
        done: Some(done),
    }
    .spawn(context);
    Ok(App {
        context: context.clone(),
        pool,
        reporter,
    })
}

#[runtime::test(timeout = "60s")]
async fn the_new_user_program_runs_as_the_readme_shows(context: runtime::Context) {
    let (done, reported) = oneshot::channel();
    let app = start(&context, done).await.expect("the application starts");
    let shown = format!("{app:?}");
    assert!(
        shown.contains("WorkerPoolRef") && shown.contains("ReporterRef"),
        "{shown}"
    );
    assert_eq!(reported.await.expect("three reports"), vec![9, 9, 9]);

    let service = examples::kv::serve(
        &context,
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .expect("kv starts");
    let replies = set_and_get(&context, service.address)
        .await
        .expect("the RESP exchange");
    assert_eq!(replies, "+OK\r\n$5\r\nhello\r\n");
    assert_eq!(app.pool.square(4).await, Ok(16));
    assert_eq!(app.reporter.stop().await, actors::ExitReason::Stopped);
    drop(app.context);
}
