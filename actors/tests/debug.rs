//! `Debug` of the crate's public types: each shows what identifies the value (an actor's id,
//! a supervisor's label and task, a pool's label and size), so an application struct holding
//! them derives `Debug`.

use actors::prelude::*;
use actors::supervisor::{ChildSpec, DynamicSupervisor, Strategy, Supervisor, SupervisorRef};
use actors::{Context, Pool};

#[actor(name = "probe")]
#[derive(Debug)]
struct Probe;

#[actor]
impl Probe {
    /// This actor's context as `{:?}` shows it.
    fn context(&self, ctx: &mut Context<Self>) -> String {
        format!("{ctx:?}")
    }
}

/// What an application keeps: deriving `Debug` over the crate's types compiles.
#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug` only.
struct App {
    probe: ProbeRef,
    supervisor: SupervisorRef,
    pool: ProbePoolRef,
}

/// An actor's context shows the actor's id and its runtime context's label path.
#[runtime::test(timeout = "20s")]
async fn an_actor_context_shows_its_id_and_label_path(context: runtime::Context) {
    let probe = Probe.spawn(&context);
    let shown = probe.context().await.unwrap();
    let id = probe.id().to_string();
    assert!(id.starts_with("probe#"), "{id}");
    assert!(
        shown.starts_with(&format!("Context {{ actor: {id},")),
        "{shown}"
    );
    assert!(shown.contains("label: \"probe\""), "{shown}");
    assert!(shown.contains("node: task@0x"), "{shown}");
    let reference = format!("{probe:?}");
    assert!(
        reference.starts_with(&format!("ProbeRef(Ref {{ actor: {id},")),
        "{reference}"
    );
}

/// A supervisor's ref shows its id (with its label) and whether its loop runs; the builder
/// shows its label, strategy and children.
#[runtime::test(timeout = "20s")]
async fn a_supervisor_ref_shows_its_label_and_task(context: runtime::Context) {
    let mut supervisor = Supervisor::new("crew", Strategy::OneForAll);
    let probe: ProbeRef = supervisor.child(ChildSpec::new(|| Probe));
    let builder = format!("{supervisor:?}");
    assert!(builder.contains("label: \"crew\""), "{builder}");
    assert!(builder.contains("strategy: OneForAll"), "{builder}");
    assert!(builder.contains("children: 1"), "{builder}");

    let supervisor = supervisor.spawn(&context);
    let shown = format!("{supervisor:?}");
    assert!(
        shown.starts_with(&format!("SupervisorRef {{ id: {}", supervisor.id())),
        "{shown}"
    );
    assert!(shown.contains("crew#"), "{shown}");
    assert!(shown.contains("nested: false"), "{shown}");
    assert!(shown.contains("closed: false"), "{shown}");
    assert!(probe.context().await.is_ok());

    let dynamic = DynamicSupervisor::new("dyn").spawn(&context);
    let shown = format!("{dynamic:?}");
    assert!(shown.contains("label: \"dyn\""), "{shown}");
    assert!(shown.contains("children: 0"), "{shown}");

    let pool: ProbePoolRef = Pool::new("probes", 2, || Probe)
        .spawn(&context)
        .await
        .unwrap()
        .into();
    let app = App {
        probe,
        supervisor,
        pool,
    };
    let shown = format!("{app:?}");
    assert!(
        shown.contains("probe: ProbeRef(Ref { actor: probe#"),
        "{shown}"
    );
    assert!(shown.contains("supervisor: SupervisorRef {"), "{shown}");
    assert!(
        shown.contains("pool: ProbePoolRef(PoolRef { label: \"probes\""),
        "{shown}"
    );
    assert!(shown.contains("size: 2"), "{shown}");
}
