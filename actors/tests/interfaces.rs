//! Interfaces and recipients through the public API: two actor types behind one interface
//! ref (asks, tells, `try_`, deadlines, delegated replies, a context), an actor
//! implementing two interfaces, refs kept across the interface ref's life, and recipients
//! that outlive their actor or keep it alive.

use actors::prelude::*;
use actors::{Context, Error, ExitReason, Recipient, Reply};
use std::time::Duration;

#[interface]
pub trait Greeter {
    /// Greets `name`.
    fn greet(&self, name: String) -> String;

    /// Renames the greeter; replies with the old name.
    async fn rename(&mut self, name: String) -> String;

    /// The greeter's own id, through its context.
    fn whoami(&self, ctx: &mut Context<Self>) -> actors::ActorId;

    /// Answers through `reply`, from a spawned task.
    fn later(&self, ctx: &mut Context<Self>, reply: Reply<String>);
}

#[interface]
pub trait Counted {
    fn count(&self) -> u64;
}

#[actor(mailbox = 2)]
struct English {
    name: String,
    greeted: u64,
}

#[actor(implements(Greeter, Counted))]
impl English {
    /// An ordinary handler next to the interfaces'.
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn hold(&mut self, gate: futures::channel::oneshot::Receiver<()>) {
        let _ = gate.await;
    }
}

#[actor]
impl Greeter for English {
    fn greet(&self, name: String) -> String {
        format!("hello {name}, I am {}", self.name)
    }

    async fn rename(&mut self, name: String) -> String {
        std::mem::replace(&mut self.name, name)
    }

    fn whoami(&self, ctx: &mut Context<Self>) -> actors::ActorId {
        ctx.id()
    }

    fn later(&self, ctx: &mut Context<Self>, reply: Reply<String>) {
        let text = format!("later from {}", self.name);
        drop(
            ctx.runtime()
                .clone()
                .spawn(move |_| async move { reply.send(text) }),
        );
    }
}

#[actor]
impl Counted for English {
    fn count(&self) -> u64 {
        self.greeted
    }
}

#[actor(dedicated)]
struct French {
    greeted: u64,
}

#[actor(implements(Greeter))]
impl French {}

#[actor]
impl Greeter for French {
    fn greet(&self, name: String) -> String {
        format!("bonjour {name}")
    }

    async fn rename(&mut self, _name: String) -> String {
        "anonyme".into()
    }

    fn whoami(&self, ctx: &mut Context<Self>) -> actors::ActorId {
        ctx.id()
    }

    fn later(&self, _ctx: &mut Context<Self>, reply: Reply<String>) {
        // Dropped unanswered: the ask sees `Closed`.
        drop(reply);
        let _ = self.greeted;
    }
}

fn english(context: &runtime::Context) -> EnglishRef {
    English {
        name: "Ann".into(),
        greeted: 7,
    }
    .spawn(context)
}

/// Two actor types behind one interface ref: asks, tells and `try_` forms reach each, with
/// the same replies as its typed ref would give.
#[runtime::test(timeout = "20s")]
async fn two_actor_types_answer_through_one_interface_ref(context: runtime::Context) {
    let ann = english(&context);
    let french = French { greeted: 0 }.spawn(&context);
    let greeters: Vec<GreeterRef> = vec![ann.clone().into(), french.clone().into()];
    let mut greetings = Vec::new();
    for greeter in &greeters {
        greetings.push(greeter.greet("Bo".into()).await.unwrap());
    }
    assert_eq!(greetings, ["hello Bo, I am Ann", "bonjour Bo"]);
    assert_eq!(greeters[0].id(), ann.id());
    assert_eq!(greeters[1].id(), french.id());
    assert_eq!(greeters[0].whoami().await, Ok(ann.id()));
    assert_eq!(greeters[1].whoami().await, Ok(french.id()));
    // An async handler, then the typed ref sees its effect: one actor, one mailbox order.
    assert_eq!(greeters[0].rename("Cy".into()).await, Ok("Ann".to_string()));
    greeters[0].tell_rename("Di".into()).await.unwrap();
    assert_eq!(ann.name().await, Ok("Di".to_string()));
    assert_eq!(
        greeters[1].rename("x".into()).await,
        Ok("anonyme".to_string())
    );
    // Delegated replies through the interface: answered elsewhere, or dropped.
    assert_eq!(greeters[0].later().await, Ok("later from Di".to_string()));
    assert_eq!(greeters[1].later().await, Err(Error::Closed));
}

