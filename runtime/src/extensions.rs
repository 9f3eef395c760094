//! Values that libraries built on the runtime (the `actors` crate) keep once per runtime, such
//! as their metric families: made on first use, shared by every context of the runner, dropped
//! with it (`Context::extension`).

use crate::sync::Mutex;
use std::any::{Any, TypeId};
use std::sync::Arc;

/// One value per type.
#[derive(Default)]
pub(crate) struct Extensions {
    values: Mutex<Vec<(TypeId, Arc<dyn Any + Send + Sync>)>>,
}

impl Extensions {
    /// The value of type `T`, made by `init` if there is none yet. `init` runs under the lock,
    /// so it runs once per runtime.
    pub(crate) fn get_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut values = self.values.lock();
        let found = values
            .iter()
            .find(|(id, _)| *id == TypeId::of::<T>())
            .map(|(_, value)| value.clone());
        let value = found.unwrap_or_else(|| {
            let value: Arc<dyn Any + Send + Sync> = Arc::new(init());
            values.push((TypeId::of::<T>(), value.clone()));
            value
        });
        value
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("stored under its own type id"))
    }
}
