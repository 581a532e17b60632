//! What the derive records about a machine, and the SQL text it writes.

use stateguard::{StateMachine, UnknownState};

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(table = "billing.payouts", column = "status", key = "id")]
pub enum PayoutStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    #[transition(cancel -> Cancelled)]
    Pending,
    #[transition(confirm -> Sent, set(sent_at = "CURRENT_TIMESTAMP", r#type = "'wire'"))]
    #[transition(fail -> Failed)]
    #[transition(cancel -> Cancelled)]
    Sending,
    Sent,
    #[state(rename = "FAILED_FINAL")]
    Failed,
    Cancelled,
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "orders",
    column = "state",
    key = "order_id",
    rename_all = "SCREAMING-KEBAB-CASE"
)]
enum OrderState {
    #[state(initial)]
    #[transition(pay -> AwaitingShipment)]
    AwaitingPayment,
    AwaitingShipment,
}

#[test]
fn machine_metadata() {
    let machine = PayoutStatus::MACHINE;
    assert_eq!(machine.name(), "PayoutStatus");
    assert_eq!(machine.table(), "billing.payouts");
    assert_eq!(machine.column(), "status");
    assert_eq!(machine.key(), "id");
    assert_eq!(machine.initial(), PayoutStatus::Pending);
    let states: Vec<_> = machine
        .states()
        .iter()
        .map(|s| (s.variant(), s.db_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("Pending", "pending"),
            ("Sending", "sending"),
            ("Sent", "sent"),
            ("Failed", "FAILED_FINAL"),
            ("Cancelled", "cancelled"),
        ]
    );
    let names: Vec<_> = machine.transitions().iter().map(|t| t.name()).collect();
    assert_eq!(names, ["start", "cancel", "confirm", "fail"]);
    assert!(machine.is_terminal(PayoutStatus::Sent));
    assert!(!machine.is_terminal(PayoutStatus::Sending));
    let from_sending: Vec<_> = machine
        .transitions_from(PayoutStatus::Sending)
        .map(|t| t.name())
        .collect();
    assert_eq!(from_sending, ["cancel", "confirm", "fail"]);
}

#[test]
fn transitions_carry_sources_target_and_set_columns() {
    let cancel = PayoutStatus::cancel();
    assert_eq!(cancel.name(), "cancel");
    assert_eq!(
        cancel.sources(),
        [PayoutStatus::Pending, PayoutStatus::Sending]
    );
    assert_eq!(cancel.target(), PayoutStatus::Cancelled);
    let confirm = PayoutStatus::confirm().def();
    let set: Vec<_> = confirm
        .set_columns()
        .iter()
        .map(|c| (c.column(), c.expr()))
        .collect();
    // `r#type` is the column `type`.
    assert_eq!(set, [("sent_at", "CURRENT_TIMESTAMP"), ("type", "'wire'")]);
    assert_eq!(
        PayoutStatus::MACHINE.transition("fail").map(|t| t.target()),
        Some(PayoutStatus::Failed)
    );
}

/// `sql`'s PostgreSQL text with its tag written `TAG`: the first column
/// of its result, or what it returns where nothing else.
fn pg(sql: &stateguard::meta::Sql) -> String {
    let [postgres, sqlite, mysql] = sql.statements();
    assert_eq!((sqlite.tag(), mysql.tag()), (None, None));
    let tag = postgres
        .tag()
        .expect("every PostgreSQL statement has a tag");
    assert!(tag.starts_with("stateguard "), "{tag}");
    assert_eq!(
        postgres.returns().first(),
        Some(&stateguard::meta::Column::Tag),
        "the tag is the first column"
    );
    postgres
        .text()
        .replace(&crate::common::tag_column(&postgres), "TAG")
}

