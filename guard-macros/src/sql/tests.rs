//! The statements' text and plans in every dialect.

use proc_macro2::Span;
use syn::Ident;

use crate::dialect::{DIALECTS, Dialect};
use crate::model::{InFlight, Model, State, Transition};
use crate::plan::{Col, Slot, render};

/// A statement's text in `d`, with its tag (PostgreSQL's) written `TAG`,
/// or what is wrong with its placeholders.
fn text(d: Dialect, marked: String) -> String {
    render(d, &marked).map_or_else(
        |error| error,
        |statement| match statement.tag {
            Some(tag) => {
                let bound = format!("${}", statement.plan.len());
                statement
                    .text
                    .replace(&crate::plan::tag_column(&tag, &bound), "TAG")
            }
            None => statement.text,
        },
    )
}

/// `pending -start-> sending (in flight) -confirm-> sent`, on
/// `billing.payouts` with a version column; `confirm` sets `sent_at`.
fn with_model(check: impl FnOnce(&Model)) {
    with_model_versioned(Some("version"), check);
}

/// The model of [`with_model`], with `version` as its version column.
fn with_model_versioned(version: Option<&str>, check: impl FnOnce(&Model)) {
    with_model_set(version, Vec::new(), check);
}

/// The model of [`with_model_versioned`], with `set` added to `confirm`'s
/// assignments.
fn with_model_set(
    version: Option<&str>,
    set: Vec<(String, crate::model::Assign)>,
    check: impl FnOnce(&Model),
) {
    with_model_changed(version, set, |_| {}, check);
}

/// The model of [`with_model_set`], changed by `change`.
fn with_model_changed(
    version: Option<&str>,
    set: Vec<(String, crate::model::Assign)>,
    change: impl FnOnce(&mut Model),
    check: impl FnOnce(&Model),
) {
    let ident = |name: &str| Ident::new(name, Span::call_site());
    let (machine, pending, sending, sent) = (
        ident("Payout"),
        ident("Pending"),
        ident("Sending"),
        ident("Sent"),
    );
    let (start, confirm) = (ident("start"), ident("confirm"));
    let state = |ident, db: &str| State {
        ident,
        db: db.to_owned(),
        in_flight: None,
        since: None,
        timeout_ms: None,
    };
    let mut states = vec![
        state(&pending, "pending"),
        state(&sending, "sending"),
        state(&sent, "sent"),
    ];
    states[1].in_flight = Some(InFlight {
        lease_ms: 30_500,
        since: "sending_since".to_owned(),
        done: 1,
        failed: None,
        retry: None,
    });
    let mut model = Model {
        ident: &machine,
        table: "billing.payouts".to_owned(),
        column: "status".to_owned(),
        key: vec!["id".to_owned()],
        key_types: None,
        order: vec!["id".to_owned()],
        history: None,
        outbox: "stateguard_outbox".to_owned(),
        version: version.map(str::to_owned),
        states,
        initial: 0,
        transitions: vec![
            Transition {
                name: &start,
                sources: vec![0],
                target: 1,
                set: Vec::new(),
                guard: None,
                emit: None,
            },
            Transition {
                name: &confirm,
                sources: vec![1],
                target: 2,
                set: vec![(
                    "sent_at".to_owned(),
                    crate::model::Assign::Expr("CURRENT_TIMESTAMP".to_owned()),
                )],
                guard: None,
                emit: None,
            },
        ],
    };
    model.transitions[1].set.extend(set);
    change(&mut model);
    check(&model);
}

#[test]
fn the_compare_and_set_in_every_dialect() {
    with_model(|model| {
        let [pg, lite, my] =
            DIALECTS.map(|d| text(d, d.update(model, &model.transitions[0], false)));
        assert_eq!(
            pg,
            "UPDATE \"billing\".\"payouts\" SET \"status\" = 'sending', \"sending_since\" = \
             statement_timestamp(), \"version\" = COALESCE(\"version\", 0) + 1 WHERE \"id\" = \
             $1 AND CAST(\"id\" AS TEXT) COLLATE \"C\" = CAST($1 AS TEXT) AND \"status\" IN \
             ('pending') RETURNING TAG, CAST(COALESCE(\"version\", 0) AS BIGINT), \
             COALESCE(CAST(EXTRACT(EPOCH FROM \"sending_since\") * 1000000 AS BIGINT), 0)"
        );
        assert_eq!(
            lite,
            "UPDATE \"billing\".\"payouts\" SET \"status\" = 'sending', \"sending_since\" = \
             strftime('%Y-%m-%d %H:%M:%f', 'now'), \"version\" = COALESCE(\"version\", 0) + 1 \
             WHERE \"id\" = ?1 AND CAST(\"id\" AS BLOB) = CAST(?1 AS BLOB) AND \"status\" IN \
             ('pending') RETURNING CAST(COALESCE(\"version\", 0) AS INTEGER), \
             COALESCE(CAST(ROUND(unixepoch(\"sending_since\", 'subsec') * 1000) AS INTEGER), 0)"
        );
        // No RETURNING on MySQL: the new version goes through
        // LAST_INSERT_ID, and the status is compared as bytes too.
        assert_eq!(
            my,
            "UPDATE `billing`.`payouts` SET `status` = 'sending', `sending_since` = \
             UTC_TIMESTAMP(3), `version` = LAST_INSERT_ID(COALESCE(`version`, 0) + 1) WHERE \
             `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND `status` IN \
             ('pending') AND CAST(`status` AS BINARY) IN ('pending')"
        );
    });
}

