//! Remote actors between nodes over a real `nats-server` on a free loopback port: the same
//! asks, tells and errors as local refs, shared names, deadlines, node failure, monitors and
//! topics. The nodes of a test share its process; `examples/tests/cluster.rs` runs nodes as
//! separate processes and kills one.

use actors::prelude::*;
use actors::remote::nats;
use actors::remote::nats::server::{Server, ServerBuilder};
use actors::remote::{Node, NodeOptions, Target};
use actors::{Error, ExitReason, Reply, Topic, WhenFull};
use futures::channel::oneshot;
use std::time::Duration;

/// A started server, or `None` (the test skips) when `nats-server` is not installed and
/// `.ci/run` did not require it.
fn server(builder: ServerBuilder) -> Option<Server> {
    builder.start_or_skip()
}

/// Quick heartbeats, so that a silent node is down within about half a second, with room for
/// a loaded machine's scheduling delays (five may be missed).
fn options(server: &Server, name: &str) -> NodeOptions {
    NodeOptions::new([server.url()], name)
        .unwrap()
        .with_heartbeat(Duration::from_millis(100), 5)
        .with_nats(|nats| {
            nats.with_reconnect_delay(Duration::from_millis(5), Duration::from_millis(50))
        })
}

/// A node named `name` joined through `server`, with the quick heartbeats of [`options`].
async fn join(context: &runtime::Context, server: &Server, name: &str) -> Node {
    Node::join_with(context, options(server, name))
        .await
        .expect("the node joins")
}

#[actor(mailbox = 4)]
struct Counter {
    total: u64,
    seen: Vec<u64>,
    held: Vec<Reply<u64>>,
    node: String,
}

impl Counter {
    fn new(node: &str) -> Self {
        Counter {
            total: 0,
            seen: Vec::new(),
            held: Vec::new(),
            node: node.to_string(),
        }
    }
}

#[actor(remote)]
impl Counter {
    /// Adds and returns the total.
    fn add(&mut self, by: u64) -> u64 {
        self.total += by;
        self.total
    }

    fn record(&mut self, value: u64) {
        self.seen.push(value);
    }

    fn seen(&self) -> Vec<u64> {
        self.seen.clone()
    }

    fn node(&self) -> String {
        self.node.clone()
    }

    fn echo(&self, bytes: Vec<u8>) -> Vec<u8> {
        bytes
    }

    fn boom(&mut self) -> u64 {
        panic!("boom on purpose")
    }

    /// Never answers while the actor runs (a delegated reply it keeps).
    fn hold(&mut self, reply: Reply<u64>) {
        self.held.push(reply);
    }

    /// Blocks the actor until `release` fires, so its mailbox fills.
    async fn block(&mut self, ctx: &mut actors::Context<Self>, millis: u64) {
        ctx.runtime().sleep(Duration::from_millis(millis)).await;
    }
}

#[runtime::test(timeout = "60s")]
async fn asks_tells_and_try_sends_reach_an_actor_on_another_node(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    let counter = Counter::new("serving").spawn(&context);
    serving.expose("counter", &counter).await.unwrap();
    let asking = join(&context, &server, "asking").await;
    let remote: CounterRemoteRef = asking.lookup("counter");
    assert_eq!(remote.target(), &Target::Name("counter".into()));
    assert_eq!(remote.add(2).await, Ok(2));
    remote.tell_add(3).await.unwrap();
    remote.try_add(5).unwrap();
    assert_eq!(remote.add(0).await, Ok(10));
    // Large arguments and replies travel whole.
    let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(remote.echo(bytes.clone()).await, Ok(bytes));
    // The actor one node exposes, by node.
    let direct: CounterRemoteRef = asking.lookup_on("serving", "counter");
    assert_eq!(direct.node().await.unwrap(), "serving");
    // The local ref sees what the remote ones did.
    assert_eq!(counter.add(0).await, Ok(10));
}

