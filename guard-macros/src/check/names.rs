//! The table, its columns, the key, the claim order, the history table and
//! the version column.

use proc_macro2::Span;
use syn::LitStr;

use crate::ast::Input;
use crate::ctxt::Ctxt;
use crate::ident;

/// The most columns a key has: the runtime's key shapes go up to four.
const MAX_KEY_COLUMNS: usize = 4;

/// table, column and key: present, valid identifiers, key != column.
pub(super) fn check_names(cx: &mut Ctxt, input: &Input) -> Option<(String, String, Vec<String>)> {
    let attrs = &input.attrs;
    if attrs.span.is_none() {
        cx.error(
            input.ident,
            "missing #[state_machine(table = \"…\", column = \"…\", key = \"…\")]",
        );
        return None;
    }
    let mut get = |lit: &Option<LitStr>, what: &str, check: fn(&str) -> Result<(), String>| {
        let Some(lit) = lit else {
            if attrs.incomplete {
                // The attribute that failed to parse may have held it.
                return None;
            }
            cx.push(syn::Error::new(
                attrs.span.unwrap_or_else(Span::call_site),
                format!("missing `{what} = \"…\"` in #[state_machine(...)]"),
            ));
            return None;
        };
        let value = lit.value();
        match check(&value) {
            Ok(()) => Some(value),
            Err(why) => {
                cx.error(
                    lit,
                    format!("{what} {value:?} is not a valid SQL identifier: it {why}"),
                );
                None
            }
        }
    };
    let table = get(&attrs.table, "table", ident::check_table);
    let column = get(&attrs.column, "column", ident::check_ident);
    // Checked column by column below.
    let key = get(&attrs.key, "key", |_| Ok(()));
    let (table, column, key) = (table?, column?, key?);
    let key = check_key(cx, attrs.key.as_ref()?, &key)?;
    // SQLite and MySQL compare column names without regard to case, even
    // when quoted.
    if key.iter().any(|k| column.eq_ignore_ascii_case(k)) {
        cx.error(&attrs.key, "a key column cannot also be the status column");
        return None;
    }
    Some((table, column, key))
}

/// The columns of a history table besides the key's.
pub const HISTORY_COLUMNS: &[&str] = &[
    "history_id",
    "transition",
    "from_state",
    "to_state",
    "occurrence",
    "moved_at",
    "actor",
    "reason",
    "details",
];

/// `outbox = "billing.stateguard_outbox"`: a valid table name, neither the
/// machine's table nor its history table, that the relay reads.
pub(super) fn check_outbox(
    cx: &mut Ctxt,
    lit: &LitStr,
    table: &str,
    history: Option<&str>,
) -> Option<String> {
    let value = lit.value();
    if let Err(why) = ident::check_table(&value) {
        cx.error(
            lit,
            format!("outbox {value:?} is not a valid SQL table name: it {why}"),
        );
        return None;
    }
    if value.eq_ignore_ascii_case(table) || history.is_some_and(|h| value.eq_ignore_ascii_case(h)) {
        cx.error(lit, "the outbox must be a table of its own");
        return None;
    }
    // The relay reads `stateguard_outbox`, on the search path or in the
    // schema of `stores!`: a message written anywhere else would never
    // leave.
    if value.rsplit('.').next() != Some("stateguard_outbox") {
        cx.error(
            lit,
            format!(
                "the relay reads a table named `stateguard_outbox`; write `outbox = \
                 \"schema.stateguard_outbox\"` for the one in a schema of `stores!`, not {value:?}"
            ),
        );
        return None;
    }
    Some(value)
}

/// `history = "payout_transitions"`: a valid table name of its own, whose
/// fixed columns no key column shares.
pub(super) fn check_history(
    cx: &mut Ctxt,
    lit: &LitStr,
    key: &[String],
    table: &str,
) -> Option<String> {
    let value = lit.value();
    if let Err(why) = ident::check_table(&value) {
        cx.error(
            lit,
            format!("history {value:?} is not a valid SQL table name: it {why}"),
        );
        return None;
    }
    if value.eq_ignore_ascii_case(table) {
        cx.error(lit, "the history table must be a table of its own");
        return None;
    }
    if let Some(k) = key
        .iter()
        .find(|k| HISTORY_COLUMNS.iter().any(|c| c.eq_ignore_ascii_case(k)))
    {
        cx.error(
            lit,
            format!(
                "key column {k:?} has the name of a history column ({}); rename the key column",
                HISTORY_COLUMNS.join(", ")
            ),
        );
        return None;
    }
    Some(value)
}

/// `order = "created_at"` or `order = "priority, created_at"`: column
/// names, ascending, none twice.
pub(super) fn check_order(cx: &mut Ctxt, lit: &LitStr) -> Option<Vec<String>> {
    let order = lit.value();
    let columns: Vec<String> = order.split(',').map(|c| c.trim().to_owned()).collect();
    let mut ok = true;
    for (i, column) in columns.iter().enumerate() {
        if let Err(why) = ident::check_ident(column) {
            ok = false;
            cx.error(
                lit,
                format!(
                    "order column {column:?} is not a valid SQL identifier: it {why}; `order` \
                     lists column names, ascending, separated by `, `"
                ),
            );
        } else if columns[..i].iter().any(|c| c.eq_ignore_ascii_case(column)) {
            ok = false;
            cx.error(lit, format!("order column {column:?} is listed twice"));
        }
    }
    ok.then_some(columns)
}

/// `key = "id"` or `key = "tenant_id, id"`: one to four valid column
/// names, none twice.
pub(super) fn check_key(cx: &mut Ctxt, lit: &LitStr, key: &str) -> Option<Vec<String>> {
    let columns: Vec<String> = key.split(',').map(|c| c.trim().to_owned()).collect();
    let mut ok = true;
    for (i, column) in columns.iter().enumerate() {
        if column.is_empty() {
            ok = false;
            cx.error(
                lit,
                format!("key {key:?} has an empty column name; separate columns with `, `"),
            );
        } else if let Err(why) = ident::check_ident(column) {
            ok = false;
            cx.error(
                lit,
                format!("key column {column:?} is not a valid SQL identifier: it {why}"),
            );
        } else if columns[..i].iter().any(|c| c.eq_ignore_ascii_case(column)) {
            // SQLite and MySQL compare column names without regard to case.
            ok = false;
            cx.error(lit, format!("key column {column:?} is listed twice"));
        }
    }
    if columns.len() > MAX_KEY_COLUMNS {
        ok = false;
        cx.error(
            lit,
            format!(
                "key {key:?} has {} columns; a key has at most {MAX_KEY_COLUMNS}",
                columns.len()
            ),
        );
    }
    ok.then_some(columns)
}

/// `version = "…"`: a valid identifier, not the status or key column.
pub(super) fn check_version(
    cx: &mut Ctxt,
    input: &Input,
    reserved: &[(&str, &str)],
) -> Option<String> {
    let lit = input.attrs.version.as_ref()?;
    let value = lit.value();
    if let Err(why) = ident::check_ident(&value) {
        cx.error(
            lit,
            format!("version {value:?} is not a valid SQL identifier: it {why}"),
        );
        return None;
    }
    if reserved.iter().any(|(r, _)| r.eq_ignore_ascii_case(&value)) {
        cx.error(
            lit,
            "the version column must be a column of its own, not the status or key column",
        );
        return None;
    }
    Some(value)
}
