//! `set(...)` assignments and guards: their columns, fragments and the
//! values they bind per call.

use syn::ext::IdentExt;

use crate::attr::{GuardAttr, SetItem, SetValue};
use crate::ctxt::Ctxt;
use crate::ident;
use crate::model::{Assign, Guard};
use crate::sqltext;

/// The most `bind(Type)` values one transition takes: the runtime's
/// `Binds` is implemented for tuples of values up to this length.
const MAX_BINDS: usize = 6;

/// `guard = "…"`: one SQL condition, through the same allow-list as `set`
/// expressions; its `:name` placeholders are the declared parameters, each
/// read once, in declaration order.
pub(super) fn check_guard(
    cx: &mut Ctxt,
    attr: &GuardAttr,
    set: &[(String, Assign)],
) -> Option<Guard> {
    let lit = &attr.condition;
    let condition = lit.value();
    if condition.trim().is_empty() {
        cx.error(lit, "empty guard condition");
        return None;
    }
    let tokens = match sqltext::tokenize(&condition) {
        Ok(tokens) => tokens,
        Err(why) => {
            cx.error(lit, format!("guard {condition:?} {why}"));
            return None;
        }
    };
    let mut ok = true;
    for (i, param) in attr.params.iter().enumerate() {
        let name = param.name.unraw().to_string();
        if let Some(first) = attr.params[..i].iter().find(|p| p.name == param.name) {
            ok = false;
            cx.duplicate(
                &param.name,
                format!("guard parameter `{name}` is declared twice"),
                &first.name,
                "first declared here",
            );
        } else if set
            .iter()
            .any(|(col, v)| v.bound().is_some() && *col == name)
        {
            ok = false;
            cx.error(
                &param.name,
                format!(
                    "`{name}` is also a `set` value bound per call; the constructor takes one \
                     parameter per name, so give the guard's another"
                ),
            );
        }
    }
    let start = condition.as_ptr() as usize;
    let mut at = Vec::new();
    let mut used = Vec::new();
    for token in &tokens {
        let sqltext::Token::Param(name) = *token else {
            continue;
        };
        // The name is a slice of `condition`; its colon is the byte before.
        let offset = name.as_ptr() as usize - start;
        at.push(offset - 1..offset + name.len());
        used.push(name);
    }
    let declared: Vec<String> = attr
        .params
        .iter()
        .map(|p| p.name.unraw().to_string())
        .collect();
    for name in &used {
        if !declared.iter().any(|d| d == name) {
            ok = false;
            cx.error(
                lit,
                format!(
                    "guard {condition:?} reads `:{name}`, which it does not declare; write \
                     `guard(\"…\", {name} = bind(Type))`"
                ),
            );
        }
    }
    for param in &attr.params {
        let name = param.name.unraw().to_string();
        if !used.contains(&name.as_str()) {
            ok = false;
            cx.error(
                &param.name,
                format!(
                    "guard parameter `{name}` is declared but the condition never reads `:{name}`"
                ),
            );
        }
    }
    if ok && used.iter().copied().ne(declared.iter().map(String::as_str)) {
        // MySQL's `?` are positional: the values go in the order the
        // condition reads them, which is the order they are declared.
        ok = false;
        cx.error(
            lit,
            format!(
                "guard {condition:?} reads its parameters as {}; read each once, in the order \
                 declared ({})",
                used.iter()
                    .map(|n| format!(":{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                declared.join(", ")
            ),
        );
    }
    ok.then(|| Guard {
        text: condition.clone(),
        at,
        params: attr
            .params
            .iter()
            .map(|p| (p.name.unraw().to_string(), p.ty.clone()))
            .collect(),
    })
}

pub(super) fn check_set(
    cx: &mut Ctxt,
    items: &[SetItem],
    reserved: &[(&str, &str)],
    since_columns: &[String],
    written: &[(&str, &str)],
) -> Option<Vec<(String, Assign)>> {
    let mut ok = true;
    let mut out: Vec<(String, Assign)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let column = item.column.unraw().to_string();
        // SQLite and MySQL compare column names without regard to case.
        let same = |other: &str| other.eq_ignore_ascii_case(&column);
        if let Err(why) = ident::check_ident(&column) {
            ok = false;
            cx.error(
                &item.column,
                format!("column `{column}` is not a valid SQL identifier: it {why}"),
            );
        } else if let Some((_, why)) = reserved.iter().find(|(r, _)| same(r)) {
            ok = false;
            cx.error(&item.column, format!("{why}; `set` is for other columns"));
        } else if since_columns.iter().any(|c| same(c)) {
            ok = false;
            cx.error(
                &item.column,
                "transitions into an in-flight state stamp its `since` column themselves; \
                 `set` is for other columns",
            );
        } else if let Some(first) = items[..i]
            .iter()
            .find(|f| same(&f.column.unraw().to_string()))
        {
            ok = false;
            cx.duplicate(
                &item.column,
                format!("column `{column}` is set twice"),
                &first.column,
                "first set here",
            );
        }
        let lit = match &item.value {
            SetValue::Bind(ty) => {
                let binds = out.iter().filter(|(_, a)| a.bound().is_some()).count();
                if binds == MAX_BINDS {
                    ok = false;
                    cx.error(
                        ty,
                        format!(
                            "a transition binds at most {MAX_BINDS} values per call; \
                             this is one more"
                        ),
                    );
                }
                out.push((column, Assign::Bind(ty.clone())));
                continue;
            }
            SetValue::Expr(lit) => lit,
        };
        let expr = lit.value();
        if expr.trim().is_empty() {
            ok = false;
            cx.error(lit, "empty SQL expression");
        } else {
            match sqltext::tokenize(&expr) {
                Err(why) => {
                    ok = false;
                    cx.error(lit, format!("SQL expression {expr:?} {why}"));
                }
                Ok(tokens) => {
                    if let Some(name) = tokens.iter().find_map(|t| match t {
                        sqltext::Token::Param(name) => Some(*name),
                        _ => None,
                    }) {
                        ok = false;
                        cx.error(
                            lit,
                            format!(
                                "SQL expression {expr:?} contains `:{name}`: a `set` value bound \
                                 per call is written `{column} = bind(Type)`"
                            ),
                        );
                    } else if let Some(why) = reads_written(&tokens, &column, items, written) {
                        ok = false;
                        cx.error(lit, format!("SQL expression {expr:?} {why}"));
                    }
                }
            }
        }
        out.push((column, Assign::Expr(expr)));
    }
    ok.then_some(out)
}

/// Why an expression that sets `column` may not read what it reads, if it
/// may not.
///
/// MySQL applies the assignments of an UPDATE left to right, each one
/// seeing those before it; PostgreSQL and SQLite evaluate them all on the
/// row as it was. An expression that reads a column the same statement
/// writes would get a different value on MySQL, so that is refused. Its own
/// column is the exception (`attempts = "attempts + 1"`): MySQL emits the
/// `set` assignments first, and none writes a column twice, so nothing
/// before it has changed its own column.
pub(super) fn reads_written(
    tokens: &[sqltext::Token],
    column: &str,
    items: &[SetItem],
    written: &[(&str, &str)],
) -> Option<String> {
    for read in sqltext::columns_read(tokens) {
        if read.eq_ignore_ascii_case(column) {
            continue;
        }
        let what =
            if let Some((_, what)) = written.iter().find(|(w, _)| w.eq_ignore_ascii_case(read)) {
                (*what).to_owned()
            } else if items
                .iter()
                .any(|other| other.column.unraw().to_string().eq_ignore_ascii_case(read))
            {
                "set by this transition too".to_owned()
            } else {
                continue;
            };
        return Some(format!(
            "reads `{read}` ({what}), which the same UPDATE writes: MySQL applies assignments \
             left to right, so what it reads there would depend on their order; a `set` \
             expression may read its own column and the columns the transition does not write"
        ));
    }
    None
}
