//! PostgreSQL's wake-up trigger of an in-flight state: it notifies the
//! workers that listen (`stateguard::worker::WakeUps`, `Worker::listen`)
//! when a row enters a state a claim takes rows from. Built at expansion
//! time, as the enforcement DDL is, and emitted as a literal.

use crate::dialect::Dialect;
use crate::model::{Model, State};

/// PostgreSQL: the trigger that wakes listening workers
/// (`stateguard::worker::WakeUps`) when a row of `model`'s table is
/// inserted into, or moves into, a state that a transition into the
/// in-flight `state` takes rows from; empty when no transition leads into
/// it. It runs `stateguard_wake()`, which the runtime creates, and can run
/// twice.
pub fn wake_up(model: &Model, state: &State) -> String {
    let d = Dialect::Postgres;
    let Some(target) = model.states.iter().position(|s| s.db == state.db) else {
        return String::new();
    };
    let mut sources: Vec<&str> = Vec::new();
    for transition in model.transitions.iter().filter(|t| t.target == target) {
        for &source in &transition.sources {
            let db = model.states[source].db.as_str();
            if !sources.contains(&db) {
                sources.push(db);
            }
        }
    }
    if sources.is_empty() {
        return String::new();
    }
    let (_, bare) = d.split_schema(&model.table);
    let column = d.quote(&model.column);
    let states: Vec<String> = sources.iter().map(|s| format!("'{s}'")).collect();
    format!(
        "CREATE OR REPLACE TRIGGER {}\n    AFTER INSERT OR UPDATE OF {column} ON {}\n    \
         FOR EACH ROW WHEN (NEW.{column} IN ({}))\n    EXECUTE FUNCTION stateguard_wake()",
        d.quote(&format!("{bare}_{}_stateguard_wake", state.db)),
        d.quote(&model.table),
        states.join(", "),
    )
}
