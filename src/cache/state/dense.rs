//! Filling an `imbl::OrdMap` with keys in order so that its leaves come out
//! full rather than half full.
//!
//! The map splits a full leaf of sixteen in the middle: keys inserted in
//! ascending order leave every leaf behind them with eight, which doubled
//! what a store entry cost (issue 47). Inserting every other key of an
//! ascending run first leaves half-full leaves spread over the run's whole
//! range; the keys between then fill each of them without a split.

use imbl::OrdMap;

/// Inserts `run`, whose keys are strictly ascending, every other one first.
pub(crate) fn insert_ascending<K: Ord + Clone, V: Clone>(map: &mut OrdMap<K, V>, run: &[(K, V)]) {
    debug_assert!(run.windows(2).all(|pair| pair[0].0 < pair[1].0), "a run in strict key order");
    for (key, value) in run.iter().step_by(2).chain(run.iter().skip(1).step_by(2)) {
        map.insert(key.clone(), value.clone());
    }
}
