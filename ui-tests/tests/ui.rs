//! Every error `#[runtime::main]`, `#[runtime::test]` and `#[actor]` report, each with its `.stderr`
//! snapshot, and every accepted form, compiled (and, for programs, run). Refresh snapshots
//! with `TRYBUILD=overwrite cargo test -p ui-tests` and review the diff.

#[test]
fn macro_errors_and_accepted_forms() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/fail/*.rs");
    cases.pass("tests/pass/*.rs");
}
