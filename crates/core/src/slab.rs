//! A slab with generation-checked handles: a stale handle (to a slot that was freed and
//! reused) never reaches the new occupant.

/// A handle: slot index plus the generation it was issued in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl Key {
    /// The key as one number (index in the low half), e.g. to tag squeue work items.
    pub fn as_u64(self) -> u64 {
        u64::from(self.gen) << 32 | u64::from(self.idx)
    }

    /// The key [`Key::as_u64`] made `v` from.
    pub fn from_u64(v: u64) -> Key {
        Key {
            idx: v as u32,
            gen: (v >> 32) as u32,
        }
    }
}

#[derive(Debug)]
struct Slot<T> {
    gen: u32,
    val: Option<T>,
}

/// Values addressed by [`Key`].
#[derive(Debug)]
pub struct Slab<T> {
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
    pub fn insert(&mut self, val: T) -> Key {
        self.len += 1;
        if let Some(idx) = self.free.pop() {
            let s = &mut self.slots[idx as usize];
            s.gen = s.gen.wrapping_add(1);
            s.val = Some(val);
            Key { idx, gen: s.gen }
        } else {
            let idx = self.slots.len() as u32;
            self.slots.push(Slot {
                gen: 0,
                val: Some(val),
            });
            Key { idx, gen: 0 }
        }
    }

    pub fn get(&self, k: Key) -> Option<&T> {
        let s = self.slots.get(k.idx as usize)?;
        if s.gen == k.gen {
            s.val.as_ref()
        } else {
            None
        }
    }

    pub fn get_mut(&mut self, k: Key) -> Option<&mut T> {
        let s = self.slots.get_mut(k.idx as usize)?;
        if s.gen == k.gen {
            s.val.as_mut()
        } else {
            None
        }
    }

    /// Two distinct live entries at once (`None` if either is missing or `a == b`).
    pub fn get2_mut(&mut self, a: Key, b: Key) -> Option<(&mut T, &mut T)> {
        if a.idx == b.idx {
            return None;
        }
        let (lo, hi, swap) = if a.idx < b.idx {
            (a, b, false)
        } else {
            (b, a, true)
        };
        let (left, right) = self.slots.split_at_mut(hi.idx as usize);
        let x = left.get_mut(lo.idx as usize)?;
        let y = right.first_mut()?;
        if x.gen != lo.gen || y.gen != hi.gen {
            return None;
        }
        let (x, y) = (x.val.as_mut()?, y.val.as_mut()?);
        Some(if swap { (y, x) } else { (x, y) })
    }

    /// The key the next [`Slab::insert`] will return.
    pub fn next_key(&self) -> Key {
        match self.free.last() {
            Some(&idx) => Key {
                idx,
                gen: self.slots[idx as usize].gen.wrapping_add(1),
            },
            None => Key {
                idx: self.slots.len() as u32,
                gen: 0,
            },
        }
    }

    pub fn remove(&mut self, k: Key) -> Option<T> {
        let s = self.slots.get_mut(k.idx as usize)?;
        if s.gen != k.gen || s.val.is_none() {
            return None;
        }
        self.len -= 1;
        self.free.push(k.idx);
        s.val.take()
    }

    /// The key of the value in slot `idx`, if occupied.
    pub fn key_at(&self, idx: u32) -> Option<Key> {
        let s = self.slots.get(idx as usize)?;
        s.val.as_ref().map(|_| Key { idx, gen: s.gen })
    }

    pub fn iter(&self) -> impl Iterator<Item = (Key, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.val.as_ref().map(|v| {
                (
                    Key {
                        idx: i as u32,
                        gen: s.gen,
                    },
                    v,
                )
            })
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get2_mut_and_next_key() {
        let mut s = Slab::default();
        let k = s.next_key();
        let a = s.insert(1);
        assert_eq!(k, a);
        let b = s.insert(2);
        assert!(s.get2_mut(a, a).is_none());
        let (x, y) = s.get2_mut(b, a).unwrap();
        assert_eq!((*x, *y), (2, 1));
        *x = 20;
        s.remove(a);
        let k = s.next_key();
        assert!(s.get2_mut(a, b).is_none());
        assert_eq!(s.insert(3), k);
        assert_eq!(s.get(b), Some(&20));
    }

    #[test]
    fn stale_keys_miss() {
        let mut s = Slab::default();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(a.idx, b.idx);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.len(), 1);
    }
}
