//! Runs the `hello` example for real and checks what it prints.

use std::process::Command;

/// The example's tasks all finish, their results add up, and the metrics it prints show them.
#[test]
fn hello_runs_its_supervised_tasks_and_prints_metrics() {
    let output = Command::new(env!("CARGO_BIN_EXE_hello"))
        .output()
        .expect("the example runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains("sum of squares 1..=4 computed by 4 supervised tasks: 30"),
        "{stdout}"
    );
    assert!(
        stdout.contains("runtime_tasks_spawned_total{name=\"workers\",placement=\"shared\"} 4"),
        "{stdout}"
    );
    assert!(
        stdout.contains("runtime_tasks_running{name=\"workers\",placement=\"shared\"} 0"),
        "{stdout}"
    );
}
