//! The bound on model calls in flight per model ([`TreeConfig::max_model_calls`]): a
//! semaphore per model name, shared by every agent of the tree, so a call waits its turn
//! inside the tree and an adapter's timeout measures only the server's work.
//!
//! # Invariants
//!
//! * With a bound `n`, at most `n` calls of one model name (a definition's `model`; the
//!   definitions naming none share one key) are in flight at any instant, across the whole
//!   tree: a turn holds a permit for one attempt, from just before the call to its return,
//!   and never during a retry's backoff.
//! * A wait for a permit is a future of the turn: dropping the turn (an abort, a kill, a
//!   shutdown) ends the wait at once, and a permit held is released when its attempt ends or
//!   is dropped.
//! * The map is a leaf lock: it is looked up (and a semaphore added) under it, never held
//!   across an `.await`; the wait is on the semaphore, outside it.
//! * Unbounded (the default), nothing is looked up, locked or allocated.
//!
//! [`TreeConfig::max_model_calls`]: crate::TreeConfig::max_model_calls

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The permits of model calls of one tree.
pub(crate) struct ModelPermits {
    /// Calls in flight allowed per model name; `None`: unbounded.
    bound: Option<usize>,
    /// The calls of definitions that name no model.
    unnamed: Option<Arc<Semaphore>>,
    /// The calls of each named model, added when first called. A leaf lock.
    named: Mutex<HashMap<Box<str>, Arc<Semaphore>>>,
}

impl ModelPermits {
    /// Permits for at most `bound` calls in flight per model (`None`: no bound).
    pub(crate) fn new(bound: Option<usize>) -> Self {
        ModelPermits {
            bound,
            unnamed: bound.map(|n| Arc::new(Semaphore::new(n))),
            named: Mutex::default(),
        }
    }

    /// The semaphore of calls to `model`, or `None` when calls are not bounded.
    fn of(&self, model: Option<&str>) -> Option<Arc<Semaphore>> {
        let bound = self.bound?;
        let Some(name) = model else {
            return self.unnamed.clone();
        };
        let mut named = self.named.lock();
        if let Some(semaphore) = named.get(name) {
            return Some(semaphore.clone());
        }
        let semaphore = Arc::new(Semaphore::new(bound));
        named.insert(name.into(), semaphore.clone());
        Some(semaphore)
    }

    /// Waits for a permit to call `model` (none is needed when calls are not bounded), to
    /// be held for one attempt. Dropping the future ends the wait.
    pub(crate) async fn acquire(&self, model: Option<&str>) -> Option<OwnedSemaphorePermit> {
        let semaphore = self.of(model)?;
        // Boxed: only a bounded tree's turns carry the wait's state.
        Box::pin(semaphore.acquire_owned()).await.ok()
    }
}

impl fmt::Debug for ModelPermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelPermits")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_name_has_its_own_bound_and_no_name_is_one_key() {
        let permits = ModelPermits::new(Some(2));
        let a = permits.of(Some("a")).unwrap();
        assert!(Arc::ptr_eq(&a, &permits.of(Some("a")).unwrap()));
        let b = permits.of(Some("b")).unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        let none = permits.of(None).unwrap();
        assert!(Arc::ptr_eq(&none, &permits.of(None).unwrap()));
        assert!(!Arc::ptr_eq(&none, &a));
        assert_eq!(a.available_permits(), 2);
        assert!(ModelPermits::new(None).of(Some("a")).is_none());
        assert!(ModelPermits::new(None).of(None).is_none());
    }

    #[tokio::test]
    async fn a_permit_is_held_until_dropped() {
        let permits = ModelPermits::new(Some(1));
        let held = permits.acquire(Some("m")).await.unwrap();
        let semaphore = permits.of(Some("m")).unwrap();
        assert_eq!(semaphore.available_permits(), 0);
        drop(held);
        assert_eq!(semaphore.available_permits(), 1);
        assert!(ModelPermits::new(None).acquire(Some("m")).await.is_none());
    }
}
