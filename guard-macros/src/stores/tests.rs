use super::*;
use crate::plan::Field;

type Statements = Vec<[Rendered; 3]>;

fn rendered(
    builders: &[fn(Dialect, &Place) -> String],
    place: &Place,
) -> Result<Statements, String> {
    builders
        .iter()
        .map(|build| {
            let [pg, lite, my] = DIALECTS.map(|d| plan::render(d, &build(d, place)));
            Ok([pg?, lite?, my?])
        })
        .collect()
}

fn every(place: &Place) -> Result<Statements, String> {
    let mut all = rendered(&idempotency::STATEMENTS, place)?;
    all.extend(rendered(&inbox::STATEMENTS, place)?);
    all.extend(rendered(&outbox::STATEMENTS, place)?);
    all.extend(rendered(&catalog::STATEMENTS, place)?);
    Ok(all)
}

const PLAIN: Place = Place { schema: None };

fn payments() -> Place {
    Place {
        schema: Some("payments".to_owned()),
    }
}

/// Every PostgreSQL statement binds its tag last and returns it first;
/// the other dialects have none.
#[test]
fn postgres_statements_are_tagged_and_bind_their_tag_last() -> Result<(), String> {
    for [pg, lite, my] in every(&PLAIN)? {
        let tag = pg.tag.as_deref().unwrap_or_default();
        assert_eq!(pg.plan.last(), Some(&Slot::Tag), "{}", pg.text);
        let column = plan::tag_column(tag, &format!("${}", pg.plan.len()));
        assert!(
            pg.text.contains(&format!("SELECT {column}"))
                || pg.text.contains(&format!("RETURNING {column}")),
            "{}",
            pg.text
        );
        assert!(!lite.plan.contains(&Slot::Tag) && !my.plan.contains(&Slot::Tag));
        assert_eq!((lite.tag, my.tag), (None, None));
    }
    Ok(())
}

/// MySQL's plan follows its text, where a value comes before the key
/// it updates: no hand-written order.
#[test]
fn mysql_binds_in_text_order() -> Result<(), String> {
    let statements = rendered(&idempotency::STATEMENTS, &PLAIN)?;
    let [_, _, take_over] = &statements[2];
    assert_eq!(
        take_over.plan,
        [Field::Millis, Field::Scope, Field::Key, Field::Lease].map(Slot::Field)
    );
    let [_, _, complete] = &statements[3];
    assert_eq!(
        complete.plan,
        [
            Field::Status,
            Field::Body,
            Field::Headers,
            Field::Scope,
            Field::Key,
            Field::Lease
        ]
        .map(Slot::Field)
    );
    Ok(())
}

/// A schema's statement is the plain one with the quoted schema before
/// each table name, under a tag of its own.
#[test]
fn a_schema_names_every_table_and_gets_its_own_tags() -> Result<(), String> {
    let (plain, schema) = (every(&PLAIN)?, every(&payments())?);
    for (plain, schema) in plain.iter().zip(&schema) {
        for (i, quoted) in ["\"payments\".", "\"payments\".", "`payments`."]
            .iter()
            .enumerate()
        {
            let (plain, schema) = (&plain[i], &schema[i]);
            let mut expected = plain.text.clone();
            for table in [idempotency::TABLE, inbox::TABLE, outbox::TABLE] {
                expected = expected.replace(table, &format!("{quoted}{table}"));
            }
            if let (Some(plain_tag), Some(tag)) = (&plain.tag, &schema.tag) {
                expected = expected.replace(plain_tag, tag);
                let changed = expected != plain.text;
                assert_eq!(changed, plain_tag != tag, "{}", plain.text);
            }
            assert_eq!(schema.text, expected);
            assert_eq!(schema.plan, plain.plan);
        }
    }
    Ok(())
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

#[test]
fn the_ddl_creates_the_tables_in_the_schema() {
    let at = payments();
    let pg = idempotency::ddl(Dialect::Postgres, &at);
    assert!(pg[0].starts_with("CREATE TABLE \"payments\".stateguard_idempotency ("));
    assert_eq!(
        pg[1],
        "CREATE INDEX stateguard_idempotency_created_at ON \"payments\".stateguard_idempotency (created_at)"
    );
    // SQLite names the index's schema, not its table's.
    assert_eq!(
        idempotency::ddl(Dialect::Sqlite, &at)[1],
        "CREATE INDEX \"payments\".stateguard_idempotency_created_at ON stateguard_idempotency (created_at)"
    );
    assert!(
        idempotency::ddl(Dialect::MySql, &at)[0]
            .starts_with("CREATE TABLE `payments`.stateguard_idempotency (")
    );
    assert!(
        inbox::ddl(Dialect::Postgres, &PLAIN)[0].starts_with("CREATE TABLE stateguard_inbox (")
    );
    let pg = outbox::ddl(Dialect::Postgres, &at);
    assert!(pg[0].starts_with("CREATE TABLE \"payments\".stateguard_outbox ("));
    assert!(
        pg[1..]
            .iter()
            .all(|index| index.contains(" ON \"payments\".stateguard_outbox ("))
    );
    assert!(
        outbox::ddl(Dialect::Sqlite, &at)[1..]
            .iter()
            .all(|index| index.starts_with("CREATE INDEX \"payments\"."))
    );
}