#[test]
fn sql_text_per_dialect() {
    let cancel = PayoutStatus::cancel().def().update_sql();
    assert_eq!(
        pg(cancel),
        r#"UPDATE "billing"."payouts" SET "status" = 'cancelled' WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" IN ('pending', 'sending') RETURNING TAG"#
    );
    assert_eq!(
        cancel.sqlite(),
        r#"UPDATE "billing"."payouts" SET "status" = 'cancelled' WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB) AND "status" IN ('pending', 'sending')"#
    );
    assert_eq!(
        cancel.mysql(),
        "UPDATE `billing`.`payouts` SET `status` = 'cancelled' WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND `status` IN ('pending', 'sending') AND CAST(`status` AS BINARY) IN ('pending', 'sending')"
    );
    assert_eq!(
        pg(PayoutStatus::confirm().def().update_sql()),
        r#"UPDATE "billing"."payouts" SET "status" = 'sent', "sent_at" = (CURRENT_TIMESTAMP), "type" = ('wire') WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" IN ('sending') RETURNING TAG"#
    );
    let select = PayoutStatus::MACHINE.select_sql();
    assert_eq!(
        pg(select),
        r#"SELECT TAG, __sg_r.__sg_f, __sg_r.__sg_c0, __sg_r.__sg_c1 FROM (SELECT 1) AS __sg_one LEFT JOIN LATERAL (SELECT CAST(1 AS BIGINT) AS __sg_f, "status"::text AS __sg_c0, CAST(0 AS BIGINT) AS __sg_c1 FROM "billing"."payouts" WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT)) AS __sg_r ON true"#
    );
    assert_eq!(
        select.sqlite(),
        r#"SELECT "status", CAST(0 AS INTEGER) FROM "billing"."payouts" WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB)"#
    );
    assert_eq!(
        select.mysql(),
        "SELECT CAST(`status` AS CHAR), CAST(0 AS SIGNED) FROM `billing`.`payouts` WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) LOCK IN SHARE MODE"
    );
    // Inside a caller's transaction the PostgreSQL read locks the row, so
    // that it sees the latest row or fails with 40001, not a snapshot.
    let select = PayoutStatus::MACHINE.select_in_transaction_sql();
    assert_eq!(
        pg(select),
        r#"SELECT TAG, __sg_r.__sg_f, __sg_r.__sg_c0, __sg_r.__sg_c1 FROM (SELECT 1) AS __sg_one LEFT JOIN LATERAL (SELECT CAST(1 AS BIGINT) AS __sg_f, "status"::text AS __sg_c0, CAST(0 AS BIGINT) AS __sg_c1 FROM "billing"."payouts" WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) FOR SHARE) AS __sg_r ON true"#
    );
    assert_eq!(select.sqlite(), PayoutStatus::MACHINE.select_sql().sqlite());
    assert_eq!(select.mysql(), PayoutStatus::MACHINE.select_sql().mysql());
}

#[test]
fn database_strings_round_trip() {
    for state in PayoutStatus::MACHINE.states() {
        let value = state.value();
        assert_eq!(value.as_str(), state.db_str());
        assert_eq!(value.to_string(), state.db_str());
        assert_eq!(state.db_str().parse::<PayoutStatus>(), Ok(value));
        assert_eq!(PayoutStatus::from_db_str(state.db_str()), Some(value));
    }
    assert_eq!(OrderState::AwaitingPayment.as_str(), "AWAITING-PAYMENT");
    assert_eq!(OrderState::pay().target().as_str(), "AWAITING-SHIPMENT");
}

#[test]
fn unknown_strings_are_errors_that_carry_them() {
    // Matching is exact: the database string, not the variant name.
    for bad in ["Pending", "PENDING", "failed", "", " pending", "pending\0"] {
        let error: UnknownState = bad.parse::<PayoutStatus>().unwrap_err();
        assert_eq!(error.value(), bad);
        assert_eq!(error.machine(), "PayoutStatus");
        let message = error.to_string();
        assert!(message.contains(&format!("{bad:?}")), "{message}");
        assert!(message.contains("billing.payouts"), "{message}");
    }
}

#[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
#[state_machine(
    table = "transfers",
    column = "status",
    key = "id",
    version = "version"
)]
enum TransferStatus {
    #[state(initial)]
    #[transition(start -> Sending)]
    Pending,
    #[state(in_flight(lease = "1500ms", since = "sending_since", done = confirm, failed = fail))]
    #[transition(confirm -> Sent)]
    #[transition(fail -> Failed)]
    Sending,
    Sent,
    #[transition(retry -> Sending)]
    Failed,
}

