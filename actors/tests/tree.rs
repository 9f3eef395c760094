//! What a running supervision tree shows: `which_children` and `count_children` on every
//! supervisor ref (static, dynamic, pool), and the runtime's tree as `pstree` prints it.

use actors::prelude::*;
use actors::supervisor::{
    ChildCounts, ChildInfo, ChildKind, ChildSpec, ChildStatus, DynamicSupervisor, Restart, Shape,
    Strategy, Supervisor, supervision_tree,
};
use actors::{Error, Pool};
use std::time::Duration;

#[actor]
struct Worker;

#[actor]
impl Worker {
    fn ping(&self) -> u8 {
        1
    }

    fn fail(&mut self) {
        panic!("the worker fails on purpose");
    }
}

const SHUTDOWN: Duration = Duration::from_secs(5);

/// A static supervisor with a worker, a dynamic supervisor and a pool lists them in start
/// order with their kinds, restart types, statuses and restarts; a failed worker shows one
/// restart once it answers again; the tree prints every level.
#[runtime::test(timeout = "20s")]
async fn every_supervisor_lists_its_children_and_the_tree_shows_them(context: runtime::Context) {
    let mut top = Supervisor::new("app", Strategy::OneForOne).intensity(5, Duration::from_secs(60));
    let worker = top.child(ChildSpec::new(|| Worker));
    let sessions = top.supervisor(
        DynamicSupervisor::new("sessions"),
        Restart::Permanent,
        SHUTDOWN,
    );
    let pool: WorkerPoolRef = top
        .supervisor(
            Pool::new("workers", 2, || Worker),
            Restart::Transient,
            SHUTDOWN,
        )
        .into();
    let top = top.spawn(&context);
    let session = sessions
        .start_child(ChildSpec::new(|| Worker).restart(Restart::Temporary))
        .await
        .unwrap();
    assert_eq!(pool.ping().await, Ok(1));
    assert_eq!(
        worker.fail().await,
        Err(Error::Panicked { actor: "worker" })
    );
    assert_eq!(worker.ping().await, Ok(1));

    let children = top.which_children();
    let expect = |id, label, kind, restart, restarts| ChildInfo {
        id,
        label,
        kind,
        restart,
        status: ChildStatus::Running,
        restarts,
    };
    assert_eq!(
        children,
        [
            expect(
                worker.id(),
                "worker",
                ChildKind::Worker,
                Restart::Permanent,
                1
            ),
            expect(
                sessions.id(),
                "sessions",
                ChildKind::Supervisor,
                Restart::Permanent,
                0
            ),
            expect(
                pool.as_pool().id(),
                "workers",
                ChildKind::Supervisor,
                Restart::Transient,
                0
            ),
        ]
    );
    assert_eq!(
        top.count_children(),
        ChildCounts {
            specs: 3,
            active: 3,
            supervisors: 2,
            workers: 1
        }
    );
    assert_eq!(
        sessions.which_children(),
        [expect(
            session.id(),
            "worker",
            ChildKind::Worker,
            Restart::Temporary,
            0
        )]
    );
    let members = pool.as_pool().which_children();
    assert_eq!(members.len(), 2);
    assert!(members.iter().all(
        |member| member.restart == Restart::Permanent && member.status == ChildStatus::Running
    ));
    assert_eq!(pool.as_pool().count_children().workers, 2);

    let tree = supervision_tree(&context);
    let shown: Vec<(usize, Option<Shape>, actors::ActorId)> = tree
        .walk()
        .into_iter()
        .map(|(depth, node)| (depth, node.shape, node.id))
        .collect();
    let member_ids: Vec<_> = members.iter().map(|member| member.id).collect();
    assert_eq!(
        shown,
        [
            (0, Some(Shape::Static(Strategy::OneForOne)), top.id()),
            (1, None, worker.id()),
            (1, Some(Shape::Dynamic), sessions.id()),
            (2, None, session.id()),
            (1, Some(Shape::Pool), pool.as_pool().id()),
            (2, None, member_ids[0]),
            (2, None, member_ids[1]),
        ]
    );
    let printed = tree.to_string();
    let expected = format!(
        "runtime\n\
         └─ {top} (supervisor, one_for_one)\n   \
            ├─ {worker} (permanent, running, 1 restart)\n   \
            ├─ {sessions} (dynamic supervisor, permanent, running)\n   \
            │  └─ {session} (temporary, running)\n   \
            └─ {pool} (pool, transient, running)\n      \
               ├─ {m0} (permanent, running)\n      \
               └─ {m1} (permanent, running)\n",
        top = top.id(),
        worker = worker.id(),
        sessions = sessions.id(),
        session = session.id(),
        pool = pool.as_pool().id(),
        m0 = member_ids[0],
        m1 = member_ids[1],
    );
    assert_eq!(printed, expected);

    assert_eq!(top.stop().await, actors::ExitReason::Stopped);
    // A supervisor that ended leaves the tree.
    assert!(supervision_tree(&context).roots.is_empty());
}

/// The plain display lists 16 children of a supervisor and counts the rest by label; the
/// alternate one lists them all.
#[runtime::test(timeout = "20s")]
async fn a_large_supervisor_is_summarized_unless_asked_for_all(context: runtime::Context) {
    let sessions = DynamicSupervisor::new("crowd").spawn(&context);
    let mut refs = Vec::new();
    for _ in 0..20 {
        refs.push(
            sessions
                .start_child(ChildSpec::new(|| Worker))
                .await
                .unwrap(),
        );
    }
    let tree = supervision_tree(&context);
    let plain = tree.to_string();
    assert_eq!(plain.lines().count(), 1 + 1 + 16 + 1, "{plain}");
    assert!(plain.ends_with("   └─ … 4 more (4 × worker)\n"), "{plain}");
    let all = format!("{tree:#}");
    assert_eq!(all.lines().count(), 1 + 1 + 20, "{all}");
    for child in &refs {
        assert!(all.contains(&child.id().to_string()));
    }
    sessions.stop().await;
}

/// A static supervisor keeps listing a child that is done for good, as stopped; a dynamic
/// one drops it.
#[runtime::test(timeout = "20s")]
async fn a_child_done_for_good_is_stopped_in_a_static_table_and_gone_from_a_dynamic_one(
    context: runtime::Context,
) {
    let mut top = Supervisor::new("keeper", Strategy::OneForOne);
    let done = top.child(ChildSpec::new(|| Worker).restart(Restart::Transient));
    let top = top.spawn(&context);
    done.stop().await;
    assert_eq!(
        top.which_children()
            .iter()
            .map(|child| child.status)
            .collect::<Vec<_>>(),
        [ChildStatus::Stopped]
    );
    assert_eq!(top.count_children().active, 0);

    let sessions = DynamicSupervisor::new("leaving").spawn(&context);
    let child = sessions
        .start_child(ChildSpec::new(|| Worker))
        .await
        .unwrap();
    sessions.terminate_child(child.id()).await.unwrap();
    assert!(sessions.which_children().is_empty());
    top.stop().await;
    sessions.stop().await;
}
