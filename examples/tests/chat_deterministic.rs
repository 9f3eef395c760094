//! The `chat` server in a deterministic run, on the simulated network: two clients in one
//! room, one of them partitioned from the server; what the other says while the partition
//! lasts reaches it after the heal, in order, and not before.

// The server's own code, main and all (main is not called: the test serves the listener).
#[allow(dead_code)]
#[path = "../src/bin/chat.rs"]
mod chat;

use futures::io::AsyncBufReadExt;
use runtime::deterministic::{self, Runner, on_host};
use runtime::net::{Sink, Stream};
use runtime::prelude::*;
use runtime::{Context, Error};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const ALICE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const BOB: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

async fn line(stream: &mut Stream) -> String {
    let mut line = String::new();
    stream.read_line(&mut line).await.expect("a line");
    line
}

async fn join(context: &Context, host: IpAddr, address: SocketAddr, nick: &str) -> (Sink, Stream) {
    let (mut sink, mut stream) = on_host(host, context.dial(address))
        .await
        .expect("dial the chat server");
    assert!(line(&mut stream).await.starts_with("* welcome, guest"));
    sink.send(format!("/nick {nick}\n/join lobby\n").into_bytes())
        .await
        .unwrap();
    assert_eq!(line(&mut stream).await, format!("OK you are {nick}\n"));
    assert!(line(&mut stream).await.starts_with("OK joined #lobby"));
    (sink, stream)
}

#[test]
fn a_partitioned_member_gets_the_room_after_the_heal() {
    for seed in 0..10 {
        Runner::seeded(seed).start(|context| async move {
            let listener = context.bind(SocketAddr::new(SERVER, 7001)).await.unwrap();
            let address = listener.local_addr().unwrap();
            let server = context
                .child("chat")
                .spawn(move |context| async move { chat::serve(&context, listener).await });

            let (mut alice_sink, mut alice) = join(&context, ALICE, address, "alice").await;
            let (_bob_sink, mut bob) = join(&context, BOB, address, "bob").await;
            assert_eq!(line(&mut alice).await, "* bob joined #lobby\n");

            // Bob is cut off; alice talks meanwhile, within every limit of the server (a
            // few short lines, well inside a connection's outbox and the write grace).
            let network = deterministic::network();
            network.partition(BOB, SERVER);
            for index in 0..5 {
                alice_sink
                    .send(format!("message {index}\n").into_bytes())
                    .await
                    .unwrap();
            }
            let early = context
                .timeout(Duration::from_secs(3), line(&mut bob))
                .await;
            assert!(
                matches!(early, Err(Error::Timeout)),
                "a line crossed the partition: {early:?}"
            );

            let healed = deterministic::elapsed().unwrap();
            network.heal(BOB, SERVER);
            for index in 0..5 {
                assert_eq!(line(&mut bob).await, format!("<alice> message {index}\n"));
            }
            assert!(deterministic::elapsed().unwrap() > healed);
            server.abort();
        });
    }
}

/// A partition longer than the write grace, with more said than the network holds: the
/// server cannot write to bob for longer than its grace and drops him, alice hears he left,
/// and after the heal bob reads a prefix of the room's byte stream (whole lines in order,
/// perhaps part of the next one), then the end.
#[test]
fn a_member_partitioned_past_the_write_grace_is_dropped() {
    for seed in 0..5 {
        Runner::seeded(seed).start(|context| async move {
            let listener = context.bind(SocketAddr::new(SERVER, 7001)).await.unwrap();
            let address = listener.local_addr().unwrap();
            let server = context
                .child("chat")
                .spawn(move |context| async move { chat::serve(&context, listener).await });
            let (mut alice_sink, mut alice) = join(&context, ALICE, address, "alice").await;
            let (_bob_sink, mut bob) = join(&context, BOB, address, "bob").await;
            assert_eq!(line(&mut alice).await, "* bob joined #lobby\n");

            let network = deterministic::network();
            network.partition(BOB, SERVER);
            let said: Vec<String> = (0..40)
                .map(|index| format!("{index:04} {}", "x".repeat(3000)))
                .collect();
            for message in &said {
                alice_sink
                    .send(format!("{message}\n").into_bytes())
                    .await
                    .unwrap();
            }
            let left = context
                .timeout(Duration::from_secs(60), line(&mut alice))
                .await
                .expect("alice hears of bob within a minute");
            assert!(left.contains("bob") && left.contains("left"), "{left:?}");

            network.heal(BOB, SERVER);
            let mut index = 0;
            loop {
                let mut got = String::new();
                if bob.read_line(&mut got).await.unwrap() == 0 {
                    break;
                }
                let expected = format!("<alice> {}\n", said[index]);
                if !got.ends_with('\n') {
                    // The send the server gave up at its grace had put part of a line on
                    // the wire: a prefix of the stream, then its end.
                    assert!(expected.starts_with(&got), "{got:?}");
                    assert_eq!(bob.read_line(&mut got).await.unwrap(), 0);
                    break;
                }
                assert_eq!(got, expected);
                index += 1;
            }
            assert!(index < said.len(), "bob got every line: he was not dropped");
            server.abort();
        });
    }
}
