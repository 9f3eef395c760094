//! Runs the `tour` for real (with a smaller workload) and checks its summary: every
//! request answered, the injected storage failure survived, the data intact, the metrics
//! printed.

mod common;

use std::process::{Command, Stdio};

#[test]
fn the_tour_survives_its_injected_failure_and_prints_a_summary() {
    let child = Command::new(env!("CARGO_BIN_EXE_tour"))
        .env("TOUR_REQUESTS_PER_CLIENT", "400")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the tour runs");
    let _watchdog = common::Watchdog::new(child.id());
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("requests            3200\n"), "{stdout}");
    assert!(stdout.contains("restarts survived   1\n"), "{stdout}");
    assert!(
        stdout.contains("GET client0-key0    VALUE value-"),
        "{stdout}"
    );
    // The store runs on the pool: the panic is on whichever worker ran it.
    assert!(
        stdout.contains("a panic on ") && stdout.contains(": kv store failing on purpose"),
        "{stdout}"
    );
    assert!(
        stdout.contains("actor_restarts_total{actor=\"kv_store\"} 1"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("# EOF"), "{stdout}");
}
