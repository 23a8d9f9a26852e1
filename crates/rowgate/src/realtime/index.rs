//! One table's subscriptions, indexed by an equality their filter requires (`id=eq.5`,
//! `team_id=in.(1,2)`: the client's filter or the role's row filter): a change is matched
//! against the subscriptions its rows' values can pass and those no equality narrows, not
//! against all of them, so 100,000 subscriptions to other values cost a lookup, not 100,000
//! evaluations. The keys are `rowgate-query`'s [`EqKey`]s, which find exactly the filters its
//! evaluator passes; every candidate is still evaluated whole.

use std::collections::HashMap;

use indexmap::{IndexMap, IndexSet};
use rowgate_query::ast::{Condition, Operand, Operator};
use rowgate_query::eval::EqKey;

use super::capture::Change;

/// A subscription's place: its connection and its tag there (a Supabase binding's id, else 0).
pub type Ref = (u64, u64);

/// What the index needs of a subscription.
pub trait Indexed {
    /// Its place.
    fn place(&self) -> Ref;
    /// Its filter (ANDed conditions).
    fn filter(&self) -> &[Condition];
}

/// The subscriptions of one table.
pub struct TableSubs<S> {
    /// Those no equality narrows, matched against every change (held densely: a fan-out to
    /// every subscriber iterates them as an array).
    unkeyed: IndexMap<Ref, S>,
    /// Those with an equality, found through `by_value`.
    keyed: IndexMap<Ref, S>,
    /// Column → value key → the keyed subscriptions requiring that column to equal it.
    by_value: HashMap<String, HashMap<EqKey, IndexSet<Ref>>>,
    /// Connection → its subscriptions' tags here (closing a connection finds them in O(1)).
    tags: HashMap<u64, Vec<u64>>,
}

impl<S> Default for TableSubs<S> {
    fn default() -> Self {
        TableSubs {
            unkeyed: IndexMap::new(),
            keyed: IndexMap::new(),
            by_value: HashMap::new(),
            tags: HashMap::new(),
        }
    }
}

impl<S: Indexed> TableSubs<S> {
    /// Registers `sub`, in place of its connection's earlier one with the same tag.
    pub fn insert(&mut self, sub: S) {
        let at = sub.place();
        if !self.remove(at) {
            self.tags.entry(at.0).or_default().push(at.1);
        }
        match equality(sub.filter()) {
            Some((column, keys)) => {
                let buckets = self.by_value.entry(column.to_string()).or_default();
                for key in keys {
                    buckets.entry(key).or_default().insert(at);
                }
                self.keyed.insert(at, sub);
            }
            None => {
                self.unkeyed.insert(at, sub);
            }
        }
    }

    /// Removes the connection's subscription with `tag`; whether there was one.
    pub fn remove_tag(&mut self, connection: u64, tag: u64) -> bool {
        let removed = self.remove((connection, tag));
        if let Some(tags) = self.tags.get_mut(&connection) {
            tags.retain(|t| *t != tag);
            if tags.is_empty() {
                self.tags.remove(&connection);
            }
        }
        removed
    }

    /// Removes every subscription of the connection; whether it had any.
    pub fn remove_connection(&mut self, connection: u64) -> bool {
        let Some(tags) = self.tags.remove(&connection) else {
            return false;
        };
        for tag in tags {
            self.remove((connection, tag));
        }
        true
    }

    fn remove(&mut self, at: Ref) -> bool {
        if self.unkeyed.swap_remove(&at).is_some() {
            return true;
        }
        let Some(sub) = self.keyed.swap_remove(&at) else {
            return false;
        };
        if let Some((column, keys)) = equality(sub.filter()) {
            if let Some(buckets) = self.by_value.get_mut(column) {
                for key in keys {
                    if let Some(bucket) = buckets.get_mut(&key) {
                        bucket.swap_remove(&at);
                        if bucket.is_empty() {
                            buckets.remove(&key);
                        }
                    }
                }
                if buckets.is_empty() {
                    self.by_value.remove(column);
                }
            }
        }
        true
    }

    /// Whether none is left.
    pub fn is_empty(&self) -> bool {
        self.unkeyed.is_empty() && self.keyed.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.unkeyed.len() + self.keyed.len()
    }

    /// All of them.
    pub fn all(&self) -> impl Iterator<Item = &S> {
        self.unkeyed.values().chain(self.keyed.values())
    }

