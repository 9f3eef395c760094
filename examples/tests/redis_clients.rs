//! Real clients against `kv`: a Python program using redis-py (connect-time handshake with
//! its RESP3 fallback, strings, counters, expiry, a `pipeline()` transaction, `WATCH`,
//! `getex`, `setex`, `keys`, `scan_iter`, `db=0` accepted and `db=1` refused clearly), and
//! `redis-benchmark` (`SET`, `GET`, `INCR`, `MSET`) completing without an error.
//!
//! `.ci/tools` installs redis-py (`pip install redis`) and `redis-tools` when missing, and
//! `.ci/run` then requires them (`REQUIRE_REDIS_PY`, `REQUIRE_REDIS_BENCHMARK`); where one
//! could not be installed, its test skips, loudly.

mod common;

use common::{Server, launch_kv};
use std::process::Command;

/// Starts kv on its own data directory.
fn start(name: &str) -> (Server, std::path::PathBuf) {
    launch_kv(name, &[])
}

/// Whether the tool can run; if not, fails when `require` says it must be there, else says
/// the test skips.
fn available(works: bool, require: &str, test: &str, tool: &str) -> bool {
    if works {
        return true;
    }
    assert!(
        std::env::var_os(require).is_none(),
        "{tool} is required ({require} is set) but not installed"
    );
    println!("################################################################");
    println!("{test} test SKIPPED: {tool} is not installed (see .ci/tools)");
    println!("################################################################");
    false
}

#[test]
fn redis_py_works_against_kv() {
    let python = Command::new("python3")
        .args(["-c", "import redis"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !available(python, "REQUIRE_REDIS_PY", "redis_py", "redis-py") {
        return;
    }
    let (server, data) = start("redis-py");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/redis_py_client.py"
    );
    let output = Command::new("python3")
        .arg(script)
        .arg(server.address.port().to_string())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(" ok"),
        "the redis-py program failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{}", stdout.trim());
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}

#[test]
fn redis_benchmark_completes_against_kv_without_errors() {
    let benchmark = Command::new("redis-benchmark")
        .arg("--version")
        .output()
        .is_ok();
    if !available(
        benchmark,
        "REQUIRE_REDIS_BENCHMARK",
        "redis_benchmark",
        "redis-benchmark",
    ) {
        return;
    }
    let (server, data) = start("redis-benchmark");
    let port = server.address.port().to_string();
    let output = Command::new("redis-benchmark")
        .args(["-p", &port, "-q", "-n", "2000", "-t", "set,get,incr,mset"])
        .output()
        .expect("redis-benchmark runs");
    // `-q` redraws its progress with `\r`: the last state of each line is what it reports.
    let report: String = String::from_utf8_lossy(&output.stdout)
        .split(['\r', '\n'])
        .filter(|line| line.contains("requests per second") || line.contains("rror"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(output.status.success(), "{report}");
    assert!(!report.contains("rror"), "errors from kv:\n{report}");
    for test in ["SET:", "GET:", "INCR:", "MSET (10 keys):"] {
        assert!(
            report
                .lines()
                .any(|line| line.trim_start().starts_with(test)),
            "no {test} result:\n{report}"
        );
    }
    println!("{report}");
    assert_eq!(server.interrupt(), "kv stopped\n");
    std::fs::remove_dir_all(&data).unwrap();
}