#[runtime::test(timeout = "60s")]
async fn messages_from_one_node_reach_the_actor_in_the_order_sent(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    #[actor(mailbox = 4096)]
    struct Log {
        seen: Vec<u64>,
    }
    #[actor(remote)]
    impl Log {
        fn record(&mut self, value: u64) {
            self.seen.push(value);
        }
        fn seen(&self) -> Vec<u64> {
            self.seen.clone()
        }
    }
    serving
        .expose("log", &Log { seen: Vec::new() }.spawn(&context))
        .await
        .unwrap();
    let asking = join(&context, &server, "asking").await;
    let log: LogRemoteRef = asking.lookup("log");
    for value in 0..2000 {
        log.tell_record(value).await.unwrap();
    }
    // The ask comes after every tell, on the same connection and subscription.
    let seen = log.seen().await.unwrap();
    assert_eq!(seen, (0..2000).collect::<Vec<_>>());
}

#[runtime::test(timeout = "60s", catch_panics = true)]
async fn remote_asks_fail_with_the_same_errors_as_local_ones(context: runtime::Context) {
    let Some(server) = server(Server::builder().max_payload(64 * 1024)) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    let counter = Counter::new("serving").spawn(&context);
    serving.expose("counter", &counter).await.unwrap();
    let asking = join(&context, &server, "asking").await;
    let remote: CounterRemoteRef = asking.lookup("counter");
    // A deadline that passes.
    assert_eq!(
        remote.hold().timeout(Duration::from_millis(30)).await,
        Err(Error::Timeout)
    );
    // Nobody exposes the name: at once, whatever the deadline.
    let nobody: CounterRemoteRef = asking.lookup("nobody");
    assert_eq!(
        nobody.add(1).timeout(Duration::from_secs(50)).await,
        Err(Error::NotExposed {
            name: "nobody".into()
        })
    );
    // A message larger than the server's max_payload: refused, with the reason.
    let error = remote.echo(vec![0; 100 * 1024]).await.unwrap_err();
    assert!(
        matches!(&error, Error::Remote(why) if why.contains("max_payload")),
        "{error}"
    );
    // A name that is not a subject.
    let bad: CounterRemoteRef = asking.lookup("a b");
    let error = bad.add(1).await.unwrap_err();
    assert!(
        matches!(&error, Error::Remote(why) if why.contains("not a valid actor name")),
        "{error}"
    );
    assert!(matches!(
        serving.expose("a..b", &counter).await,
        Err(Error::Remote(_))
    ));
    // Exposing one name twice on a node.
    assert!(matches!(
        serving.expose("counter", &counter).await,
        Err(Error::NameTaken { .. })
    ));
    // A panicking handler: the ask says so, naming the actor.
    assert_eq!(
        remote.boom().await,
        Err(Error::Panicked { actor: "counter" })
    );
}

#[runtime::test(timeout = "60s")]
async fn a_full_remote_mailbox_drops_and_counts_without_blocking_other_actors(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    let busy = Counter::new("serving").spawn(&context);
    let free = Counter::new("serving").spawn(&context);
    serving.expose("busy", &busy).await.unwrap();
    serving.expose("free", &free).await.unwrap();
    let asking = join(&context, &server, "asking").await;
    let busy_remote: CounterRemoteRef = asking.lookup("busy");
    let free_remote: CounterRemoteRef = asking.lookup("free");
    // Blocks the actor, then fills its mailbox of 4 and more.
    busy.tell_block(2_000).await.unwrap();
    for value in 0..20 {
        busy_remote.tell_record(value).await.unwrap();
    }
    // An ask behind them finds the mailbox full and says so at once.
    assert_eq!(busy_remote.add(1).await, Err(Error::Full));
    // The other actor on the same node and connection answers meanwhile.
    assert_eq!(free_remote.add(1).await, Ok(1));
    assert!(serving.dropped("full") >= 16, "{}", serving.dropped("full"));
}