    /// Those `change` may concern: every unkeyed one, and the keyed ones whose equality its
    /// old or new row's value meets (each once).
    pub fn candidates(&self, change: &Change) -> impl Iterator<Item = &S> {
        let mut found: Vec<Ref> = Vec::new();
        let mut buckets_hit = 0;
        for (column, buckets) in &self.by_value {
            let mut keys = [change.new.as_ref(), change.old.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|row| row.get(column))
                .filter_map(|v| EqKey::of_value(&crate::job::json_value(v)));
            let first = keys.next();
            let second = keys.next().filter(|k| Some(k) != first.as_ref());
            for key in first.iter().chain(second.iter()) {
                if let Some(bucket) = buckets.get(key) {
                    found.extend(bucket.iter().copied());
                    buckets_hit += 1;
                }
            }
        }
        if buckets_hit > 1 {
            // an update between two values a subscription's list both holds
            found.sort_unstable();
            found.dedup();
        }
        self.unkeyed
            .values()
            .chain(found.into_iter().filter_map(|at| self.keyed.get(&at)))
    }
}

/// The first equality `filter` (ANDed conditions) requires of a column, as the keys of the
/// values it passes: `col=eq.v`, `col=in.(v,w)`, also inside a top-level `and=(…)`. `None`
/// when it requires none (or one no key describes).
fn equality(filter: &[Condition]) -> Option<(&str, Vec<EqKey>)> {
    filter.iter().find_map(|condition| match condition {
        Condition::Pred(p) if !p.negated && p.path.is_empty() => {
            let operands: Vec<&String> = match (&p.op, &p.operand, p.quantifier) {
                (Operator::Eq, Operand::Scalar(v), None) => vec![v],
                (Operator::In, Operand::List(items), _) if !items.is_empty() => {
                    items.iter().collect()
                }
                _ => return None,
            };
            let mut keys = Vec::new();
            for operand in operands {
                keys.extend(EqKey::of_operand(operand)?);
            }
            Some((p.column.as_str(), keys))
        }
        Condition::And {
            negated: false,
            items,
        } => equality(items),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    use crate::realtime::capture::Op;

    /// A connection's one subscription with a filter.
    struct Sub(u64, Vec<Condition>);

    impl Indexed for Sub {
        fn place(&self) -> Ref {
            (self.0, 0)
        }

        fn filter(&self) -> &[Condition] {
            &self.1
        }
    }

    fn sub(connection: u64, filter: &str) -> Sub {
        Sub(
            connection,
            crate::auth::policy::parse_filter(filter).expect("filter parses"),
        )
    }

    fn change(old: Option<serde_json::Value>, new: Option<serde_json::Value>) -> Change {
        let object = |v: serde_json::Value| v.as_object().cloned().expect("an object");
        Change {
            id: 1,
            table: "t".into(),
            op: if old.is_none() {
                Op::Insert
            } else if new.is_none() {
                Op::Delete
            } else {
                Op::Update
            },
            at: 0,
            key: None,
            old: old.map(object),
            new: new.map(object),
        }
    }

    fn candidates(subs: &TableSubs<Sub>, c: &Change) -> Vec<u64> {
        let mut found: Vec<u64> = subs.candidates(c).map(|s| s.0).collect();
        found.sort_unstable();
        found
    }

    /// A change finds the unkeyed subscriptions and the keyed ones its old or new value meets,
    /// each once; removals take subscriptions out of every bucket.
    #[test]
    fn a_change_finds_the_subscriptions_its_values_meet() {
        let mut subs = TableSubs::default();
        subs.insert(sub(1, "id=eq.5"));
        subs.insert(sub(2, "id=in.(5,6)"));
        subs.insert(sub(3, "points=gt.3"));
        subs.insert(sub(4, "and=(id.eq.6,name.eq.x)"));
        subs.insert(sub(5, "id=eq.5.0"));
        subs.insert(sub(6, "id=not.eq.5"));
        assert_eq!(subs.len(), 6);
        // a subscription made again replaces the connection's earlier one, however often
        for _ in 0..3 {
            subs.insert(sub(5, "id=eq.5.0"));
        }
        assert_eq!((subs.len(), subs.tags[&5].len()), (6, 1));
        let insert = change(None, Some(json!({"id": 5, "points": 1})));
        assert_eq!(candidates(&subs, &insert), vec![1, 2, 3, 5, 6]);
        let text = change(None, Some(json!({"id": "5"})));
        assert_eq!(candidates(&subs, &text), vec![1, 2, 3, 6]);
        let moved = change(Some(json!({"id": 5})), Some(json!({"id": 6})));
        assert_eq!(candidates(&subs, &moved), vec![1, 2, 3, 4, 5, 6]);
        let elsewhere = change(None, Some(json!({"id": 7})));
        assert_eq!(candidates(&subs, &elsewhere), vec![3, 6]);
        assert!(subs.remove_connection(2));
        assert!(!subs.remove_connection(2));
        assert!(subs.remove_tag(5, 0));
        assert_eq!(candidates(&subs, &moved), vec![1, 3, 4, 6]);
        for connection in [1, 3, 4, 6] {
            subs.remove_connection(connection);
        }
        assert!(subs.is_empty() && subs.by_value.is_empty() && subs.tags.is_empty());
    }
}
