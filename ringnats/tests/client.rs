//! The client against a real `nats-server` on a free loopback port: publish and subscribe,
//! queue groups, request-reply, limits, credentials, and what happens when the server dies.

mod common;

use common::{options, server};
use futures::StreamExt;
use ringnats::server::Server;
use ringnats::{Client, Error, Event, Headers};
use runtime::prelude::*;
use std::time::Duration;

#[runtime::test(timeout = "60s")]
async fn messages_from_one_publisher_arrive_whole_and_in_order(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let (options, _events) = options(&server.url());
    let client = Client::connect(&context, options).await.unwrap();
    let mut subscription = client.subscribe("orders.*").unwrap();
    client.flush().await.unwrap();
    let publisher = Client::connect(&context, common::options(&server.url()).0)
        .await
        .unwrap();
    // Many small messages, queued without waiting for each other, then a large binary one.
    for index in 0..10_000u32 {
        publisher
            .publish(&format!("orders.{}", index % 7), index.to_le_bytes())
            .await
            .unwrap();
    }
    let large: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
    publisher.publish("orders.large", &large).await.unwrap();
    for index in 0..10_000u32 {
        let message = subscription.next().await.unwrap();
        assert_eq!(message.subject, format!("orders.{}", index % 7));
        assert_eq!(&message.payload[..], index.to_le_bytes());
    }
    let message = subscription.next().await.unwrap();
    assert_eq!(message.payload, large);
    assert_eq!(subscription.dropped(), 0);
}

#[runtime::test(timeout = "60s")]
async fn a_queue_group_shares_messages_between_its_members_without_duplicates(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let first = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let second = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let [a, b] = [
        first.queue_subscribe("work", "workers").unwrap(),
        second.queue_subscribe("work", "workers").unwrap(),
    ];
    first.flush().await.unwrap();
    second.flush().await.unwrap();
    for index in 0..1000u32 {
        first.publish("work", index.to_le_bytes()).await.unwrap();
    }
    let mut both = futures::stream::select(a.map(|m| (0, m)), b.map(|m| (1, m)));
    let mut seen = vec![0u8; 1000];
    let mut counts = [0usize; 2];
    for _ in 0..1000 {
        let (member, message) = both.next().await.unwrap();
        let index = u32::from_le_bytes(message.payload[..].try_into().unwrap());
        seen[index as usize] += 1;
        counts[member] += 1;
    }
    assert!(seen.iter().all(|&n| n == 1), "every message exactly once");
    assert!(
        counts.iter().all(|&n| n > 0),
        "both members got work: {counts:?}"
    );
}

#[runtime::test(timeout = "60s")]
async fn requests_get_their_reply_and_no_responders_fail_at_once(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let mut service = client.subscribe("double").unwrap();
    let responder = client.clone();
    let _responder = context.clone().spawn(move |_| async move {
        while let Some(request) = service.next().await {
            let value = u64::from_le_bytes(request.payload[..].try_into().unwrap());
            let reply = request.reply.unwrap();
            responder
                .publish(&reply, (value * 2).to_le_bytes())
                .await
                .unwrap();
        }
    });
    client.flush().await.unwrap();
    for value in [1u64, 21, 1 << 40] {
        let answer = client.request("double", value.to_le_bytes()).await.unwrap();
        assert_eq!(&answer.payload[..], (value * 2).to_le_bytes());
    }
    // Nobody listens: the server says so at once (a timeout would be `Error::Timeout`).
    let error = client
        .request_with_timeout("nobody.home", b"?", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        Error::NoResponders {
            subject: "nobody.home".into()
        }
    );
    // A responder that never answers: the request times out, and nothing leaks.
    let _silent = client.subscribe("silent").unwrap();
    client.flush().await.unwrap();
    let error = client
        .request_with_timeout("silent", b"?", Duration::from_millis(50))
        .await
        .unwrap_err();
    assert_eq!(error, Error::Timeout(Duration::from_millis(50)));
    // A request whose future is dropped before its answer leaves nothing behind.
    {
        let mut dropped = std::pin::pin!(client.request("silent", b"?"));
        assert!(futures::poll!(dropped.as_mut()).is_pending());
        assert_eq!(client.__pending_requests(), 1);
    }
    assert_eq!(client.__pending_requests(), 0);
}