#[runtime::test(timeout = "60s")]
async fn nodes_exposing_one_name_share_its_messages(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let first = join(&context, &server, "first").await;
    let second = join(&context, &server, "second").await;
    first
        .expose("worker", &Counter::new("first").spawn(&context))
        .await
        .unwrap();
    second
        .expose("worker", &Counter::new("second").spawn(&context))
        .await
        .unwrap();
    let asking = join(&context, &server, "asking").await;
    let worker: CounterRemoteRef = asking.lookup("worker");
    let mut served = std::collections::HashMap::new();
    for _ in 0..400 {
        *served.entry(worker.node().await.unwrap()).or_insert(0) += 1;
    }
    assert_eq!(served.len(), 2, "both nodes served: {served:?}");
    assert_eq!(served.values().sum::<i32>(), 400);
}

#[runtime::test(timeout = "60s")]
async fn a_node_that_goes_silent_fails_pending_asks_and_fires_monitors(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let asking = join(&context, &server, "asking").await;
    // The serving node lives in a task of its own: when the task ends, its connection and
    // heartbeats stop without a goodbye, as a killed process's would.
    let (exposed, wait_exposed) = oneshot::channel();
    let (end, ended) = oneshot::channel::<()>();
    let url = server.url();
    let serving_task = context.clone().spawn(move |context| async move {
        let options = NodeOptions::new([url], "doomed")
            .unwrap()
            .with_heartbeat(Duration::from_millis(100), 5);
        let node = Node::join_with(&context, options).await.unwrap();
        node.expose("doomed", &Counter::new("doomed").spawn(&context))
            .await
            .unwrap();
        exposed.send(()).unwrap();
        let _ = ended.await;
    });
    wait_exposed.await.unwrap();
    asking
        .wait_for_peer("doomed", Duration::from_secs(10))
        .await
        .unwrap();
    let by_name: CounterRemoteRef = asking.lookup("doomed");
    let by_node: CounterRemoteRef = asking.lookup_on("doomed", "doomed");
    let name_monitor = by_name.monitor();
    let node_monitor = by_node.monitor();
    // Taken by the actor, never answered while it runs; the deadline is far.
    let mut pending = std::pin::pin!(by_name.hold().timeout(Duration::from_secs(50)));
    assert!(futures::poll!(pending.as_mut()).is_pending());
    assert_eq!(by_node.add(1).await, Ok(1));
    end.send(()).unwrap();
    serving_task.await.unwrap();
    assert_eq!(
        pending.await,
        Err(Error::NodeDown {
            node: "doomed".into()
        })
    );
    let down = ExitReason::NodeDown {
        node: "doomed".into(),
    };
    assert_eq!(node_monitor.await, down);
    assert_eq!(name_monitor.await, down);
    assert!(asking.peers().is_empty());
}

#[runtime::test(timeout = "60s")]
async fn a_monitor_reports_the_remote_actors_exit_reason(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    let counter = Counter::new("serving").spawn(&context);
    serving.expose("counter", &counter).await.unwrap();
    let asking = join(&context, &server, "asking").await;
    asking
        .wait_for_peer("serving", Duration::from_secs(10))
        .await
        .unwrap();
    let remote: CounterRemoteRef = asking.lookup_on("serving", "counter");
    let monitor = remote.monitor();
    assert_eq!(remote.add(1).await, Ok(1));
    assert_eq!(counter.stop().await, ExitReason::Stopped);
    assert_eq!(monitor.await, ExitReason::Stopped);
    assert!(serving.exposed().is_empty());
}

#[runtime::test(timeout = "60s")]
async fn a_node_name_is_unique_in_the_cluster(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let _first = join(&context, &server, "only").await;
    let error = Node::join_with(&context, options(&server, "only"))
        .await
        .unwrap_err();
    assert_eq!(error, actors::remote::JoinError::NameTaken("only".into()));
    let error = NodeOptions::new([server.url()], "not valid").unwrap_err();
    assert!(
        error.to_string().contains("not a valid node name"),
        "{error}"
    );
}