#[test]
fn version_and_in_flight_sql() {
    let start = TransferStatus::start().def().update_sql();
    assert_eq!(
        pg(start),
        r#"UPDATE "transfers" SET "status" = 'sending', "sending_since" = statement_timestamp(), "version" = COALESCE("version", 0) + 1 WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" IN ('pending') RETURNING TAG, CAST(COALESCE("version", 0) AS BIGINT), COALESCE(CAST(EXTRACT(EPOCH FROM "sending_since") * 1000000 AS BIGINT), 0)"#
    );
    assert_eq!(
        start.sqlite(),
        r#"UPDATE "transfers" SET "status" = 'sending', "sending_since" = strftime('%Y-%m-%d %H:%M:%f', 'now'), "version" = COALESCE("version", 0) + 1 WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB) AND "status" IN ('pending') RETURNING CAST(COALESCE("version", 0) AS INTEGER), COALESCE(CAST(ROUND(unixepoch("sending_since", 'subsec') * 1000) AS INTEGER), 0)"#
    );
    assert_eq!(
        start.mysql(),
        "UPDATE `transfers` SET `status` = 'sending', `sending_since` = UTC_TIMESTAMP(3), `version` = LAST_INSERT_ID(COALESCE(`version`, 0) + 1) WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND `status` IN ('pending') AND CAST(`status` AS BINARY) IN ('pending')"
    );
    // Leaving the in-flight state does not stamp it.
    assert_eq!(
        pg(TransferStatus::confirm().def().update_sql()),
        r#"UPDATE "transfers" SET "status" = 'sent', "version" = COALESCE("version", 0) + 1 WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" IN ('sending') RETURNING TAG, CAST(COALESCE("version", 0) AS BIGINT)"#
    );

    assert_eq!(
        TransferStatus::start().def().since_column(),
        Some("sending_since")
    );
    assert_eq!(TransferStatus::confirm().def().since_column(), None);
    let sending = TransferStatus::MACHINE
        .state(TransferStatus::Sending)
        .and_then(|s| s.in_flight())
        .expect("Sending is in flight");
    assert_eq!(sending.lease(), std::time::Duration::from_millis(1500));
    assert_eq!(sending.since_column(), "sending_since");
    assert_eq!(sending.done(), TransferStatus::confirm());
    assert_eq!(sending.failed(), Some(TransferStatus::fail()));
    assert_eq!(
        pg(sending.expired_sql()),
        r#"SELECT TAG, "id", CAST(COALESCE("version", 0) AS BIGINT) FROM "transfers" WHERE "status" = 'sending' AND ("sending_since" IS NULL OR "sending_since" < statement_timestamp() - INTERVAL '1500 milliseconds') ORDER BY "sending_since" IS NOT NULL, "sending_since" LIMIT $1"#
    );
    assert_eq!(
        sending.claim_sql().sqlite(),
        r#"UPDATE "transfers" SET "sending_since" = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB) AND "status" = 'sending' AND ("sending_since" IS NULL OR "sending_since" < strftime('%Y-%m-%d %H:%M:%f', 'now', '-1.500 seconds')) AND COALESCE("version", 0) = ?2 RETURNING COALESCE(CAST(ROUND(unixepoch("sending_since", 'subsec') * 1000) AS INTEGER), 0)"#
    );
    // The follow-ups and the renewal are tied to the occurrence and to the
    // lease token: a worker whose lease was taken over cannot move the row.
    assert_eq!(
        pg(sending.done_sql()),
        r#"UPDATE "transfers" SET "status" = 'sent', "version" = COALESCE("version", 0) + 1 WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT) AND "status" = 'sending' AND COALESCE("version", 0) = $2 AND COALESCE(CAST(EXTRACT(EPOCH FROM "sending_since") * 1000000 AS BIGINT), 0) = $3 RETURNING TAG"#
    );
    assert_eq!(
        sending.renew_sql().sqlite(),
        r#"UPDATE "transfers" SET "sending_since" = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE "id" = ?1 AND CAST("id" AS BLOB) = CAST(?1 AS BLOB) AND "status" = 'sending' AND COALESCE("version", 0) = ?2 AND COALESCE(CAST(ROUND(unixepoch("sending_since", 'subsec') * 1000) AS INTEGER), 0) = ?3 RETURNING COALESCE(CAST(ROUND(unixepoch("sending_since", 'subsec') * 1000) AS INTEGER), 0)"#
    );
    assert_eq!(
        sending.renew_sql().mysql(),
        "UPDATE `transfers` SET `sending_since` = UTC_TIMESTAMP(3) WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND `status` = 'sending' AND CAST(`status` AS BINARY) = 'sending' AND COALESCE(`version`, 0) = ? AND COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', `sending_since`), 0) = ?"
    );
    assert_eq!(
        sending.lease_read_sql().mysql(),
        "SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', `sending_since`), 0) FROM `transfers` WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY)"
    );
    assert_eq!(
        pg(sending.follow_up_read_sql()),
        r#"SELECT TAG, __sg_r.__sg_f, __sg_r.__sg_c0, __sg_r.__sg_c1, __sg_r.__sg_c2 FROM (SELECT 1) AS __sg_one LEFT JOIN LATERAL (SELECT CAST(1 AS BIGINT) AS __sg_f, "status"::text AS __sg_c0, CAST(COALESCE("version", 0) AS BIGINT) AS __sg_c1, COALESCE(CAST(EXTRACT(EPOCH FROM "sending_since") * 1000000 AS BIGINT), 0) AS __sg_c2 FROM "transfers" WHERE "id" = $1 AND CAST("id" AS TEXT) COLLATE "C" = CAST($1 AS TEXT)) AS __sg_r ON true"#
    );
    assert_eq!(
        TransferStatus::start().def().read_back_sql().mysql(),
        "SELECT CAST(LAST_INSERT_ID() AS SIGNED), (SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', `sending_since`), 0) FROM `transfers` WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND COALESCE(`version`, 0) = LAST_INSERT_ID())"
    );
    // Out of the in-flight state: the UPDATE's own result carries the
    // version, nothing is read back.
    assert_eq!(TransferStatus::confirm().def().read_back_sql().mysql(), "");
    assert_eq!(TransferStatus::start().def().read_back_sql().postgres(), "");
    assert_eq!(
        sending.claim_sql().mysql(),
        "UPDATE `transfers` SET `sending_since` = UTC_TIMESTAMP(3) WHERE `id` = ? AND CAST(`id` AS BINARY) = CAST(? AS BINARY) AND `status` = 'sending' AND CAST(`status` AS BINARY) = 'sending' AND (`sending_since` IS NULL OR `sending_since` < UTC_TIMESTAMP(3) - INTERVAL 1500000 MICROSECOND) AND COALESCE(`version`, 0) = ?"
    );
    assert!(
        TransferStatus::MACHINE
            .state(TransferStatus::Sent)
            .and_then(|s| s.in_flight())
            .is_none()
    );
}

