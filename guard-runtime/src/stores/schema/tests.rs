use super::{DEFAULT, Stores, plain_identifier};

static PAYMENTS: Stores = crate::stores!(schema = "payments");

#[test]
fn every_statement_has_a_plan_entry_per_placeholder() {
    let (i, b) = (&DEFAULT.idempotency, &DEFAULT.inbox);
    for (name, sql) in [
        ("READ", &i.read),
        ("CLAIM", &i.claim),
        ("TAKE_OVER", &i.take_over),
        ("COMPLETE", &i.complete),
        ("RELEASE", &i.release),
        ("PRUNE", &i.prune),
        ("RECEIVE", &b.receive),
        ("INBOX PRUNE", &b.prune),
        ("ENQUEUE", &DEFAULT.outbox.enqueue),
        ("CLAIM DUE", &DEFAULT.outbox.claim),
        ("TAKEN", &DEFAULT.outbox.taken),
        ("PUBLISHED", &DEFAULT.outbox.published),
        ("FAILED", &DEFAULT.outbox.failed),
        ("DEAD", &DEFAULT.outbox.dead),
        ("REQUEUE", &DEFAULT.outbox.requeue),
        ("OUTBOX PRUNE", &DEFAULT.outbox.prune),
        ("STATUS", &DEFAULT.outbox.status),
    ] {
        crate::transition::bind::assert_plans_fit(name, sql);
    }
}

/// A schema's statement is the default one with the quoted schema
/// before each table name, and the schema in its tag.
#[test]
fn a_schema_names_every_table_and_tags_its_statements() {
    let pairs = [
        (&DEFAULT.idempotency.read, &PAYMENTS.idempotency.read),
        (&DEFAULT.idempotency.claim, &PAYMENTS.idempotency.claim),
        (
            &DEFAULT.idempotency.take_over,
            &PAYMENTS.idempotency.take_over,
        ),
        (
            &DEFAULT.idempotency.complete,
            &PAYMENTS.idempotency.complete,
        ),
        (&DEFAULT.idempotency.release, &PAYMENTS.idempotency.release),
        (&DEFAULT.idempotency.prune, &PAYMENTS.idempotency.prune),
        (&DEFAULT.inbox.receive, &PAYMENTS.inbox.receive),
        (&DEFAULT.inbox.prune, &PAYMENTS.inbox.prune),
        (&DEFAULT.outbox.enqueue, &PAYMENTS.outbox.enqueue),
        (&DEFAULT.outbox.claim, &PAYMENTS.outbox.claim),
        (&DEFAULT.outbox.taken, &PAYMENTS.outbox.taken),
        (&DEFAULT.outbox.published, &PAYMENTS.outbox.published),
        (&DEFAULT.outbox.failed, &PAYMENTS.outbox.failed),
        (&DEFAULT.outbox.dead, &PAYMENTS.outbox.dead),
        (&DEFAULT.outbox.requeue, &PAYMENTS.outbox.requeue),
        (&DEFAULT.outbox.prune, &PAYMENTS.outbox.prune),
        (&DEFAULT.outbox.status, &PAYMENTS.outbox.status),
    ];
    for (plain, schema) in pairs {
        for (dialect, quoted) in [
            (0, "\"payments\"."),
            (1, "\"payments\"."),
            (2, "`payments`."),
        ] {
            let pick = |sql: &crate::dialect::Sql<
                crate::dialect::Statement<crate::transition::bind::Field>,
            >| [sql.postgres, sql.sqlite, sql.mysql][dialect];
            let (plain, schema) = (pick(plain), pick(schema));
            let mut expected = plain
                .text()
                .replace(
                    "stateguard_idempotency",
                    &format!("{quoted}stateguard_idempotency"),
                )
                .replace("stateguard_inbox", &format!("{quoted}stateguard_inbox"))
                .replace("stateguard_outbox", &format!("{quoted}stateguard_outbox"));
            if let Some(tag) = plain.tag() {
                expected = expected.replace(tag, &format!("{tag} payments"));
                assert_eq!(schema.tag(), Some(format!("{tag} payments").as_str()));
            }
            assert_eq!(schema.text(), expected);
            assert_eq!(schema.binds(), plain.binds());
        }
    }
    assert_eq!(
        PAYMENTS.idempotency.table,
        "payments.stateguard_idempotency"
    );
    assert_eq!(PAYMENTS.inbox.table, "payments.stateguard_inbox");
    assert_eq!(PAYMENTS.outbox.table, "payments.stateguard_outbox");
}

#[test]
fn the_ddl_creates_the_tables_in_the_schema() {
    let (pg, lite, my) = PAYMENTS.idempotency.ddl;
    assert!(pg[0].starts_with("CREATE TABLE \"payments\".stateguard_idempotency ("));
    assert_eq!(
        pg[1],
        "CREATE INDEX stateguard_idempotency_created_at ON \"payments\".stateguard_idempotency (created_at)"
    );
    // SQLite names the index's schema, not its table's.
    assert_eq!(
        lite[1],
        "CREATE INDEX \"payments\".stateguard_idempotency_created_at ON stateguard_idempotency (created_at)"
    );
    assert!(my[0].starts_with("CREATE TABLE `payments`.stateguard_idempotency ("));
    let (pg, ..) = DEFAULT.inbox.ddl;
    assert!(pg[0].starts_with("CREATE TABLE stateguard_inbox ("));
    let (pg, lite, my) = PAYMENTS.outbox.ddl;
    assert!(pg[0].starts_with("CREATE TABLE \"payments\".stateguard_outbox ("));
    assert!(
        pg[1..]
            .iter()
            .all(|index| index.contains(" ON \"payments\".stateguard_outbox ("))
    );
    assert!(
        lite[1..]
            .iter()
            .all(|index| index.starts_with("CREATE INDEX \"payments\"."))
    );
    assert!(my[0].starts_with("CREATE TABLE `payments`.stateguard_outbox ("));
}

#[test]
fn only_a_plain_identifier_is_a_schema() {
    for good in ["payments", "_p", "p2", "A_b_9"] {
        assert!(plain_identifier(good), "{good}");
    }
    let long = "a".repeat(64);
    for bad in [
        "",
        "2p",
        "pay ments",
        "pay\"ments",
        "pay`ments",
        "pay.ments",
        "pay'",
        "é",
        &long,
    ] {
        assert!(!plain_identifier(bad), "{bad}");
    }
}