#[runtime::test(timeout = "60s")]
async fn a_spanning_topic_reaches_subscribers_on_every_node(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    #[actor]
    struct Inbox {
        got: Vec<String>,
    }
    #[actor]
    impl Inbox {
        fn deliver(&mut self, text: String) {
            self.got.push(text);
        }
        fn got(&self) -> Vec<String> {
            self.got.clone()
        }
    }
    let mut inboxes = Vec::new();
    let mut spans = Vec::new();
    for name in ["a", "b"] {
        let node = join(&context, &server, name).await;
        let topic = Topic::<String>::new(&context, "room", WhenFull::Wait);
        let inbox = Inbox { got: Vec::new() }.spawn(&context);
        topic.subscribe(inbox.deliver_recipient());
        spans.push(node.span_topic("room.lobby", &topic).await.unwrap());
        inboxes.push(inbox);
    }
    spans[0].publish(&"hello".to_string()).await.unwrap();
    spans[1].publish(&"world".to_string()).await.unwrap();
    for inbox in &inboxes {
        // Each node's topic got both, from the subscription that delivers in order per
        // publisher; wait for both to arrive.
        loop {
            let got = inbox.got().await.unwrap();
            if got.len() == 2 {
                assert!(got.contains(&"hello".to_string()) && got.contains(&"world".to_string()));
                break;
            }
            assert!(got.len() < 2, "{got:?}");
            runtime::reschedule().await;
        }
    }
}

/// An ask in flight when the NATS server restarts may or may not have reached its node, so
/// it is not failed at the disconnect: it resolves `Timeout` at its deadline, after which it
/// can no longer start anywhere (a retry then cannot run it twice).
#[runtime::test(timeout = "60s")]
async fn an_ask_in_flight_across_a_server_restart_times_out_at_its_deadline_and_later_ones_succeed(
    context: runtime::Context,
) {
    let Some(mut server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    serving
        .expose("counter", &Counter::new("serving").spawn(&context))
        .await
        .unwrap();
    let asking = join(&context, &server, "asking").await;
    let remote: CounterRemoteRef = asking.lookup("counter");
    assert_eq!(remote.add(1).await, Ok(1));
    let mut pending = std::pin::pin!(remote.hold().timeout(Duration::from_secs(2)));
    assert!(futures::poll!(pending.as_mut()).is_pending());
    asking.client().flush().await.unwrap();
    server.restart().unwrap();
    assert_eq!(pending.await, Err(Error::Timeout));
    // Both nodes reconnect and resubscribe by themselves; the first asks after the restart
    // may find the serving node not back yet (not exposed), never a hang.
    loop {
        match remote.add(1).timeout(Duration::from_secs(5)).await {
            Ok(total) => {
                assert!(total >= 2);
                break;
            }
            // The nodes may also have judged each other down while reconnecting.
            Err(Error::NotExposed { .. } | Error::Remote(_) | Error::NodeDown { .. }) => {
                runtime::reschedule().await
            }
            Err(other) => panic!("{other}"),
        }
    }
}

#[runtime::test(timeout = "60s")]
async fn a_node_that_leaves_is_down_for_its_peers_at_once(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "leaving").await;
    serving
        .expose("counter", &Counter::new("leaving").spawn(&context))
        .await
        .unwrap();
    let asking = join(&context, &server, "staying").await;
    asking
        .wait_for_peer("leaving", Duration::from_secs(10))
        .await
        .unwrap();
    let remote: CounterRemoteRef = asking.lookup_on("leaving", "counter");
    let monitor = remote.monitor();
    let mut pending = std::pin::pin!(remote.hold().timeout(Duration::from_secs(50)));
    assert!(futures::poll!(pending.as_mut()).is_pending());
    assert_eq!(remote.add(1).await, Ok(1));
    // The leaving node's own waiters end too.
    let own: CounterRemoteRef = serving.lookup_on("staying", "nothing");
    let own_monitor = own.monitor();
    serving.clone().leave().await;
    assert_eq!(own_monitor.await, ExitReason::Shutdown);
    let down = Error::NodeDown {
        node: "leaving".into(),
    };
    assert_eq!(pending.await, Err(down));
    assert_eq!(
        monitor.await,
        ExitReason::NodeDown {
            node: "leaving".into()
        }
    );
    assert!(asking.peers().is_empty());
    // Asks and monitors made later for the node known down resolve at once, not at their
    // deadline (an hour: only the rule can end them within the test's timeout).
    let down = Error::NodeDown {
        node: "leaving".into(),
    };
    assert_eq!(
        remote.add(1).timeout(Duration::from_secs(3600)).await,
        Err(down.clone())
    );
    let fresh: CounterRemoteRef = asking.lookup_on("leaving", "counter");
    assert_eq!(
        fresh.add(1).timeout(Duration::from_secs(3600)).await,
        Err(down)
    );
    assert_eq!(
        fresh.monitor().await,
        ExitReason::NodeDown {
            node: "leaving".into()
        }
    );
    // Asks from a node that has left fail at once.
    let gone: CounterRemoteRef = serving.lookup("counter");
    assert_eq!(gone.add(1).await, Err(Error::Closed));
}

