use super::{DEFAULT, Stores};
use crate::dialect::{Sql, Statement};
use crate::transition::bind::Field;

static PAYMENTS: Stores = crate::stores!(schema = "payments");

/// Every statement of `stores`, by name.
fn statements(stores: &Stores) -> [(&'static str, &Sql<Statement<Field>>); 17] {
    let (i, b, o) = (&stores.idempotency, &stores.inbox, &stores.outbox);
    [
        ("read", &i.read),
        ("claim", &i.claim),
        ("take_over", &i.take_over),
        ("complete", &i.complete),
        ("release", &i.release),
        ("prune", &i.prune),
        ("receive", &b.receive),
        ("inbox prune", &b.prune),
        ("enqueue", &o.enqueue),
        ("claim due", &o.claim),
        ("taken", &o.taken),
        ("published", &o.published),
        ("failed", &o.failed),
        ("dead", &o.dead),
        ("requeue", &o.requeue),
        ("outbox prune", &o.prune),
        ("status", &o.status),
    ]
}

/// The stores read the time as the machines' statements do, and only so.
#[test]
fn every_statement_reads_the_one_clock() {
    for stores in [&DEFAULT, &PAYMENTS] {
        for (name, sql) in statements(stores) {
            for (dialect, statement) in [
                ("postgres", sql.postgres),
                ("sqlite", sql.sqlite),
                ("mysql", sql.mysql),
            ] {
                crate::dialect::assert_clock(name, dialect, statement.text());
            }
        }
    }
}

/// A schema's statements name its tables, and only its tables; each has
/// a tag of its own, bound last.
#[test]
fn a_schema_names_every_table_and_tags_its_statements() {
    for ((name, plain), (_, schema)) in statements(&DEFAULT).into_iter().zip(statements(&PAYMENTS))
    {
        for (plain, schema, quoted) in [
            (plain.postgres, schema.postgres, "\"payments\".stateguard_"),
            (plain.sqlite, schema.sqlite, "\"payments\".stateguard_"),
            (plain.mysql, schema.mysql, "`payments`.stateguard_"),
        ] {
            assert!(!plain.text().contains("payments"), "{name}");
            assert_eq!(
                schema.text().matches(quoted).count(),
                schema.text().matches("stateguard_").count(),
                "{name}: {}",
                schema.text()
            );
            assert_eq!(schema.binds(), plain.binds(), "{name}");
        }
        let (plain, schema) = (plain.postgres, schema.postgres);
        assert_ne!(plain.tag(), schema.tag(), "{name}");
        assert_eq!(plain.binds().last(), Some(&Field::Tag), "{name}");
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
    // SQLite names the index's schema, not its table's.
    assert_eq!(
        lite[1],
        "CREATE INDEX \"payments\".stateguard_idempotency_created_at ON stateguard_idempotency (created_at)"
    );
    assert!(my[0].starts_with("CREATE TABLE `payments`.stateguard_idempotency ("));
    let (pg, ..) = DEFAULT.inbox.ddl;
    assert!(pg[0].starts_with("CREATE TABLE stateguard_inbox ("));
}