#[test]
fn mysql_writes_set_columns_before_the_status() {
    with_model(|model| {
        let confirm = &model.transitions[1];
        let pg = text(
            Dialect::Postgres,
            Dialect::Postgres.update(model, confirm, false),
        );
        assert!(
            pg.contains("SET \"status\" = 'sent', \"sent_at\" = (CURRENT_TIMESTAMP), "),
            "{pg}"
        );
        let my = text(Dialect::MySql, Dialect::MySql.update(model, confirm, false));
        assert!(
            my.contains("SET `sent_at` = (CURRENT_TIMESTAMP), `status` = 'sent', "),
            "{my}"
        );
    });
}

#[test]
fn only_mysql_reads_back() {
    with_model(|model| {
        let start = &model.transitions[0];
        assert_eq!(Dialect::Postgres.read_back(model, start), "");
        assert_eq!(Dialect::Sqlite.read_back(model, start), "");
        assert_eq!(
            text(Dialect::MySql, Dialect::MySql.read_back(model, start)),
            "SELECT CAST(LAST_INSERT_ID() AS SIGNED), (SELECT COALESCE(TIMESTAMPDIFF(\
             MICROSECOND, '1970-01-01 00:00:00', `sending_since`), 0) FROM \
             `billing`.`payouts` WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) \
             AND COALESCE(`version`, 0) = LAST_INSERT_ID())"
        );
    });
    // Without a version column the occurrence is 0, never a
    // `LAST_INSERT_ID()` left on the connection by another statement.
    with_model_versioned(None, |model| {
        let start = &model.transitions[0];
        assert_eq!(
            text(Dialect::MySql, Dialect::MySql.read_back(model, start)),
            "SELECT CAST(0 AS SIGNED), (SELECT COALESCE(TIMESTAMPDIFF(\
             MICROSECOND, '1970-01-01 00:00:00', `sending_since`), 0) FROM \
             `billing`.`payouts` WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY))"
        );
    });
}

#[test]
fn the_losing_read_locks_where_a_snapshot_would_lie() {
    with_model(|model| {
        let select = |d: Dialect, tx| text(d, d.select(model, tx));
        assert_eq!(
            select(Dialect::Postgres, false),
            "SELECT TAG, __sg_r.__sg_f, __sg_r.__sg_c0, __sg_r.__sg_c1 FROM (SELECT 1) AS \
             __sg_one LEFT JOIN LATERAL (SELECT CAST(1 AS BIGINT) AS __sg_f, \"status\"::text AS __sg_c0, \
             CAST(COALESCE(\"version\", 0) AS BIGINT) AS __sg_c1 FROM \"billing\".\"payouts\" \
             WHERE \"id\" = $1 AND CAST(\"id\" AS TEXT) COLLATE \"C\" = CAST($1 AS TEXT)) AS \
             __sg_r ON true"
        );
        // One row whether or not the key is there: none at all would be
        // another statement's answer.
        let pg = render(Dialect::Postgres, &Dialect::Postgres.select(model, false))
            .map_err(|e| e.to_string());
        assert_eq!(
            pg.map(|pg| pg.returns),
            Ok(vec![Col::Tag, Col::Found, Col::Status, Col::Occurrence])
        );
        let lite = render(Dialect::Sqlite, &Dialect::Sqlite.select(model, false));
        assert_eq!(
            lite.map(|lite| lite.returns),
            Ok(vec![Col::Status, Col::Occurrence])
        );
        assert!(select(Dialect::Postgres, true).ends_with(" FOR SHARE) AS __sg_r ON true"));
        assert!(!select(Dialect::Sqlite, true).contains("FOR"));
        assert!(select(Dialect::MySql, false).ends_with(" LOCK IN SHARE MODE"));
        assert!(select(Dialect::MySql, false).starts_with("SELECT CAST(`status` AS CHAR)"));
    });
}