/// A name whose holder does not answer its name check (a process that died while its
/// connection lingers, or one cut off) is taken over once a whole silence has passed without
/// an answer: an immediate restart under the same name is not refused.
#[runtime::test(timeout = "60s")]
async fn a_name_whose_holder_never_answers_is_taken_over_after_a_silence(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    // A client that holds the name's control subject and never answers.
    let zombie = nats::Client::connect(&context, nats::Options::new([server.url()]).unwrap())
        .await
        .unwrap();
    let _held = zombie.subscribe("actors.node.restarted").unwrap();
    zombie.flush().await.unwrap();
    let node = join(&context, &server, "restarted").await;
    assert_eq!(node.name(), "restarted");
    // A live holder answers: the name is taken.
    let error = Node::join_with(&context, options(&server, "restarted"))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        actors::remote::JoinError::NameTaken("restarted".into())
    );
}

#[runtime::test(timeout = "60s")]
async fn a_withdrawn_name_is_no_longer_served_and_its_monitors_resolve(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let serving = join(&context, &server, "serving").await;
    let counter = Counter::new("serving").spawn(&context);
    serving.expose("counter", &counter).await.unwrap();
    let asking = join(&context, &server, "asking").await;
    asking
        .wait_for_peer("serving", Duration::from_secs(10))
        .await
        .unwrap();
    let remote: CounterRemoteRef = asking.lookup("counter");
    assert_eq!(remote.add(1).await, Ok(1));
    let monitor = remote.monitor();
    // An ask taken before the withdrawal (queued behind a busy handler) is still answered:
    // its asker is not told `Closed` for an ask that then runs. (Had it not reached the node
    // before the withdrawal, it would time out; never `Closed`.)
    counter.tell_block(300).await.unwrap();
    let taken = context.clone().spawn({
        let remote = remote.clone();
        move |_| async move { remote.add(1).timeout(Duration::from_secs(10)).await }
    });
    while asking.client().__pending_requests() == 0 {
        runtime::reschedule().await;
    }
    asking.client().flush().await.unwrap();
    assert!(serving.withdraw("counter").await);
    assert!(!serving.withdraw("counter").await);
    let taken = taken.await.unwrap();
    assert!(matches!(taken, Ok(2) | Err(Error::Timeout)), "{taken:?}");
    assert_eq!(monitor.await, ExitReason::Shutdown);
    // Once withdrawn, the name is served nowhere.
    assert_eq!(
        remote.add(1).await,
        Err(Error::NotExposed {
            name: "counter".into()
        })
    );
    // Exposed again, under the same name: served again.
    serving.expose("counter", &counter).await.unwrap();
    assert!(remote.add(1).await.unwrap() >= 2);
}

