//! [`Slab`]: values in reusable slots, addressed by index. The task set, the supervision
//! nodes' children and the driver's in-flight operations all keep one.
//!
//! Invariants:
//! - A slot index stays valid (names the same value) from `insert` until `remove` or `drain`;
//!   afterwards it may be handed to another value, so holders of an index check identity
//!   before they remove.
//! - The slab never shrinks its storage: a long-lived owner keeps as many slots as it ever had
//!   live values at once.

/// Values in reusable slots.
pub(crate) struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Stores `value` and returns its slot.
    pub(crate) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(index) => {
                self.slots[index] = Some(value);
                index
            }
            None => {
                self.slots.push(Some(value));
                self.slots.len() - 1
            }
        }
    }

    /// The value in `index`, if any.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        self.slots.get(index).and_then(Option::as_ref)
    }

    /// The value in `index`, mutably, if any.
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.slots.get_mut(index).and_then(Option::as_mut)
    }

    /// Takes the value out of `index` if `matches` accepts it, freeing the slot.
    pub(crate) fn remove_if(
        &mut self,
        index: usize,
        matches: impl FnOnce(&T) -> bool,
    ) -> Option<T> {
        let slot = self.slots.get_mut(index)?;
        if !slot.as_ref().is_some_and(matches) {
            return None;
        }
        let value = slot.take();
        self.free.push(index);
        self.len -= 1;
        value
    }

    /// Takes every value out, leaving the slab empty.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> {
        self.free.clear();
        self.len = 0;
        std::mem::take(&mut self.slots).into_iter().flatten()
    }

    /// Number of values stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is stored.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots, used or free.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Iterates over `(slot, value)` pairs.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| slot.as_ref().map(|value| (index, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_removal_checks_identity() {
        let mut slab = Slab::default();
        let first = slab.insert("first");
        let second = slab.insert("second");
        assert_eq!(slab.len(), 2);
        assert_eq!(slab.remove_if(first, |value| *value == "other"), None);
        assert_eq!(
            slab.remove_if(first, |value| *value == "first"),
            Some("first")
        );
        assert_eq!(slab.insert("third"), first, "a freed slot is reused");
        assert_eq!(slab.get(second), Some(&"second"));
        assert_eq!(slab.capacity(), 2);
        let mut drained: Vec<_> = slab.drain().collect();
        drained.sort_unstable();
        assert_eq!(drained, ["second", "third"]);
        assert!(slab.is_empty());
    }
}