#[runtime::test(timeout = "60s")]
async fn headers_travel_with_the_message(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let mut subscription = client.subscribe("traced").unwrap();
    let mut headers = Headers::new();
    headers.insert("Trace-Id", "abc 123").insert("Node", "n1");
    client
        .publish_with_headers("traced", Some("answer.here"), &headers, b"body")
        .await
        .unwrap();
    let message = subscription.next().await.unwrap();
    assert_eq!(&message.payload[..], b"body");
    assert_eq!(message.reply.as_deref(), Some("answer.here"));
    let received = Headers::parse(message.headers.as_ref().unwrap()).unwrap();
    assert_eq!(received.get("Trace-Id"), Some("abc 123"));
    assert_eq!(received.get("Node"), Some("n1"));
}

#[runtime::test(timeout = "60s")]
async fn a_message_above_the_servers_max_payload_is_refused_and_the_connection_goes_on(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder().max_payload(1024)) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    assert_eq!(client.max_payload(), 1024);
    let mut subscription = client.subscribe("limits").unwrap();
    let error = client.publish("limits", vec![0u8; 1025]).await.unwrap_err();
    assert_eq!(
        error,
        Error::TooLarge {
            size: 1025,
            max_payload: 1024
        }
    );
    assert!(error.to_string().contains("max_payload of 1024"), "{error}");
    // Headers count towards the limit too.
    let mut headers = Headers::new();
    headers.insert("K", "v");
    let error = client
        .publish_with_headers("limits", None, &headers, vec![0u8; 1020])
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::TooLarge {
                max_payload: 1024,
                ..
            }
        ),
        "{error}"
    );
    client.publish("limits", vec![7u8; 1024]).await.unwrap();
    let message = subscription.next().await.unwrap();
    assert_eq!(message.payload.len(), 1024);
    assert!(client.is_connected());
}

#[runtime::test(timeout = "60s")]
async fn wrong_credentials_are_reported_as_an_authorization_error(context: runtime::Context) {
    let Some(server) = server(Server::builder().user("alice", "s3cret")) else {
        return;
    };
    let port = server.port();
    let wrong = format!("nats://alice:wrong@127.0.0.1:{port}");
    let error = Client::connect(&context, options(&wrong).0)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Authorization(text) if text.contains("Authorization")),
        "{error}"
    );
    assert!(
        error.to_string().contains("check the user and password"),
        "{error}"
    );
    let none = format!("nats://127.0.0.1:{port}");
    let error = Client::connect(&context, options(&none).0)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Authorization(_)), "{error}");
    // The same credentials from the URL and from the options both work.
    let right = format!("nats://alice:s3cret@127.0.0.1:{port}");
    let client = Client::connect(&context, options(&right).0).await.unwrap();
    client.flush().await.unwrap();
    let client = Client::connect(&context, options(&none).0.with_user("alice", "s3cret"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    drop(server);
    let Some(server) = common::server(Server::builder().token("t0ken")) else {
        return;
    };
    let error = Client::connect(&context, options(&server.url()).0.with_token("nope"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Authorization(_)), "{error}");
    let client = Client::connect(&context, options(&server.url()).0.with_token("t0ken"))
        .await
        .unwrap();
    client.flush().await.unwrap();
}

#[runtime::test(timeout = "60s")]
async fn the_first_server_that_answers_is_used_and_none_answering_lists_each_failure(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    // A port nothing listens on: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    drop(dead);
    let dead_url = format!("nats://127.0.0.1:{dead_port}");
    let list = format!("{dead_url},{}", server.url());
    let client = Client::connect(&context, options(&list).0).await.unwrap();
    assert_eq!(client.server(), Some(server.url()));
    let error = Client::connect(&context, options(&dead_url).0)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Unreachable(failures) if failures.len() == 1),
        "{error}"
    );
    assert!(error.to_string().contains(&dead_url), "{error}");
}