#[test]
fn each_dialect_gets_the_plan_of_its_placeholders() -> Result<(), String> {
    let mut plans = Vec::new();
    with_model(|model| {
        let state = &model.states[1];
        let Some(f) = &state.in_flight else { return };
        let confirm = &model.transitions[1];
        plans = DIALECTS
            .map(|d| render(d, &d.follow_up(model, state, f, confirm)))
            .into_iter()
            .collect();
    });
    let [pg, lite, my] = <[Result<_, _>; 3]>::try_from(plans)
        .map_err(|plans| format!("{} dialects", plans.len()))?;
    let (pg, lite, my) = (pg?, lite?, my?);
    // Numbered: each value once, the key first.
    assert_eq!(
        pg.plan,
        [Slot::Key(0), Slot::Expected, Slot::Token, Slot::Tag]
    );
    assert_eq!(lite.plan, pg.plan[..3]);
    // Positional: the key twice, for its exact match.
    assert_eq!(
        my.plan,
        [Slot::Key(0), Slot::Key(0), Slot::Expected, Slot::Token]
    );
    Ok(())
}

#[test]
fn leases_and_their_placeholders() {
    with_model(|model| {
        let (state, in_flight) = (&model.states[1], &model.transitions[1]);
        assert!(state.in_flight.is_some(), "sending is in flight");
        let Some(f) = &state.in_flight else { return };
        // key, version, token: $1, $2, $3 (MySQL binds the key twice).
        let done = text(
            Dialect::Postgres,
            Dialect::Postgres.follow_up(model, state, f, in_flight),
        );
        assert!(
            done.ends_with(
                "AND COALESCE(\"version\", 0) = $2 AND COALESCE(CAST(EXTRACT(EPOCH FROM \
                 \"sending_since\") * 1000000 AS BIGINT), 0) = $3 RETURNING TAG"
            ),
            "{done}"
        );
        let expired = text(Dialect::Sqlite, Dialect::Sqlite.expired(model, state, f));
        assert!(
            expired.contains("'now', '-30.500 seconds')") && expired.ends_with("LIMIT ?1"),
            "{expired}"
        );
        let claim = text(Dialect::MySql, Dialect::MySql.claim(model, state, f));
        assert!(
            claim.contains("UTC_TIMESTAMP(3) - INTERVAL 30500000 MICROSECOND"),
            "{claim}"
        );
        let renew = text(Dialect::Postgres, Dialect::Postgres.renew(model, state, f));
        assert!(
            renew.starts_with(
                "UPDATE \"billing\".\"payouts\" SET \"sending_since\" = statement_timestamp()"
            ) && renew.ends_with(
                " RETURNING TAG, COALESCE(CAST(EXTRACT(EPOCH FROM \"sending_since\") * 1000000 \
                 AS BIGINT), 0)"
            ),
            "{renew}"
        );
    });
}

/// `confirm` with `bank_ref = bind(String)` beside `sent_at`.
fn with_valued_confirm(check: impl FnOnce(&Model)) {
    let string: syn::Type = syn::parse_quote!(String);
    let bank_ref = crate::model::Assign::Bind(Box::new(string));
    with_model_set(
        Some("version"),
        vec![("bank_ref".to_owned(), bank_ref)],
        check,
    );
}

#[test]
fn a_follow_up_with_values_spells_out_its_rows() -> Result<(), String> {
    use super::fenced::ROWS;
    let mut texts = Vec::new();
    with_valued_confirm(|model| {
        let state = &model.states[1];
        let Some(f) = &state.in_flight else { return };
        let confirm = &model.transitions[1];
        texts = DIALECTS
            .map(|d| d.follow_up_many(model, state, f, confirm))
            .into_iter()
            .collect();
    });
    assert_eq!(texts.len(), 3);
    let cells = 1 + 2 + 1; // key, occurrence, token, bank_ref
    for (d, marked) in DIALECTS.into_iter().zip(&texts) {
        let statement = render(d, marked)?;
        // Every value comes from a row's cell, none from the call.
        assert!(
            statement
                .plan
                .iter()
                .all(|slot| !matches!(slot, Slot::Value(_))),
            "{d:?}: {:?}",
            statement.plan
        );
        let rows: Vec<(u8, u8)> = (statement.plan.iter())
            .filter_map(|slot| match slot {
                Slot::Row(row, part) => Some((*row, *part)),
                _ => None,
            })
            .collect();
        // Each cell of each of the ROWS rows, once, row by row: the order
        // MySQL's positional placeholders need, and the numbered ones take.
        let expected: Vec<(u8, u8)> = (0..ROWS)
            .flat_map(|row| (0..cells).map(move |part| (row, part as u8)))
            .collect();
        assert_eq!(rows, expected, "{d:?}");
        assert!(statement.text.contains("__sg_i.__sg_v0"), "{d:?}");
        assert!(statement.text.contains(" UNION ALL SELECT "), "{d:?}");
    }
    // The first row names the columns the statement reads.
    let lite = text(Dialect::Sqlite, texts[1].clone());
    assert!(
        lite.contains("(SELECT ?1 AS __sg_k0, ?2 AS __sg_o, ?3 AS __sg_t, ?4 AS __sg_v0 UNION ALL SELECT ?5, ?6, ?7, ?8 UNION ALL"),
        "{lite}"
    );
    Ok(())
}

