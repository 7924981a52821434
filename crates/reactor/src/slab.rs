//! A slab whose keys carry a generation, so a key for a freed slot is never
//! mistaken for the slot's next occupant.

/// A slot key: index plus the generation the slot had when it was filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl Key {
    pub(crate) fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    pub(crate) fn from_u64(raw: u64) -> Key {
        Key {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// An empty slab with room for `n` entries (and their free-list
    /// places) before it allocates.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Slab {
            slots: Vec::with_capacity(n),
            free: Vec::with_capacity(n),
            len: 0,
        }
    }

    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            return Key {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len()).expect("slab holds at most u32::MAX entries");
        self.slots.push(Slot {
            generation: 0,
            value: Some(value),
        });
        // Room on the free list for every slot, made now (the slab grows
        // anyway): a later remove never allocates, however many of the
        // slots happen to be free at once.
        self.free
            .reserve(self.slots.len().saturating_sub(self.free.len()));
        Key {
            index,
            generation: 0,
        }
    }

    pub(crate) fn get(&self, key: Key) -> Option<&T> {
        let slot = self.slots.get(key.index as usize)?;
        if slot.generation == key.generation {
            slot.value.as_ref()
        } else {
            None
        }
    }

    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation == key.generation {
            slot.value.as_mut()
        } else {
            None
        }
    }

    /// Removes the value and bumps the slot's generation: every key handed
    /// out for this occupant is dead from now on.
    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation || slot.value.is_none() {
            return None;
        }
        let value = slot.value.take();
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(key.index);
        self.len -= 1;
        value
    }

    /// Entries the slab holds before it allocates.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Values held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Takes every value out, leaving the slab empty (generations bumped).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Some(v) = slot.value.take() {
                slot.generation = slot.generation.wrapping_add(1);
                self.free.push(index as u32);
                out.push(v);
            }
        }
        self.len = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reused_slot_rejects_old_key() {
        let mut slab = Slab::default();
        let a = slab.insert("a");
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b");
        assert_eq!(a.index, b.index, "slot is reused");
        assert_ne!(a, b);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn removing_every_slot_never_grows_the_free_list() {
        let mut slab = Slab::default();
        let keys: Vec<Key> = (0..100).map(|i| slab.insert(i)).collect();
        let room = slab.free.capacity();
        assert!(room >= 100, "free list made room for every slot: {room}");
        for k in keys {
            slab.remove(k);
        }
        assert_eq!(slab.free.capacity(), room, "a remove reallocated");
    }

    #[test]
    fn key_round_trips_through_u64() {
        let k = Key {
            index: 7,
            generation: 0xdead_beef,
        };
        assert_eq!(Key::from_u64(k.to_u64()), k);
    }
}