/// An actor behind two interfaces and its typed ref takes messages from all three in one
/// mailbox: a full mailbox is full for each, and `try_` through the interface says so.
#[runtime::test(timeout = "20s")]
async fn interfaces_share_the_actors_mailbox(context: runtime::Context) {
    let ann = english(&context);
    let greeter = GreeterRef::from(ann.clone());
    let counted = CountedRef::from(ann.clone());
    assert_eq!(counted.count().await, Ok(7));
    let (open, gate) = futures::channel::oneshot::channel();
    ann.tell_hold(gate).await.unwrap();
    // The holder is being handled (or still queued, holding a slot): the rest fills up.
    let mut queued = 0;
    while greeter.try_greet("x".into()).is_ok() {
        queued += 1;
        assert!(queued <= 2, "the mailbox holds two");
    }
    assert!(queued >= 1, "one slot at least was free");
    assert_eq!(greeter.try_greet("x".into()), Err(Error::Full));
    assert_eq!(counted.try_count(), Err(Error::Full));
    open.send(()).unwrap();
    assert_eq!(counted.count().await, Ok(7));
    // Deadlines through an interface ref.
    let (open, gate) = futures::channel::oneshot::channel();
    ann.tell_hold(gate).await.unwrap();
    let late = greeter
        .greet("late".into())
        .timeout(Duration::from_millis(20))
        .await;
    assert_eq!(late, Err(Error::Timeout));
    open.send(()).unwrap();
    assert_eq!(
        greeter.greet("on time".into()).await,
        Ok("hello on time, I am Ann".to_string())
    );
}

/// An interface ref keeps its actor reachable like a ref, and `stop` and `join` work
/// through it.
#[runtime::test(timeout = "20s")]
async fn an_interface_ref_keeps_its_actor_and_stops_it(context: runtime::Context) {
    let ann = english(&context);
    let greeter = GreeterRef::from(ann.clone());
    let id = ann.id();
    drop(ann);
    // Still reachable through the interface ref alone.
    assert!(greeter.greet("Ed".into()).await.is_ok());
    assert_eq!(greeter.stop().await, ExitReason::Stopped);
    assert!(greeter.is_closed());
    assert_eq!(greeter.greet("Ed".into()).await, Err(Error::Closed));
    assert_eq!(greeter.id(), id);
}

/// The last interface ref dropped lets the actor end, as the last typed ref does.
#[runtime::test(timeout = "20s")]
async fn dropping_the_last_interface_ref_ends_the_actor(context: runtime::Context) {
    let ann = english(&context);
    let join = ann.join();
    let greeter = GreeterRef::from(ann);
    drop(greeter);
    assert_eq!(join.await, ExitReason::Normal);
}

/// A recipient is one handler of one actor with the actor's type erased: asks, tells and
/// `try_` through it; it keeps the actor reachable; once the actor ends it reports `Closed`.
#[runtime::test(timeout = "20s")]
async fn recipients_reach_one_handler_and_outlive_their_actor(context: runtime::Context) {
    #[actor]
    struct Adder {
        total: u64,
    }

    #[actor]
    impl Adder {
        fn add(&mut self, by: u64) -> u64 {
            self.total += by;
            self.total
        }

        fn add_both(&mut self, a: u64, b: u64) -> u64 {
            self.total += a + b;
            self.total
        }

        fn total(&self) -> u64 {
            self.total
        }
    }

    let adder = Adder { total: 0 }.spawn(&context);
    let add: Recipient<u64, u64> = adder.add_recipient();
    let both: Recipient<(u64, u64), u64> = adder.add_both_recipient();
    let total: Recipient<(), u64> = adder.total_recipient();
    assert_eq!(add.ask(2).await, Ok(2));
    assert_eq!(both.ask((3, 4)).await, Ok(9));
    add.tell(1).await.unwrap();
    add.try_tell(1).unwrap();
    assert_eq!(total.ask(()).await, Ok(11));
    assert_eq!(add.id(), adder.id());
    // The recipients keep it reachable after the typed ref is gone; the last one dropped
    // lets it end.
    let join = adder.join();
    drop(adder);
    assert_eq!(add.ask(1).await, Ok(12));
    drop((both, total));
    let last = add.clone();
    drop(add);
    assert_eq!(last.ask(0).await, Ok(12));
    drop(last);
    assert_eq!(join.await, ExitReason::Normal);
}

