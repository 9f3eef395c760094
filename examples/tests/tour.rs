//! Runs the `tour` for real (with a smaller workload) and checks its summary: every
//! request answered, the injected storage failure survived, the data intact, the metrics
//! printed.

use std::process::Command;

#[test]
fn the_tour_survives_its_injected_failure_and_prints_a_summary() {
    let output = Command::new(env!("CARGO_BIN_EXE_tour"))
        .env("TOUR_REQUESTS_PER_CLIENT", "400")
        .output()
        .expect("the tour runs");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("requests            3200\n"), "{stdout}");
    assert!(stdout.contains("restarts survived   1\n"), "{stdout}");
    assert!(
        stdout.contains("GET client0-key0    VALUE value-"),
        "{stdout}"
    );
    assert!(stdout.contains("a panic on iouring-dedicated: kv store failing on purpose"));
    assert!(
        stdout.contains("actor_restarts_total{actor=\"kv_store\"} 1"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("# EOF"), "{stdout}");
}
