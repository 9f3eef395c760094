//! [`Slab`]: values in reusable slots, addressed by index. The task set, the supervision
//! nodes' children and the driver's in-flight operations all keep one.
//!
//! Invariants:
//! - A slot index stays valid (names the same value) from `insert` until `remove` or `drain`;
//!   afterwards it may be handed to another value, so holders of an index check identity
//!   before they remove.
//! - The slab never shrinks its storage: a long-lived owner keeps as many slots as it ever had
//!   live values at once.
//! - Free slots form a list threaded through the slots themselves (the most recently freed
//!   first), so the slab is one allocation however values come and go.

/// A slot: a value, or a free slot naming the next free one.
enum Entry<T> {
    Occupied(T),
    Vacant { next: usize },
}

/// No next free slot.
const NONE: usize = usize::MAX;

/// Values in reusable slots.
pub(crate) struct Slab<T> {
    slots: Vec<Entry<T>>,
    /// The first free slot, or `NONE`.
    free: usize,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: NONE,
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Stores `value` and returns its slot.
    pub(crate) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        if self.free == NONE {
            self.slots.push(Entry::Occupied(value));
            return self.slots.len() - 1;
        }
        let index = self.free;
        match std::mem::replace(&mut self.slots[index], Entry::Occupied(value)) {
            Entry::Vacant { next } => self.free = next,
            Entry::Occupied(_) => unreachable!("the free list names only vacant slots"),
        }
        index
    }

    /// The value in `index`, if any.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        match self.slots.get(index)? {
            Entry::Occupied(value) => Some(value),
            Entry::Vacant { .. } => None,
        }
    }

    /// The value in `index`, mutably, if any.
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        match self.slots.get_mut(index)? {
            Entry::Occupied(value) => Some(value),
            Entry::Vacant { .. } => None,
        }
    }

    /// Takes the value out of `index` if `matches` accepts it, freeing the slot.
    pub(crate) fn remove_if(
        &mut self,
        index: usize,
        matches: impl FnOnce(&T) -> bool,
    ) -> Option<T> {
        let slot = self.slots.get_mut(index)?;
        if !matches!(slot, Entry::Occupied(value) if matches(value)) {
            return None;
        }
        let entry = std::mem::replace(slot, Entry::Vacant { next: self.free });
        self.free = index;
        self.len -= 1;
        match entry {
            Entry::Occupied(value) => Some(value),
            Entry::Vacant { .. } => unreachable!("checked occupied above"),
        }
    }

    /// Takes every value out, leaving the slab empty.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> {
        self.free = NONE;
        self.len = 0;
        std::mem::take(&mut self.slots)
            .into_iter()
            .filter_map(|entry| match entry {
                Entry::Occupied(value) => Some(value),
                Entry::Vacant { .. } => None,
            })
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
            .filter_map(|(index, slot)| match slot {
                Entry::Occupied(value) => Some((index, value)),
                Entry::Vacant { .. } => None,
            })
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

    #[test]
    fn freed_slots_are_reused_last_freed_first_and_never_twice() {
        let mut slab = Slab::default();
        let slots: Vec<usize> = (0..4).map(|value| slab.insert(value)).collect();
        for &slot in &[slots[1], slots[3], slots[0]] {
            assert!(slab.remove_if(slot, |_| true).is_some());
            assert_eq!(slab.remove_if(slot, |_| true), None, "freed once");
            assert_eq!(slab.get(slot), None);
        }
        assert_eq!(slab.len(), 1);
        let reused: Vec<usize> = (10..13).map(|value| slab.insert(value)).collect();
        assert_eq!(reused, [slots[0], slots[3], slots[1]]);
        assert_eq!(slab.insert(13), 4, "a full slab grows");
        assert_eq!(slab.capacity(), 5);
        let mut values: Vec<_> = slab.iter().map(|(_, value)| *value).collect();
        values.sort_unstable();
        assert_eq!(values, [2, 10, 11, 12, 13]);
    }
}