/// A recipient kept after its actor stopped reports `Closed` and never hangs.
#[runtime::test(timeout = "20s")]
async fn a_recipient_of_a_stopped_actor_reports_closed(context: runtime::Context) {
    #[actor]
    struct Echo;

    #[actor]
    impl Echo {
        fn echo(&self, text: String) -> String {
            text
        }
    }

    let echo = Echo.spawn(&context);
    let recipient = echo.echo_recipient();
    assert_eq!(recipient.ask("a".into()).await, Ok("a".to_string()));
    assert_eq!(echo.stop().await, ExitReason::Stopped);
    assert!(recipient.is_closed());
    assert_eq!(recipient.ask("b".into()).await, Err(Error::Closed));
    assert_eq!(recipient.tell("c".into()).await, Err(Error::Closed));
    assert_eq!(recipient.try_tell("d".into()), Err(Error::Closed));
}

/// Sends through an interface ref wait for room as typed ones do: a waiting ask whose
/// deadline passes leaves the waiters, and the next waiter still gets the room when it
/// appears.
#[runtime::test(timeout = "20s")]
async fn sends_through_an_interface_ref_wait_for_room(context: runtime::Context) {
    let ann = english(&context);
    let greeter = GreeterRef::from(ann.clone());
    let (open, gate) = futures::channel::oneshot::channel();
    ann.tell_hold(gate).await.unwrap();
    while greeter.try_greet("fill".into()).is_ok() {}
    // Both wait for room: the ask first, then the tell.
    let mut ask = Box::pin(
        greeter
            .greet("late".into())
            .timeout(Duration::from_millis(20)),
    );
    assert!(futures::poll!(&mut ask).is_pending());
    let mut tell = Box::pin(greeter.tell_rename("Zed".into()));
    assert!(futures::poll!(&mut tell).is_pending());
    assert_eq!(ask.await, Err(Error::Timeout));
    // Room appears once the held handler returns: the tell, still waiting, gets in.
    open.send(()).unwrap();
    tell.await.unwrap();
    assert_eq!(ann.name().await, Ok("Zed".to_string()));
}

/// A monitor through an interface ref hears of the actor's end.
#[runtime::test(timeout = "20s")]
async fn a_monitor_through_an_interface_ref_hears_the_end(context: runtime::Context) {
    #[actor]
    struct Watcher {
        downs: Vec<(actors::ActorId, ExitReason)>,
    }

    #[actor]
    impl Watcher {
        fn watch(&mut self, ctx: &mut Context<Self>, target: GreeterRef) {
            ctx.monitor(&target);
        }

        fn on_down(&mut self, id: actors::ActorId, reason: ExitReason) {
            self.downs.push((id, reason));
        }

        fn downs(&self) -> Vec<(actors::ActorId, ExitReason)> {
            self.downs.clone()
        }
    }

    let ann = english(&context);
    let greeter = GreeterRef::from(ann.clone());
    let watcher = Watcher { downs: Vec::new() }.spawn(&context);
    watcher.watch(greeter.clone()).await.unwrap();
    assert_eq!(greeter.stop().await, ExitReason::Stopped);
    // The down notification was queued before the end was known: it comes before this ask.
    assert_eq!(
        watcher.downs().await,
        Ok(vec![(ann.id(), ExitReason::Stopped)])
    );
}

