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
//! - Slot 0 is kept inline: a slab that never holds two values at once allocates nothing
//!   (most supervision nodes with children have one).

/// A slot: a value, or a free slot naming the next free one.
enum Entry<T> {
    Occupied(T),
    Vacant { next: usize },
}

/// No next free slot.
const NONE: usize = usize::MAX;

/// Values in reusable slots.
pub(crate) struct Slab<T> {
    /// Slot 0, once used.
    first: Option<Entry<T>>,
    /// Slots 1 and up.
    rest: Vec<Entry<T>>,
    /// The first free slot, or `NONE`.
    free: usize,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            first: None,
            rest: Vec::new(),
            free: NONE,
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    fn entry(&self, index: usize) -> Option<&Entry<T>> {
        match index {
            0 => self.first.as_ref(),
            index => self.rest.get(index - 1),
        }
    }

    fn entry_mut(&mut self, index: usize) -> Option<&mut Entry<T>> {
        match index {
            0 => self.first.as_mut(),
            index => self.rest.get_mut(index - 1),
        }
    }

    /// Stores `value` and returns its slot.
    pub(crate) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        if self.free == NONE {
            if self.first.is_none() {
                self.first = Some(Entry::Occupied(value));
                return 0;
            }
            self.rest.push(Entry::Occupied(value));
            return self.rest.len();
        }
        let index = self.free;
        let entry = self
            .entry_mut(index)
            .expect("the free list names only existing slots");
        match std::mem::replace(entry, Entry::Occupied(value)) {
            Entry::Vacant { next } => self.free = next,
            Entry::Occupied(_) => unreachable!("the free list names only vacant slots"),
        }
        index
    }

    /// The value in `index`, if any.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        match self.entry(index)? {
            Entry::Occupied(value) => Some(value),
            Entry::Vacant { .. } => None,
        }
    }

    /// The value in `index`, mutably, if any.
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        match self.entry_mut(index)? {
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
        let free = self.free;
        let slot = self.entry_mut(index)?;
        if !matches!(slot, Entry::Occupied(value) if matches(value)) {
            return None;
        }
        let entry = std::mem::replace(slot, Entry::Vacant { next: free });
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
        self.first
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.rest))
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
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// Iterates over `(slot, value)` pairs.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.first
            .iter()
            .chain(&self.rest)
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