#[runtime::test(timeout = "60s")]
async fn a_monitor_of_nothing_resolves_not_found(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let node = join(&context, &server, "alone").await;
    let by_name: CounterRemoteRef = node.lookup("nobody");
    let by_node: CounterRemoteRef = node.lookup_on("nowhere", "nobody");
    assert_eq!(by_name.monitor().await, ExitReason::NotFound);
    assert_eq!(by_node.monitor().await, ExitReason::NotFound);
    // A node name with a dot would address another node's actor: refused.
    let dotted: CounterRemoteRef = node.lookup_on("a.b", "c");
    let error = dotted.add(1).await.unwrap_err();
    assert!(
        matches!(&error, Error::Remote(why) if why.contains("not a valid node name")),
        "{error}"
    );
}

#[runtime::test(timeout = "60s")]
async fn a_node_with_other_handlers_refuses_messages_rather_than_run_the_wrong_one(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    // Another actor under the same name stands for another version of `Counter`.
    #[actor]
    struct Impostor;
    #[actor(remote)]
    impl Impostor {
        fn add(&mut self, by: u64) -> u64 {
            by * 1000
        }
    }
    let serving = join(&context, &server, "serving").await;
    serving
        .expose("counter", &Impostor.spawn(&context))
        .await
        .unwrap();
    let asking = join(&context, &server, "asking").await;
    let remote: CounterRemoteRef = asking.lookup("counter");
    let error = remote.add(1).await.unwrap_err();
    assert!(
        matches!(&error, Error::Remote(why) if why.contains("other handlers")),
        "{error}"
    );
    assert_eq!(serving.dropped("decode"), 1);
}

#[interface(remote)]
pub trait Greeter {
    fn greet(&mut self, name: String) -> String;
    fn greeted(&self) -> u64;
}

#[actor]
pub struct English {
    greeted: u64,
}

#[actor(implements(Greeter))]
impl English {}

#[actor]
impl Greeter for English {
    fn greet(&mut self, name: String) -> String {
        self.greeted += 1;
        format!("hello {name}")
    }

    fn greeted(&self) -> u64 {
        self.greeted
    }
}

#[actor]
pub struct French;

#[actor(implements(Greeter))]
impl French {}

#[actor]
impl Greeter for French {
    fn greet(&mut self, name: String) -> String {
        format!("bonjour {name}")
    }

    fn greeted(&self) -> u64 {
        0
    }
}

#[runtime::test(timeout = "60s")]
async fn a_remote_interface_reaches_whichever_actor_stands_behind_it(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let london = join(&context, &server, "london").await;
    let paris = join(&context, &server, "paris").await;
    let english: GreeterRef = English { greeted: 0 }.spawn(&context).into();
    let french: GreeterRef = French.spawn(&context).into();
    london.expose("greeter", &english).await.unwrap();
    paris.expose("greeter", &french).await.unwrap();
    let asking = join(&context, &server, "asking").await;
    // One node's: the same methods as the local interface ref.
    let in_london: GreeterRemoteRef = asking.lookup_on("london", "greeter");
    assert_eq!(in_london.greet("Ann".into()).await, Ok("hello Ann".into()));
    in_london.tell_greet("Bob".into()).await.unwrap();
    in_london.try_greet("Cid".into()).unwrap();
    assert_eq!(in_london.greeted().await, Ok(3));
    let in_paris: GreeterRemoteRef = asking.lookup_on("paris", "greeter");
    assert_eq!(in_paris.greet("Ann".into()).await, Ok("bonjour Ann".into()));
    // The shared name: both implementations answer, each message once.
    let anywhere: GreeterRemoteRef = asking.lookup("greeter");
    let mut answers = std::collections::HashSet::new();
    for _ in 0..200 {
        answers.insert(anywhere.greet("Eve".into()).await.unwrap());
    }
    assert_eq!(
        answers,
        ["hello Eve".to_string(), "bonjour Eve".to_string()].into()
    );
    // A remote actor ref of another protocol under the name is refused, not misread.
    let wrong: CounterRemoteRef = asking.lookup_on("london", "greeter");
    let error = wrong.add(1).await.unwrap_err();
    assert!(
        matches!(&error, Error::Remote(why) if why.contains("other handlers")),
        "{error}"
    );
    assert_eq!(london.dropped("decode"), 1);
    // The exposure ends with the actor behind the interface ref.
    asking
        .wait_for_peer("paris", Duration::from_secs(10))
        .await
        .unwrap();
    let monitor = in_london.monitor();
    assert_eq!(english.stop().await, ExitReason::Stopped);
    assert_eq!(monitor.await, ExitReason::Stopped);
    assert!(london.exposed().is_empty());
    assert_eq!(asking.exposed_by("greeter"), ["paris"]);
}

