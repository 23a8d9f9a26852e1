//! Strategies the property tests share.

use proptest::prelude::*;
use rowgate_query::{Condition, Predicate};

/// Logic trees over `predicate`: nested `and`/`or` groups (each maybe negated) up to `depth`
/// levels, each with `min_items..4` items.
pub fn logic_tree(
    predicate: impl Strategy<Value = Predicate> + 'static,
    depth: u32,
    min_items: usize,
) -> impl Strategy<Value = Condition> {
    predicate
        .prop_map(Condition::Pred)
        .prop_recursive(depth, depth * 6, 4, move |inner| {
            (
                any::<bool>(),
                any::<bool>(),
                prop::collection::vec(inner, min_items..4),
            )
                .prop_map(|(is_or, negated, items)| {
                    if is_or {
                        Condition::Or { negated, items }
                    } else {
                        Condition::And { negated, items }
                    }
                })
        })
}
