//! The runtime's Prometheus registry and the task metrics it keeps.
//!
//! Invariants:
//! - One registry per runner; every metric a context registers is named with the context's
//!   label path as prefix, so two subsystems never clash.
//! - `runtime_tasks_spawned{name,placement}` counts spawn attempts, including factories that
//!   panicked. `runtime_tasks_running{...}` is raised before the factory runs and lowered
//!   exactly once, when the task's result is published: it finished, was cancelled or its
//!   factory failed.
//! - `runtime_pending_operations` is the number of io_uring operations in flight summed over
//!   every worker.
//! - `runtime_ring_unknown_completions_total` counts completions whose `user_data` named no
//!   live operation: a driver bug, so it stays zero (the test suite checks it does).
//! - `runtime_ring_receive_buffers_refused_total` counts rings whose provided receive buffers
//!   the kernel refused to register (their streams receive one call at a time instead).
//! - The values every spawn, task end and ring operation changes (`tasks_spawned`,
//!   `tasks_running`, `pending_operations`) are kept in per-thread cells ([`crate::sharded`]) and
//!   summed when read: a spawn on one worker and the task's end on another then write
//!   different cache lines instead of passing one line between the cores for every task. A
//!   read is exact once the writers are quiet; a read racing writers may count an operation
//!   on one thread and not its counterpart on another.

use crate::sharded::{ShardedCounter, ShardedGauge};
use crate::sync::Mutex;
use crate::task::Execution;
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};

/// Labels of a task family: its context's name, its placement and the context's attributes.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Label(Vec<(String, String)>);

impl Label {
    /// The label of tasks spawned from a context named `name` with the given placement.
    pub(crate) fn task(name: String, execution: Execution) -> Self {
        Self(vec![
            ("name".into(), name),
            ("placement".into(), execution.as_str().into()),
        ])
    }

    /// The same label with the context's attributes added.
    pub(crate) fn with_attributes(mut self, attributes: &[(&'static str, String)]) -> Self {
        self.0.extend(
            attributes
                .iter()
                .map(|(key, value)| ((*key).to_string(), value.clone())),
        );
        self
    }
}

impl EncodeLabelSet for Label {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

/// The runner's metrics.
pub(crate) struct RuntimeMetrics {
    registry: Mutex<Registry>,
    pub(crate) tasks_spawned: Family<Label, ShardedCounter>,
    pub(crate) tasks_running: Family<Label, ShardedGauge>,
    pub(crate) pending_operations: ShardedGauge,
    pub(crate) unknown_completions: Counter,
    pub(crate) receive_buffers_refused: Counter,
    pub(crate) tasks_live: Gauge,
}

impl RuntimeMetrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let tasks_spawned = Family::<Label, ShardedCounter>::default();
        let tasks_running = Family::<Label, ShardedGauge>::default();
        let pending_operations = ShardedGauge::default();
        let unknown_completions = Counter::default();
        let receive_buffers_refused = Counter::default();
        let tasks_live = Gauge::default();
        registry.register(
            "runtime_tasks_spawned",
            "Tasks spawned, by context name and placement",
            tasks_spawned.clone(),
        );
        registry.register(
            "runtime_tasks_running",
            "Tasks running now, by context name and placement",
            tasks_running.clone(),
        );
        registry.register(
            "runtime_pending_operations",
            "io_uring operations in flight on all workers",
            pending_operations.clone(),
        );
        registry.register(
            "runtime_ring_unknown_completions",
            "io_uring completions that named no live operation (a driver bug; always zero)",
            unknown_completions.clone(),
        );
        registry.register(
            "runtime_ring_receive_buffers_refused",
            "Rings whose provided receive buffers the kernel refused (their streams receive one \
             call at a time)",
            receive_buffers_refused.clone(),
        );
        registry.register(
            "runtime_tasks_live",
            "Tasks in the task set, refreshed by the runner's service task",
            tasks_live.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            tasks_spawned,
            tasks_running,
            pending_operations,
            unknown_completions,
            receive_buffers_refused,
            tasks_live,
        }
    }

    /// The metrics every worker's ring updates.
    pub(crate) fn ring(&self) -> crate::driver::RingMetrics {
        crate::driver::RingMetrics {
            pending_operations: self.pending_operations.clone(),
            unknown_completions: self.unknown_completions.clone(),
            receive_buffers_refused: self.receive_buffers_refused.clone(),
        }
    }

    /// Registers a user metric under `name` (already prefixed).
    pub(crate) fn register(&self, name: String, help: String, metric: impl Metric) {
        self.registry.lock().register(name, help, metric);
    }

    /// Runs `f` on the registry, for metrics registered under names of their own.
    pub(crate) fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        f(&mut self.registry.lock())
    }

    /// Prometheus text exposition of everything registered, ending in `# EOF`.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock())
            .expect("writing to a String cannot fail");
        out
    }
}