#[runtime::test(timeout = "60s")]
async fn a_reply_sent_as_the_actor_stops_reaches_the_asker_before_its_end(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    #[actor]
    struct Once;
    #[actor(remote)]
    impl Once {
        fn finish(&mut self, ctx: &mut actors::Context<Self>) -> u64 {
            ctx.stop();
            7
        }
    }
    let serving = join(&context, &server, "serving").await;
    let asking = join(&context, &server, "asking").await;
    asking
        .wait_for_peer("serving", Duration::from_secs(10))
        .await
        .unwrap();
    for round in 0..20 {
        let name = format!("once{round}");
        serving.expose(&name, &Once.spawn(&context)).await.unwrap();
        let once: OnceRemoteRef = asking.lookup_on("serving", &name);
        assert_eq!(once.finish().await, Ok(7), "round {round}");
    }
}

/// A node whose NATS user may not publish to a subject gets an error that names the
/// operation and subject for an ask that needs it, at once rather than at its deadline.
#[runtime::test(timeout = "60s")]
async fn an_ask_the_servers_permissions_forbid_fails_at_once_naming_the_permission(
    context: runtime::Context,
) {
    // `limited` may run a node (its own membership subjects, inboxes, name checks) but not
    // send to actors.
    let Some(server) = server(Server::builder().config(
        "authorization { users = [ \
         { user: full, password: full }, \
         { user: limited, password: limited, permissions: { \
           publish: { allow: [\"actors.announce.limited\", \"actors.alive.limited\", \
                               \"actors.node.>\", \"_INBOX.>\"] }, \
           subscribe: { allow: [\">\"] } } } ] }",
    )) else {
        return;
    };
    let url = |user: &str| format!("nats://{user}:{user}@127.0.0.1:{}", server.port());
    let node = |name: &str, user: &str| {
        NodeOptions::new([url(user)], name)
            .unwrap()
            .with_heartbeat(Duration::from_millis(100), 5)
    };
    let serving = Node::join_with(&context, node("serving", "full"))
        .await
        .unwrap();
    serving
        .expose("counter", &Counter::new("serving").spawn(&context))
        .await
        .unwrap();
    let limited = Node::join_with(&context, node("limited", "limited"))
        .await
        .unwrap();
    let remote: CounterRemoteRef = limited.lookup("counter");
    // An hour's deadline: only the violation can end it within the test's timeout.
    let error = remote
        .add(1)
        .timeout(Duration::from_secs(3600))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(error, Error::Remote(_))
            && text.contains("publish")
            && text.contains("actors.a.counter"),
        "{text}"
    );
}