mod renamed {
    use stateguard as guard;

    /// `crate = "…"` points the generated code at a renamed dependency.
    #[derive(guard::StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(table = "t", column = "s", key = "k", crate = "guard")]
    pub enum Renamed {
        #[state(initial)]
        #[transition(go -> B)]
        A,
        B,
    }
}

#[test]
fn a_renamed_dependency_works_through_crate() {
    use renamed::Renamed;
    assert_eq!(Renamed::go().target(), Renamed::B);
    assert_eq!(<Renamed as StateMachine>::MACHINE.table(), "t");
}

/// The derive's statements stamp a `since` column with the runtime's clock
/// text (the one the idempotency and inbox statements use), in every
/// dialect: the two crates write it apart and must agree.
#[test]
fn the_derive_stamps_with_the_runtimes_clock() {
    let sending = TransferStatus::MACHINE
        .state(TransferStatus::Sending)
        .and_then(|s| s.in_flight())
        .expect("Sending is in flight");
    let renew = sending.renew_sql();
    let texts = [renew.postgres(), renew.sqlite(), renew.mysql()];
    for (text, now) in texts.into_iter().zip(stateguard::__private::NOW) {
        let quote = if text.contains('`') { '`' } else { '"' };
        let stamp = format!("SET {quote}sending_since{quote} = {now} WHERE");
        assert!(text.contains(&stamp), "{text} does not stamp with {now}");
    }
}