/// The handlers of the interfaces an actor implements are methods of its own ref, as of the
/// interface's ref: the ask (the actor ref's `Ask`, with `.timeout` and `.queued`), `tell_`,
/// `try_`, `forward_` and `_recipient`, with the same replies, through the one mailbox.
#[runtime::test(timeout = "20s")]
async fn interface_handlers_are_methods_of_the_actors_own_ref(context: runtime::Context) {
    let ann = english(&context);
    let greeter = GreeterRef::from(ann.clone());
    let ask: actors::Ask<'_, English, String> = ann.greet("Bo".into());
    assert_eq!(ask.await, greeter.greet("Bo".into()).await);
    assert_eq!(ann.whoami().await, Ok(ann.id()));
    assert_eq!(ann.count().await, Ok(7));
    assert_eq!(ann.later().await, Ok("later from Ann".to_string()));
    ann.tell_rename("Cy".into()).await.unwrap();
    assert_eq!(ann.rename("Di".into()).await, Ok("Cy".to_string()));
    let greet: Recipient<String, String> = ann.greet_recipient();
    assert_eq!(
        greet.ask("Ed".into()).await,
        Ok("hello Ed, I am Di".to_string())
    );
    // A full mailbox is full for the interface's methods too; deadlines and `queued`.
    let (open, gate) = futures::channel::oneshot::channel();
    ann.tell_hold(gate).await.unwrap();
    while ann.try_greet("fill".into()).is_ok() {}
    assert_eq!(ann.try_count(), Err(Error::Full));
    let late = ann
        .greet("late".into())
        .timeout(Duration::from_millis(20))
        .await;
    assert_eq!(late, Err(Error::Timeout));
    let mut queued = Box::pin(ann.count().queued());
    assert!(futures::poll!(&mut queued).is_pending(), "no room yet");
    // The interface ref's ask has `queued` too.
    let mut through_interface = Box::pin(greeter.greet("Fy".into()).queued());
    assert!(
        futures::poll!(&mut through_interface).is_pending(),
        "no room yet"
    );
    open.send(()).unwrap();
    let count = queued.await.unwrap();
    let greeting = through_interface.await.unwrap();
    assert_eq!(count.await, Ok(7));
    assert_eq!(greeting.await, Ok("hello Fy, I am Di".to_string()));
    // `forward_`: a delegated reply handed to the interface's handler through the typed ref.
    let relay = Relay { to: ann.clone() }.spawn(&context);
    assert_eq!(relay.relay().await, Ok("later from Di".to_string()));
}

#[actor]
struct Relay {
    to: EnglishRef,
}

#[actor]
impl Relay {
    async fn relay(&mut self, reply: Reply<String>) {
        let _ = self.to.forward_later(reply).await;
    }
}

/// A pool of an actor that implements an interface has the interface's methods too, routed
/// to a member like its own handlers, with the same ask.
#[runtime::test(timeout = "20s")]
async fn interface_handlers_are_methods_of_a_pool_ref(context: runtime::Context) {
    let pool: EnglishPoolRef = actors::Pool::new("english", 2, || English {
        name: "Po".into(),
        greeted: 3,
    })
    .spawn(&context)
    .await
    .unwrap()
    .into();
    let ask: actors::Ask<'_, English, String> = pool.greet("Bo".into());
    assert_eq!(ask.await, Ok("hello Bo, I am Po".to_string()));
    assert_eq!(
        pool.greet("Cy".into())
            .timeout(Duration::from_secs(60))
            .queued()
            .await
            .unwrap()
            .await,
        Ok("hello Cy, I am Po".to_string())
    );
    pool.tell_rename("Ro".into()).await.unwrap();
    pool.try_rename("Ro".into()).unwrap();
    // Each member was renamed once (round-robin), then answers with its new name.
    for member in pool.as_pool().all() {
        assert_eq!(member.name().await, Ok("Ro".to_string()));
    }
    assert_eq!(pool.count().await, Ok(3));
    assert_eq!(pool.later().await, Ok("later from Ro".to_string()));
    assert_eq!(pool.as_pool().stop().await, ExitReason::Stopped);
}
