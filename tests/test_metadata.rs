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

#[test]
fn sql_text_per_dialect() {
    let cancel = PayoutStatus::cancel().def().update_sql();
    assert_eq!(
        cancel.postgres(),
        r#"UPDATE "billing"."payouts" SET "status" = 'cancelled' WHERE "id" = $1 AND "status" IN ('pending', 'sending')"#
    );
    assert_eq!(
        cancel.sqlite(),
        r#"UPDATE "billing"."payouts" SET "status" = 'cancelled' WHERE "id" = ?1 AND "status" IN ('pending', 'sending')"#
    );
    assert_eq!(
        cancel.mysql(),
        "UPDATE `billing`.`payouts` SET `status` = 'cancelled' WHERE `id` = ? AND `status` IN ('pending', 'sending')"
    );
    assert_eq!(
        PayoutStatus::confirm().def().update_sql().postgres(),
        r#"UPDATE "billing"."payouts" SET "status" = 'sent', "sent_at" = CURRENT_TIMESTAMP, "type" = 'wire' WHERE "id" = $1 AND "status" IN ('sending')"#
    );
    let select = PayoutStatus::MACHINE.select_sql();
    assert_eq!(
        select.postgres(),
        r#"SELECT "status"::text FROM "billing"."payouts" WHERE "id" = $1"#
    );
    assert_eq!(
        select.sqlite(),
        r#"SELECT "status" FROM "billing"."payouts" WHERE "id" = ?1"#
    );
    assert_eq!(
        select.mysql(),
        "SELECT CAST(`status` AS CHAR) FROM `billing`.`payouts` WHERE `id` = ?"
    );
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
