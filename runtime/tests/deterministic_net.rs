//! The simulated network of a deterministic run: the same `Network` calls as on the rings, in
//! memory, with latency in virtual time, partitions that delay, resets both ends see, refused
//! dials, bounded windows, and bytes never lost nor reordered; replayed exactly by a seed.

use futures::io::{AsyncBufReadExt, AsyncWriteExt};
use runtime::deterministic::{self, Link, NetworkFaults, Runner, on_host};
use runtime::prelude::*;
use runtime::{Context, Error, IoBufs};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3));

fn bytes(bufs: IoBufs) -> Vec<u8> {
    bufs.coalesce().to_vec()
}

fn kind(error: &Error) -> ErrorKind {
    error
        .io_error()
        .map(std::io::Error::kind)
        .expect("an I/O error")
}

fn elapsed() -> Duration {
    deterministic::elapsed().expect("inside a run")
}

/// Binds `SERVER:0` and echoes every connection until its peer closes; returns the address.
async fn echo_server(context: &Context) -> SocketAddr {
    let mut listener = context
        .bind(SocketAddr::new(SERVER, 0))
        .await
        .expect("bind");
    let address = listener.local_addr().unwrap();
    context.child("server").spawn(move |context| async move {
        loop {
            let Ok((_, mut sink, mut stream)) = listener.accept().await else {
                return;
            };
            context.child("echo").spawn(move |_| async move {
                while let Ok(chunk) = stream.recv_some(1 << 16).await {
                    if sink.send(chunk).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

/// A client on `CLIENT` echoes messages through the server, for many seeds; the first port
/// picked is the fixed base.
#[test]
fn echo_over_seeds() {
    for seed in 0..40 {
        Runner::seeded(seed)
            .with_network(NetworkFaults {
                jitter: Duration::from_millis(3),
                ..NetworkFaults::default()
            })
            .start(|context| async move {
                let address = echo_server(&context).await;
                assert_eq!(address, SocketAddr::new(SERVER, 10_000));
                on_host(CLIENT, async move {
                    let (mut sink, mut stream) = context.dial(address).await.expect("dial");
                    for round in 0..20u32 {
                        let message = format!("message {round} of seed {seed}");
                        sink.send(message.clone().into_bytes()).await.unwrap();
                        let echoed = stream.recv(message.len()).await.unwrap();
                        assert_eq!(bytes(echoed), message.as_bytes());
                    }
                })
                .await;
            });
    }
}

/// A link's latency shows in virtual time: a dial takes a round trip, and so does an echo.
#[test]
fn latency_shows_in_virtual_time() {
    Runner::seeded(1).start(|context| async move {
        let address = echo_server(&context).await;
        let latency = Duration::from_millis(50);
        deterministic::network().set_link(
            CLIENT,
            SERVER,
            Link {
                latency,
                jitter: Duration::ZERO,
            },
        );
        on_host(CLIENT, async move {
            let before = elapsed();
            let (mut sink, mut stream) = context.dial(address).await.unwrap();
            let dialed = elapsed() - before;
            assert!(dialed >= 2 * latency, "{dialed:?}");
            assert!(
                dialed < 2 * latency + Duration::from_millis(5),
                "{dialed:?}"
            );
            let before = elapsed();
            sink.send(&b"ping"[..]).await.unwrap();
            assert_eq!(bytes(stream.recv(4).await.unwrap()), b"ping");
            let echoed = elapsed() - before;
            assert!(echoed >= 2 * latency, "{echoed:?}");
            assert!(
                echoed < 2 * latency + Duration::from_millis(5),
                "{echoed:?}"
            );
        })
        .await;
    });
}

/// A partition holds bytes until it heals (they arrive after, in order), and a dial across
/// it times out.
#[test]
fn a_partition_delays_bytes_until_healed_and_fails_dials() {
    for seed in 0..20 {
        Runner::seeded(seed)
            .with_connect_timeout(Duration::from_secs(5))
            .start(|context| async move {
                let mut listener = context.bind(SocketAddr::new(SERVER, 7000)).await.unwrap();
                let client = context.clone();
                let dialer = context.child("client").spawn(move |_| {
                    on_host(CLIENT, async move {
                        client.dial(SocketAddr::new(SERVER, 7000)).await.unwrap()
                    })
                });
                let (_, _server_sink, mut server_stream) = listener.accept().await.unwrap();
                let (mut sink, _stream) = dialer.await.unwrap();

                let network = deterministic::network();
                network.partition(CLIENT, SERVER);
                sink.send(&b"held "[..]).await.unwrap();
                sink.send(&b"bytes"[..]).await.unwrap();
                let waited = context
                    .timeout(Duration::from_secs(10), server_stream.recv(1))
                    .await;
                assert!(matches!(waited, Err(Error::Timeout)), "{waited:?}");

                // A dial across the partition times out after the connect timeout.
                let started = elapsed();
                let dialed = on_host(CLIENT, context.dial(SocketAddr::new(SERVER, 7000))).await;
                let error = dialed.expect_err("a dial across a partition fails");
                assert!(matches!(error, Error::DialFailed(..)), "{error:?}");
                assert_eq!(kind(&error), ErrorKind::TimedOut);
                assert!(elapsed() - started >= Duration::from_secs(5));

                let healed = elapsed();
                network.heal(CLIENT, SERVER);
                let received = server_stream.recv(10).await.unwrap();
                assert_eq!(bytes(received), b"held bytes");
                assert!(elapsed() >= healed + Duration::from_millis(1));
            });
    }
}

/// A one-way partition holds one direction only.
#[test]
fn a_one_way_partition_holds_one_direction() {
    Runner::seeded(2).start(|context| async move {
        let mut listener = context.bind(SocketAddr::new(SERVER, 7001)).await.unwrap();
        let client = context.clone();
        let dialer = context.clone().spawn(move |_| {
            on_host(CLIENT, async move {
                client.dial(SocketAddr::new(SERVER, 7001)).await.unwrap()
            })
        });
        let (_, mut server_sink, mut server_stream) = listener.accept().await.unwrap();
        let (mut sink, mut stream) = dialer.await.unwrap();
        deterministic::network().partition_one_way(CLIENT, SERVER);
        sink.send(&b"up"[..]).await.unwrap();
        server_sink.send(&b"down"[..]).await.unwrap();
        assert_eq!(bytes(stream.recv(4).await.unwrap()), b"down");
        let held = context
            .timeout(Duration::from_secs(1), server_stream.recv(2))
            .await;
        assert!(matches!(held, Err(Error::Timeout)));
        deterministic::network().heal_all();
        assert_eq!(bytes(server_stream.recv(2).await.unwrap()), b"up");
    });
}

/// A reset is seen by both ends: receives fail, sends fail, and a sink that failed stays
/// broken.
#[test]
fn a_reset_is_seen_by_both_ends() {
    Runner::seeded(3).start(|context| async move {
        let mut listener = context.bind(SocketAddr::new(SERVER, 7002)).await.unwrap();
        let client = context.clone();
        let dialer = context.clone().spawn(move |_| {
            on_host(CLIENT, async move {
                client.dial(SocketAddr::new(SERVER, 7002)).await.unwrap()
            })
        });
        let (_, mut server_sink, mut server_stream) = listener.accept().await.unwrap();
        let (mut sink, mut stream) = dialer.await.unwrap();
        sink.send(&b"before"[..]).await.unwrap();
        assert_eq!(bytes(server_stream.recv(6).await.unwrap()), b"before");

        deterministic::network().reset_connections(SERVER);
        let error = stream.recv(1).await.unwrap_err();
        assert_eq!(kind(&error), ErrorKind::ConnectionReset, "{error:?}");
        let error = server_stream.recv_some(10).await.unwrap_err();
        assert_eq!(kind(&error), ErrorKind::ConnectionReset, "{error:?}");
        let error = server_sink.send(&b"x"[..]).await.unwrap_err();
        assert_eq!(kind(&error), ErrorKind::ConnectionReset, "{error:?}");
        let error = server_sink.send(&b"x"[..]).await.unwrap_err();
        assert_eq!(kind(&error), ErrorKind::BrokenPipe, "{error:?}");
        let error = sink.send(&b"x"[..]).await.unwrap_err();
        assert_eq!(kind(&error), ErrorKind::ConnectionReset, "{error:?}");
    });
}

/// A dial to an address nothing is bound to is refused, as is every dial with a refusal rate
/// of one; a reset rate of one resets the first send.
#[test]
fn refusals_and_fault_rates() {
    Runner::seeded(4).start(|context| async move {
        let error = context
            .dial(SocketAddr::new(SERVER, 9))
            .await
            .expect_err("nothing is bound");
        assert!(matches!(error, Error::DialFailed(..)));
        assert_eq!(kind(&error), ErrorKind::ConnectionRefused);
    });
    Runner::seeded(5)
        .with_network(NetworkFaults {
            refuse_rate: 1.0,
            ..NetworkFaults::default()
        })
        .start(|context| async move {
            let _listener = context.bind(SocketAddr::new(SERVER, 7003)).await.unwrap();
            let error = context
                .dial(SocketAddr::new(SERVER, 7003))
                .await
                .unwrap_err();
            assert_eq!(kind(&error), ErrorKind::ConnectionRefused);
        });
    Runner::seeded(6)
        .with_network(NetworkFaults {
            reset_rate: 1.0,
            ..NetworkFaults::default()
        })
        .start(|context| async move {
            let mut listener = context.bind(SocketAddr::new(SERVER, 7004)).await.unwrap();
            let dialer = context
                .clone()
                .spawn(|context| async move { context.dial(SocketAddr::new(SERVER, 7004)).await });
            let (_, _sink, mut server_stream) = listener.accept().await.unwrap();
            let (mut sink, _stream) = dialer.await.unwrap().unwrap();
            let error = sink.send(&b"x"[..]).await.unwrap_err();
            assert_eq!(kind(&error), ErrorKind::ConnectionReset);
            let error = server_stream.recv(1).await.unwrap_err();
            assert_eq!(kind(&error), ErrorKind::ConnectionReset);
        });
}

/// Binding an address twice fails; the listener's drop frees it.
#[test]
fn a_bound_address_is_in_use_until_dropped() {
    Runner::seeded(7).start(|context| async move {
        let address = SocketAddr::new(SERVER, 7005);
        let listener = context.bind(address).await.unwrap();
        let error = context.bind(address).await.unwrap_err();
        assert!(matches!(error, Error::BindFailed(..)));
        assert_eq!(kind(&error), ErrorKind::AddrInUse);
        let any = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 7005);
        assert!(context.bind(any).await.is_err());
        drop(listener);
        let _listener = context.bind(any).await.unwrap();
        // A listener on the unspecified address takes dials to any address of its port.
        let dialed = on_host(OTHER, context.dial(SocketAddr::new(SERVER, 7005))).await;
        assert!(dialed.is_ok(), "{dialed:?}");
    });
}

/// A pattern byte of the stream at `offset`.
fn pattern(offset: usize) -> u8 {
    (offset % 251) as u8
}

/// Bytes are never lost or reordered: with jitter, partitions coming and going at random
/// moments, and chunks of random sizes, the reader gets exactly the bytes written, over
/// 300 seeds.
#[test]
fn bytes_are_never_lost_or_reordered() {
    for seed in 0..300 {
        Runner::seeded(seed)
            .with_network(NetworkFaults {
                latency: Duration::from_millis(1),
                jitter: Duration::from_millis(20),
                ..NetworkFaults::default()
            })
            .start(|context| async move {
                let mut listener = context.bind(SocketAddr::new(SERVER, 7006)).await.unwrap();
                let total = 100_000 + (runtime::random_u64() % 100_000) as usize;
                let writer = context.child("writer").spawn(move |context| {
                    on_host(CLIENT, async move {
                        let (mut sink, _stream) =
                            context.dial(SocketAddr::new(SERVER, 7006)).await.unwrap();
                        let mut offset = 0;
                        while offset < total {
                            let size = 1 + (runtime::random_u64() % 9000) as usize;
                            let chunk: Vec<u8> =
                                (offset..(offset + size).min(total)).map(pattern).collect();
                            offset += chunk.len();
                            sink.send(chunk).await.unwrap();
                        }
                    })
                });
                let (_, _sink, mut stream) = listener.accept().await.unwrap();
                // Partitions come and go once the connection is up (a dial across one fails).
                let chaos = context.child("chaos").spawn(|context| async move {
                    let network = deterministic::network();
                    for _ in 0..5 {
                        let pause = runtime::random_u64() % 30;
                        context.sleep(Duration::from_millis(pause)).await;
                        network.partition(CLIENT, SERVER);
                        let pause = runtime::random_u64() % 30;
                        context.sleep(Duration::from_millis(pause)).await;
                        network.heal_all();
                    }
                });
                let mut received = 0;
                loop {
                    let max = 1 + (runtime::random_u64() % 20_000) as usize;
                    match stream.recv_some(max).await {
                        Ok(chunk) => {
                            let chunk = bytes(chunk);
                            assert!(!chunk.is_empty() && chunk.len() <= max);
                            for (index, byte) in chunk.iter().enumerate() {
                                assert_eq!(
                                    *byte,
                                    pattern(received + index),
                                    "seed {seed}: byte {} differs",
                                    received + index
                                );
                            }
                            received += chunk.len();
                        }
                        Err(error) => {
                            assert_eq!(kind(&error), ErrorKind::UnexpectedEof, "{error:?}");
                            break;
                        }
                    }
                }
                assert_eq!(received, total, "seed {seed}");
                writer.await.unwrap();
                chaos.await.unwrap();
            });
    }
}

/// A slow reader holds its writer back: the pipe holds a window, a send larger than that
/// completes only as the reader reads, and a writer that waits past the read/write timeout
/// fails and stays broken.
#[test]
fn a_slow_reader_holds_the_writer_back() {
    Runner::seeded(8)
        .with_read_write_timeout(Duration::from_secs(60))
        .start(|context| async move {
            let mut listener = context.bind(SocketAddr::new(SERVER, 7007)).await.unwrap();
            let writer = context.child("writer").spawn(|context| async move {
                let (mut sink, _stream) =
                    context.dial(SocketAddr::new(SERVER, 7007)).await.unwrap();
                sink.send(vec![7u8; 512 * 1024]).await.unwrap();
                elapsed()
            });
            let (_, _sink, mut stream) = listener.accept().await.unwrap();
            context.sleep(Duration::from_secs(20)).await;
            let reading = elapsed();
            let mut received = 0;
            while received < 512 * 1024 {
                received += stream.recv_some(1 << 20).await.unwrap().len();
            }
            let sent = writer.await.unwrap();
            assert!(
                sent > reading,
                "the send completed at {sent:?}, before the read at {reading:?}"
            );
        });
    Runner::seeded(9)
        .with_read_write_timeout(Duration::from_secs(2))
        .start(|context| async move {
            let mut listener = context.bind(SocketAddr::new(SERVER, 7008)).await.unwrap();
            let dialer = context
                .clone()
                .spawn(|context| async move { context.dial(SocketAddr::new(SERVER, 7008)).await });
            let (_, _sink, _stream) = listener.accept().await.unwrap();
            let (mut sink, _client_stream) = dialer.await.unwrap().unwrap();
            let error = sink.send(vec![1u8; 512 * 1024]).await.unwrap_err();
            assert_eq!(kind(&error), ErrorKind::TimedOut);
            let error = sink.send(&b"x"[..]).await.unwrap_err();
            assert_eq!(kind(&error), ErrorKind::BrokenPipe);
        });
}

/// A receive's timeout fails it with `TimedOut` and leaves the stream usable; a dropped
/// receive loses no bytes; a dropped sink ends the stream after its bytes.
#[test]
fn receive_contracts() {
    Runner::seeded(10)
        .with_read_write_timeout(Duration::from_secs(3))
        .start(|context| async move {
            let mut listener = context.bind(SocketAddr::new(SERVER, 7009)).await.unwrap();
            let dialer = context
                .clone()
                .spawn(|context| async move { context.dial(SocketAddr::new(SERVER, 7009)).await });
            let (_, _server_sink, mut stream) = listener.accept().await.unwrap();
            let (mut sink, _client_stream) = dialer.await.unwrap().unwrap();

            let started = elapsed();
            let error = stream.recv(1).await.unwrap_err();
            assert_eq!(kind(&error), ErrorKind::TimedOut);
            assert!(elapsed() - started >= Duration::from_secs(3));

            // Three of five bytes come; the receive waiting for five is given up.
            sink.send(&b"abc"[..]).await.unwrap();
            let given_up = context
                .timeout(Duration::from_secs(1), stream.recv(5))
                .await;
            assert!(matches!(given_up, Err(Error::Timeout)));
            sink.send(&b"de"[..]).await.unwrap();
            drop(sink);
            assert_eq!(bytes(stream.recv(5).await.unwrap()), b"abcde");
            let end = stream.recv_some(10).await.unwrap_err();
            assert_eq!(kind(&end), ErrorKind::UnexpectedEof);
            assert_eq!(bytes(stream.recv_some(0).await.unwrap()), b"");
        });
}

/// The futures-io path: lines written with `AsyncWriteExt` and read with `read_line`.
#[test]
fn futures_io_lines() {
    for seed in 0..10 {
        Runner::seeded(seed)
            .with_network(NetworkFaults {
                jitter: Duration::from_millis(2),
                ..NetworkFaults::default()
            })
            .start(|context| async move {
                let mut listener = context.bind(SocketAddr::new(SERVER, 7010)).await.unwrap();
                let writer = context.child("writer").spawn(|context| async move {
                    let (mut sink, _stream) =
                        context.dial(SocketAddr::new(SERVER, 7010)).await.unwrap();
                    for line in 0..50 {
                        sink.write_all(format!("line {line}\n").as_bytes())
                            .await
                            .unwrap();
                    }
                    sink.close().await.unwrap();
                    let error = sink.write_all(b"late").await.unwrap_err();
                    assert_eq!(error.kind(), ErrorKind::BrokenPipe);
                });
                let (_, _sink, mut stream) = listener.accept().await.unwrap();
                let mut lines = Vec::new();
                loop {
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.unwrap() == 0 {
                        break;
                    }
                    lines.push(line);
                }
                let expected: Vec<String> = (0..50).map(|line| format!("line {line}\n")).collect();
                assert_eq!(lines, expected);
                writer.await.unwrap();
            });
    }
}

/// Two runs of one seed end with the same digest; different seeds (with jitter) differ.
#[test]
fn one_seed_one_digest() {
    let run = |seed| {
        Runner::seeded(seed)
            .with_network(NetworkFaults {
                jitter: Duration::from_millis(5),
                ..NetworkFaults::default()
            })
            .start(|context| async move {
                let address = echo_server(&context).await;
                let mut echoed = Vec::new();
                for client in 0..3u8 {
                    let context = context.clone();
                    echoed.push(context.child("client").spawn(move |context| {
                        on_host(IpAddr::V4(Ipv4Addr::new(10, 0, 1, client)), async move {
                            let (mut sink, mut stream) = context.dial(address).await.unwrap();
                            for round in 0..10u8 {
                                sink.send(vec![client, round]).await.unwrap();
                                stream.recv(2).await.unwrap();
                            }
                            elapsed()
                        })
                    }));
                }
                let mut times = Vec::new();
                for handle in echoed {
                    times.push(handle.await.unwrap());
                }
                (times, deterministic::digest().unwrap())
            })
    };
    let first = run(11);
    assert_eq!(run(11), first);
    assert_eq!(run(11), first);
    assert_ne!(run(12).1, first.1);
}