#[runtime::test(timeout = "60s")]
async fn a_slow_subscriber_loses_new_messages_counted_and_reported_once(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let (options, mut events) = options(&server.url());
    let client = Client::connect(&context, options.with_subscription_capacity(10, 1 << 20))
        .await
        .unwrap();
    let mut slow = client.subscribe("firehose").unwrap();
    let mut other = client.subscribe("other").unwrap();
    client.flush().await.unwrap();
    for index in 0..100u32 {
        client
            .publish("firehose", index.to_le_bytes())
            .await
            .unwrap();
    }
    client.publish("other", b"still flowing").await.unwrap();
    // The other subscription is not held up by the full one.
    assert_eq!(&other.next().await.unwrap().payload[..], b"still flowing");
    assert_eq!(slow.dropped(), 90);
    for index in 0..10u32 {
        assert_eq!(&slow.next().await.unwrap().payload[..], index.to_le_bytes());
    }
    let reports: Vec<_> = events
        .drain()
        .into_iter()
        .filter(|event| matches!(event, Event::SlowConsumer { .. }))
        .collect();
    assert_eq!(
        reports,
        [Event::SlowConsumer {
            subject: "firehose".into(),
            sid: slow.sid()
        }]
    );
}

#[runtime::test(timeout = "60s")]
async fn unsubscribing_ends_the_subscription_now_or_after_a_count(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let mut counted = client.subscribe("ticks").unwrap();
    counted.unsubscribe_after(3).unwrap();
    let watcher = client.subscribe("ticks").unwrap();
    watcher.unsubscribe();
    let mut everything = client.subscribe("ticks").unwrap();
    client.flush().await.unwrap();
    for index in 0..5u8 {
        client.publish("ticks", [index]).await.unwrap();
    }
    for index in 0..5u8 {
        assert_eq!(&everything.next().await.unwrap().payload[..], [index]);
    }
    for index in 0..3u8 {
        assert_eq!(&counted.next().await.unwrap().payload[..], [index]);
    }
    assert!(counted.next().await.is_none());
}

/// A drained subscription delivers every message the server routed to it before the `UNSUB`,
/// then ends: a publisher's messages, flushed (so the server has routed them all) and then
/// drained at once while megabytes of them are still on the way, all arrive. (`unsubscribe`
/// drops those still on the wire.)
#[runtime::test(timeout = "60s")]
async fn a_drained_subscription_gets_what_was_routed_before_it_ended(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let mut subscription = client.subscribe("bulk").unwrap();
    let unsubscriber = subscription.unsubscriber();
    client.flush().await.unwrap();
    let publisher = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    const MESSAGES: u32 = 4_000;
    let reader = context.clone().spawn(move |_| async move {
        let mut next = 0u32;
        while let Some(message) = subscription.next().await {
            assert_eq!(
                &message.payload[..4],
                next.to_le_bytes(),
                "in order, none lost"
            );
            next += 1;
        }
        (next, subscription.dropped())
    });
    let mut payload = vec![0u8; 2048];
    for index in 0..MESSAGES {
        payload[..4].copy_from_slice(&index.to_le_bytes());
        publisher.publish("bulk", &payload).await.unwrap();
    }
    publisher.flush().await.unwrap();
    unsubscriber.drain().await;
    let (received, dropped) = reader.await.unwrap();
    assert_eq!(dropped, 0, "the queue kept up");
    assert_eq!(
        received, MESSAGES,
        "every message routed before the UNSUB arrived"
    );
}

/// A drain dropped before it finished ends the subscription at once: the stream ends, and
/// nothing is left subscribed.
#[runtime::test(timeout = "60s")]
async fn a_cancelled_drain_ends_the_subscription(context: runtime::Context) {
    use futures::FutureExt as _;
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let mut subscription = client.subscribe("cancelled").unwrap();
    client.flush().await.unwrap();
    let unsubscriber = subscription.unsubscriber();
    // Polled once (its UNSUB queued, its flush waiting), then dropped.
    assert!(unsubscriber.drain().now_or_never().is_none());
    assert!(subscription.next().await.is_none(), "the stream ended");
    client.publish("cancelled", b"late").await.unwrap();
    client.flush().await.unwrap();
    assert_eq!(subscription.dropped(), 0);
}