#[test]
fn a_follow_up_without_values_takes_one_document() {
    with_model(|model| {
        let state = &model.states[1];
        let Some(f) = &state.in_flight else { return };
        let confirm = &model.transitions[1];
        for d in DIALECTS {
            let marked = d.follow_up_many(model, state, f, confirm);
            let plan = render(d, &marked).map(|s| s.plan).unwrap_or_default();
            assert!(!plan.is_empty(), "{d:?}");
            assert!(
                plan.iter().all(|slot| !matches!(slot, Slot::Row(..))),
                "{d:?}: {plan:?}"
            );
        }
    });
}

/// Every statement that writes an outbox row takes its message id from
/// an effect key the runtime binds (one row's, a batch's beside its keys,
/// or a spelled-out row's), never from the row's columns: the message id
/// is `effect_key()` however long the key. A PostgreSQL claim of a
/// transition that emits only names its candidates, for `apply_many`'s
/// statement to move them with their effect keys.
#[test]
fn every_message_id_is_a_bound_effect_key() -> Result<(), String> {
    use crate::model::{Assign, Emit};
    use crate::sql::Match;

    let string: syn::Type = syn::parse_quote!(String);
    let valued = || {
        vec![(
            "bank_ref".to_owned(),
            Assign::Bind(Box::new(string.clone())),
        )]
    };
    for (history, set) in [(false, Vec::new()), (true, Vec::new()), (false, valued())] {
        let mut writers: Vec<(Dialect, String, String)> = Vec::new();
        let mut claims: Vec<(Dialect, String)> = Vec::new();
        let emit_all = |model: &mut Model| {
            model.history = history.then(|| "payout_history".to_owned());
            for t in &mut model.transitions {
                t.emit = Some(Emit {
                    topic: format!("payout.{}", t.name),
                    payload: Vec::new(),
                });
            }
        };
        with_model_changed(Some("version"), set, emit_all, |model| {
            let state = &model.states[1];
            let Some(f) = &state.in_flight else { return };
            let (start, confirm) = (&model.transitions[0], &model.transitions[1]);
            for d in DIALECTS {
                let mut add = |what: &str, marked: String| {
                    writers.push((d, what.to_owned(), marked));
                };
                add("update", d.update_with_history(model, start, false));
                add(
                    "update expecting",
                    d.update_with_history(model, start, true),
                );
                add("outbox insert", d.outbox_insert(model, start, false));
                add("many update", d.many_update(model, start, Match::Exact));
                add(
                    "many update by value",
                    d.many_update(model, start, Match::ByValue),
                );
                add("many outbox insert", d.many_outbox_insert(model, start));
                add("follow-up", d.follow_up(model, state, f, confirm));
                add(
                    "follow-up outbox insert",
                    d.follow_up_outbox_insert(model, state, f, confirm),
                );
                add("follow-up many", d.follow_up_many(model, state, f, confirm));
                add(
                    "follow-up many outbox insert",
                    d.follow_up_many_outbox_insert(model, state, f, confirm),
                );
                claims.push((d, d.claim_next(model, start)));
            }
        });
        let mut written = 0;
        for (d, what, marked) in writers {
            if !marked.contains("INSERT INTO \"stateguard_outbox\"")
                && !marked.contains("INSERT INTO `stateguard_outbox`")
            {
                continue;
            }
            written += 1;
            let statement = render(d, &marked)?;
            let bound = statement.plan.iter().any(|slot| {
                matches!(
                    slot,
                    Slot::EffectKey | Slot::EffectKeys | Slot::RowEffectKey(_)
                )
            });
            assert!(
                bound,
                "{d:?} {what}: no effect key bound: {}",
                statement.text
            );
            // No state is spelled into a message id.
            for state in ["':sending:'", "':sent:'"] {
                assert!(
                    !statement.text.contains(state),
                    "{d:?} {what}: {}",
                    statement.text
                );
            }
        }
        // Each dialect writes the messages of the one-row moves, the
        // batch and the batched follow-up somewhere.
        assert!(written >= 3 * 4, "{written} statements write messages");
        for (d, marked) in claims {
            let statement = render(d, &marked)?;
            assert!(
                !statement.text.contains("stateguard_outbox"),
                "{d:?}: {}",
                statement.text
            );
            // The candidates' read: it moves nothing.
            assert!(
                statement.text.starts_with("SELECT "),
                "{d:?}: {}",
                statement.text
            );
        }
    }
    Ok(())
}