/// Machines named like what the generated metadata names bare (`None`,
/// `Some`) or through its alias (`__sg`): the derive spells those in full
/// for them, so they build and read back as any other machine.
mod names_the_expansion_uses {
    #![allow(non_camel_case_types)]

    use stateguard::StateMachine;

    #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(table = "nones", column = "status", key = "id")]
    pub enum None {
        #[state(initial)]
        #[transition(close -> Closed)]
        Open,
        Closed,
    }

    #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(table = "somes", column = "status", key = "id")]
    pub enum Some {
        #[state(initial)]
        #[transition(close -> Closed)]
        Open,
        Closed,
    }

    #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(table = "sgs", column = "status", key = "id")]
    pub enum __sg {
        #[state(initial)]
        #[transition(close -> Closed)]
        Open,
        Closed,
    }

    #[test]
    fn machines_named_none_some_and_the_alias_build() {
        assert_eq!(None::close().target(), None::Closed);
        assert_eq!(None::MACHINE.initial(), None::Open);
        assert_eq!(Some::MACHINE.table(), "somes");
        assert_eq!(__sg::MACHINE.states().len(), 2);
        assert!(
            None::MACHINE.transitions()[0]
                .update_sql()
                .sqlite()
                .contains("'closed'")
        );
    }
}

/// An enum with its own `Display` and `FromStr` (or its own sqlx
/// derive) opts out of the derive's: `conversions = false` keeps them
/// from clashing, and the machine works on its database strings all the
/// same.
mod own_conversions {
    use std::fmt;
    use std::str::FromStr;

    use stateguard::StateMachine;

    #[derive(StateMachine, Debug, Clone, Copy, PartialEq, Eq)]
    #[state_machine(table = "tickets", column = "status", key = "id", conversions = false)]
    pub enum TicketStatus {
        #[state(initial)]
        #[transition(close -> Closed)]
        Open,
        Closed,
    }

    impl fmt::Display for TicketStatus {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(match self {
                TicketStatus::Open => "Open ticket",
                TicketStatus::Closed => "Closed ticket",
            })
        }
    }

    impl FromStr for TicketStatus {
        type Err = ();
        fn from_str(text: &str) -> Result<Self, ()> {
            match text {
                "Open ticket" => Ok(TicketStatus::Open),
                "Closed ticket" => Ok(TicketStatus::Closed),
                _ => Err(()),
            }
        }
    }

    #[test]
    fn the_enums_own_impls_stay_and_the_machine_keeps_its_strings() {
        assert_eq!(TicketStatus::Open.to_string(), "Open ticket");
        assert_eq!("Closed ticket".parse(), Ok(TicketStatus::Closed));
        assert_eq!(TicketStatus::Closed.as_str(), "closed");
        assert_eq!(
            TicketStatus::parse_db_str("open").ok(),
            Some(TicketStatus::Open)
        );
        assert!(
            TicketStatus::close()
                .def()
                .update_sql()
                .sqlite()
                .contains("'closed'")
        );
    }
}

/// `Machine::counts` stops each state's count one past the runtime's
/// `COUNT_CAP`, in every dialect: the derive writes the limit, the runtime
/// reads what it means.
#[test]
fn counts_stop_one_past_the_cap() {
    let limit = format!("LIMIT {}", stateguard::COUNT_CAP + 1);
    let machine = crate::status::PayoutStatus::MACHINE;
    for text in machine.counts_sql().statements().map(|s| s.text()) {
        assert_eq!(
            text.matches(&limit).count(),
            machine.states().len(),
            "{text}"
        );
    }
}