#[runtime::test(timeout = "60s")]
async fn a_killed_and_restarted_server_gets_the_subscriptions_back(context: runtime::Context) {
    let Some(mut server) = server(Server::builder()) else {
        return;
    };
    let (options, mut events) = options(&server.url());
    let client = Client::connect(&context, options).await.unwrap();
    let mut subscription = client.subscribe("survives").unwrap();
    let mut grouped = client.queue_subscribe("grouped", "g").unwrap();
    client.flush().await.unwrap();
    // A request in flight when the server dies fails at once, not at its deadline.
    let _silent = client.subscribe("silent").unwrap();
    client.flush().await.unwrap();
    let mut pending =
        std::pin::pin!(client.request_with_timeout("silent", b"?", Duration::from_secs(50)));
    // Its first poll queues the request; the flush after it proves it reached the server.
    assert!(futures::poll!(pending.as_mut()).is_pending());
    client.flush().await.unwrap();
    server.kill();
    events
        .wait_for(&context, "disconnected", |e| {
            matches!(e, Event::Disconnected { .. })
        })
        .await;
    assert_eq!(pending.await.unwrap_err(), Error::Disconnected);
    assert!(!client.is_connected());
    // Published while the server is down: kept and sent after the reconnect.
    client
        .publish("survives", b"queued while down")
        .await
        .unwrap();
    server.restart().unwrap();
    events
        .wait_for(&context, "connected", |e| {
            matches!(e, Event::Connected { .. })
        })
        .await;
    assert_eq!(
        &subscription.next().await.unwrap().payload[..],
        b"queued while down"
    );
    let other = Client::connect(&context, common::options(&server.url()).0)
        .await
        .unwrap();
    other.publish("survives", b"after").await.unwrap();
    other.publish("grouped", b"to the group").await.unwrap();
    assert_eq!(&subscription.next().await.unwrap().payload[..], b"after");
    assert_eq!(&grouped.next().await.unwrap().payload[..], b"to the group");
}

#[runtime::test(timeout = "60s")]
async fn closing_ends_subscriptions_and_refuses_further_calls(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    let mut subscription = client.subscribe("s").unwrap();
    client.publish("s", b"last").await.unwrap();
    client.close().await;
    // What arrived before the close still comes out, then the end.
    assert_eq!(&subscription.next().await.unwrap().payload[..], b"last");
    assert!(subscription.next().await.is_none());
    assert_eq!(client.publish("s", b"x").await.unwrap_err(), Error::Closed);
    assert_eq!(client.subscribe("s").unwrap_err(), Error::Closed);
    assert_eq!(client.flush().await.unwrap_err(), Error::Closed);
}

#[runtime::test(timeout = "60s")]
async fn invalid_subjects_are_refused_with_the_reason(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let client = Client::connect(&context, options(&server.url()).0)
        .await
        .unwrap();
    for subject in ["", "a b", "a..b", "wild.*"] {
        let error = client.publish(subject, b"x").await.unwrap_err();
        assert!(matches!(error, Error::Invalid(_)), "{subject:?}: {error}");
    }
    let error = client.subscribe("a\r\nPUB x 1").unwrap_err();
    assert!(matches!(error, Error::Invalid(_)), "{error}");
    // The connection is untouched.
    client.flush().await.unwrap();
}

#[runtime::test(timeout = "60s")]
async fn a_client_whose_connection_scope_ended_is_closed_not_a_zombie(context: runtime::Context) {
    let Some(server) = server(Server::builder()) else {
        return;
    };
    let (options, mut events) = options(&server.url());
    // Connected from a task that then ends: its children, the connection's task among
    // them, end with it.
    let client = context
        .clone()
        .spawn(move |context| async move { Client::connect(&context, options).await })
        .await
        .unwrap()
        .unwrap();
    events
        .wait_for(&context, "closed", |e| matches!(e, Event::Closed))
        .await;
    assert!(!client.is_connected());
    assert_eq!(client.publish("s", b"x").await.unwrap_err(), Error::Closed);
    assert_eq!(client.flush().await.unwrap_err(), Error::Closed);
}