/// With a shared secret, forged membership messages (a live node's departure, a newer
/// incarnation of it, a heartbeat of an unknown node) change nothing: the node stays up and
/// its actor answers, and no peer appears; without the secret the same peers still work.
#[runtime::test(timeout = "60s")]
async fn with_a_secret_forged_membership_messages_change_nothing(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let secret = "a secret every node of this cluster shares";
    let serving = Node::join_with(&context, options(&server, "serving").with_secret(secret))
        .await
        .unwrap();
    serving
        .expose("counter", &Counter::new("serving").spawn(&context))
        .await
        .unwrap();
    let asking = Node::join_with(&context, options(&server, "asking").with_secret(secret))
        .await
        .unwrap();
    asking
        .wait_for_peer("serving", Duration::from_secs(10))
        .await
        .unwrap();
    let monitor = asking
        .lookup_on::<CounterRemoteRef>("serving", "counter")
        .monitor();
    let mut monitor = std::pin::pin!(monitor);
    // A forger with the same subjects but not the secret: it copies what it sees.
    let forger = nats::Client::connect(&context, nats::Options::new([server.url()]).unwrap())
        .await
        .unwrap();
    let mut seen = forger.subscribe("actors.announce.serving").unwrap();
    let genuine = seen.next().await.unwrap();
    for round in 0..50u8 {
        // Replayed as is, altered, truncated, and garbage.
        forger
            .publish("actors.announce.serving", &genuine.payload)
            .await
            .unwrap();
        let mut altered = genuine.payload.to_vec();
        let at = usize::from(round) % altered.len();
        altered[at] ^= 0x55;
        forger
            .publish("actors.announce.serving", altered)
            .await
            .unwrap();
        forger
            .publish(
                "actors.alive.serving",
                &genuine.payload[..genuine.payload.len() / 2],
            )
            .await
            .unwrap();
        forger
            .publish(&format!("actors.announce.fake{round}"), &genuine.payload)
            .await
            .unwrap();
    }
    forger.flush().await.unwrap();
    // 150 forgeries: 50 altered, 50 cut short, 50 on another node's subject (the 50 replays
    // are `replayed`).
    while asking.dropped("forged") < 150 {
        runtime::reschedule().await;
    }
    // Still up and answering; no peer was added; the monitor did not fire.
    let remote: CounterRemoteRef = asking.lookup_on("serving", "counter");
    assert_eq!(remote.add(1).await, Ok(1));
    assert_eq!(asking.peers(), ["serving"]);
    assert!(futures::poll!(monitor.as_mut()).is_pending());
    assert!(asking.dropped("replayed") >= 1);
}

/// A node that may not subscribe to its cluster's membership subjects is refused at join,
/// naming the subject, rather than joining deaf; an exposure the permissions forbid fails and
/// is not listed.
#[runtime::test(timeout = "60s")]
async fn subscriptions_the_permissions_forbid_fail_the_join_or_the_exposure(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder().config(
        "authorization { users = [ \
         { user: deaf, password: deaf, permissions: { subscribe: { deny: [\"actors.alive.*\"] } } }, \
         { user: shy, password: shy, permissions: { subscribe: { deny: [\"actors.a.hidden\"] } } } ] }",
    )) else {
        return;
    };
    let url = |user: &str| format!("nats://{user}:{user}@127.0.0.1:{}", server.port());
    let error = Node::join_with(&context, NodeOptions::new([url("deaf")], "deaf").unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        error,
        actors::remote::JoinError::Nats(nats::Error::PermissionDenied {
            operation: "subscribe".into(),
            subject: "actors.alive.*".into(),
        })
    );
    let shy = Node::join_with(&context, NodeOptions::new([url("shy")], "shy").unwrap())
        .await
        .unwrap();
    let error = shy
        .expose("hidden", &Counter::new("shy").spawn(&context))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("subscribe") && error.to_string().contains("actors.a.hidden"),
        "{error}"
    );
    assert!(shy.exposed().is_empty());
    shy.expose("shown", &Counter::new("shy").spawn(&context))
        .await
        .unwrap();
    assert_eq!(shy.exposed(), ["shown"]);
}
