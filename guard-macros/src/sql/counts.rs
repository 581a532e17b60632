//! The read of how many rows are in each state: what an operator's
//! overview shows.

use crate::dialect::Dialect;
use crate::model::Model;
use crate::plan::Col;

/// How far each state is counted: a state with more rows reads as
/// `COUNT_CAP` and more.
pub const COUNT_CAP: u64 = 10_000;

impl Dialect {
    /// `SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM t WHERE c = 'a' LIMIT
    /// cap + 1) …), …`: one row, one column per state in declaration order
    /// ([`Col::Count`]), each counted up to one past [`COUNT_CAP`], so that
    /// the read stops there however large the table. With an index on the
    /// status column each count reads at most that many index entries.
    pub fn counts(self, model: &Model) -> String {
        let column = self.quote(&model.column);
        let table = self.quote(&model.table);
        let counts: Vec<String> = model
            .states
            .iter()
            .enumerate()
            .map(|(i, state)| {
                let test = self.status_is(&column, &format!("= '{}'", state.db));
                let count = format!(
                    "(SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {test} LIMIT {}) AS __sg_n{i})",
                    COUNT_CAP + 1
                );
                // The derive refuses a machine of more states than a column
                // index holds (`check`).
                Col::Count(u8::try_from(i).unwrap_or(u8::MAX)).of(&count)
            })
            .collect();
        format!("SELECT {}", counts.join(", "))
    }
}