#[runtime::test(timeout = "60s")]
async fn closing_while_disconnected_does_not_wait_for_a_server(context: runtime::Context) {
    let Some(mut server) = server(Server::builder()) else {
        return;
    };
    let (options, mut events) = options(&server.url());
    // Long request timeout: a close that waited for a flush would outlast the test's.
    let client = Client::connect(
        &context,
        options.with_request_timeout(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    server.kill();
    events
        .wait_for(&context, "disconnected", |e| {
            matches!(e, Event::Disconnected { .. })
        })
        .await;
    client.publish("s", b"never sent").await.unwrap();
    client.close().await;
    assert_eq!(client.publish("s", b"x").await.unwrap_err(), Error::Closed);
}

/// A request queued while disconnected and resolved before the reconnect (timed out here,
/// dropped or failed alike) is cut from the reconnect buffer: the responder never sees it,
/// while a request still waiting and a publish queued around it go out in order.
#[runtime::test(timeout = "60s")]
async fn a_request_that_resolved_while_disconnected_is_never_sent(context: runtime::Context) {
    let Some(mut server) = server(Server::builder()) else {
        return;
    };
    let (options, mut events) = options(&server.url());
    let client = Client::connect(&context, options).await.unwrap();
    let mut seen = client.subscribe("seen.>").unwrap();
    client.flush().await.unwrap();
    server.kill();
    events
        .wait_for(&context, "disconnected", |e| {
            matches!(e, Event::Disconnected { .. })
        })
        .await;
    client.publish("seen.first", b"1").await.unwrap();
    // Queued while disconnected, then timed out: must never reach the server.
    let expired = client
        .request_with_timeout("seen.expired", b"late", Duration::from_millis(20))
        .await;
    assert_eq!(
        expired.unwrap_err(),
        Error::Timeout(Duration::from_millis(20))
    );
    // Queued while disconnected and dropped unanswered: never sent either.
    {
        let mut dropped = std::pin::pin!(client.request_with_timeout(
            "seen.dropped",
            b"x",
            Duration::from_secs(50)
        ));
        assert!(futures::poll!(dropped.as_mut()).is_pending());
    }
    let waiting = context.clone().spawn({
        let client = client.clone();
        move |_| async move {
            client
                .request_with_timeout("seen.waiting", b"w", Duration::from_secs(50))
                .await
        }
    });
    // The spawned request is queued once it is pending in the client.
    while client.__pending_requests() == 0 {
        runtime::reschedule().await;
    }
    client.publish("seen.last", b"2").await.unwrap();
    server.restart().unwrap();
    let mut subjects = Vec::new();
    while subjects.len() < 3 {
        let message = seen.next().await.unwrap();
        if message.subject == "seen.waiting" {
            client
                .publish(message.reply.as_deref().unwrap(), b"answered")
                .await
                .unwrap();
        }
        subjects.push(message.subject.to_string());
    }
    assert_eq!(subjects, ["seen.first", "seen.waiting", "seen.last"]);
    assert_eq!(&waiting.await.unwrap().unwrap().payload[..], b"answered");
    // Nothing else was sent: a marker published now is the next message.
    client.publish("seen.marker", b"").await.unwrap();
    assert_eq!(seen.next().await.unwrap().subject.as_str(), "seen.marker");
}

/// A permissions violation fails what it concerns at once with an error naming the
/// operation and subject: a request to a subject this user may not publish to, later
/// publishes to it, and a subscription it may not make; the connection goes on.
#[runtime::test(timeout = "60s")]
async fn a_permission_violation_fails_the_request_publish_or_subscription_it_concerns(
    context: runtime::Context,
) {
    let Some(server) = server(Server::builder().config(
        "authorization { users = [ { user: limited, password: secret, permissions: { \
         publish: { allow: [\"open.>\", \"_INBOX.>\"] }, subscribe: { allow: [\"open.>\", \
         \"_INBOX.>\"] } } } ] }",
    )) else {
        return;
    };
    let url = format!("nats://limited:secret@127.0.0.1:{}", server.port());
    let client = Client::connect(&context, options(&url).0).await.unwrap();
    let denied = |operation: &str, subject: &str| Error::PermissionDenied {
        operation: operation.into(),
        subject: subject.into(),
    };
    // An hour's deadline: only the violation can end it within the test's timeout.
    let error = client
        .request_with_timeout("closed.thing", b"?", Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert_eq!(error, denied("publish", "closed.thing"));
    assert!(error.to_string().contains("closed.thing"), "{error}");
    assert_eq!(
        client.publish("closed.thing", b"again").await.unwrap_err(),
        denied("publish", "closed.thing")
    );
    let mut subscription = client.subscribe("closed.feed").unwrap();
    assert_eq!(subscription.next().await, None, "the server refused it");
    assert_eq!(
        subscription.error(),
        Some(denied("subscribe", "closed.feed"))
    );
    // The connection goes on for what is allowed.
    let mut open = client.subscribe("open.feed").unwrap();
    client.flush().await.unwrap();
    client.publish("open.feed", b"fine").await.unwrap();
    assert_eq!(&open.next().await.unwrap().payload[..], b"fine");
}
